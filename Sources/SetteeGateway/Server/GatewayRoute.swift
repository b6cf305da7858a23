import SetteeCore

/// The gateway's URL space as a pure function of (port, method, path): which endpoint a request
/// names, with its database, document id and attachment or principal name percent-decoded, or why
/// none does (404 unknown URL, 405 with the methods allowed). Sync Gateway's rules: a database name or
/// document id never starts with `_` (so `_local/`, `_user/`, ... are separate routes), `/db` and `/db/`
/// are the same, an escaped `%2F` stays inside a document id, attachment names may contain `/`.
public enum GatewayEndpoint: String, Sendable, Equatable, CaseIterable {
    case root, allDBs, serverConfig, expvar, metrics, reloadCertificate
    case database, allDocs, bulkDocs, bulkGet, changes, revsDiff, ensureFullCommit
    case session, sessionByID
    case local, document, attachment
    /// `GET /db/_blipsync`: Couchbase Lite's BLIP replication WebSocket (answered here only when not upgraded).
    case blipSync
    case userList, user, roleList, role
    case dbConfig, offline, online, purge, compact, raw, resync
    /// `/{keyspace}/_config/sync` and `/{keyspace}/_config/import_filter` (Sync Gateway 3.x): one keyspace's sync
    /// function or import filter as JavaScript source; `id` is the function's name (`KeyspaceFunction`).
    case keyspaceConfig

    /// Methods this endpoint answers on the public or admin port (HEAD goes with GET).
    public func methods(admin: Bool) -> [String] {
        switch self {
        case .root: return ["GET", "HEAD"]
        case .allDBs, .serverConfig, .expvar, .metrics: return admin ? ["GET", "HEAD"] : []
        case .reloadCertificate: return admin ? ["POST"] : []
        case .database: return admin ? ["GET", "HEAD", "POST", "PUT", "DELETE"] : ["GET", "HEAD", "POST", "PUT"]
        case .allDocs, .changes: return ["GET", "HEAD", "POST"]
        case .blipSync: return ["GET"]
        case .bulkDocs, .bulkGet, .revsDiff, .ensureFullCommit: return ["POST"]
        case .session: return admin ? ["POST"] : ["GET", "HEAD", "POST", "DELETE"]
        case .sessionByID: return admin ? ["GET", "HEAD", "DELETE"] : []
        case .local: return ["GET", "HEAD", "PUT", "DELETE"]
        case .document: return ["GET", "HEAD", "PUT", "DELETE"]
        case .attachment: return ["GET", "HEAD", "PUT"]
        case .userList, .roleList: return admin ? ["GET", "HEAD", "POST"] : []
        case .user, .role: return admin ? ["GET", "HEAD", "PUT", "DELETE"] : []
        case .dbConfig: return admin ? ["GET", "HEAD", "PUT"] : []
        case .keyspaceConfig: return admin ? ["GET", "HEAD", "PUT", "DELETE"] : []
        case .offline, .online, .purge, .resync: return admin ? ["POST"] : []
        case .compact: return admin ? ["GET", "HEAD", "POST"] : []
        case .raw: return admin ? ["GET", "HEAD"] : []
        }
    }

    /// Whether the endpoint names a database (every one but the server-level ones).
    public var needsDatabase: Bool {
        switch self {
        case .root, .allDBs, .serverConfig, .expvar, .metrics, .reloadCertificate: return false
        default: return true
        }
    }

    /// Whether the endpoint's first path segment may name a keyspace (`db.scope.collection`, `db.collection`; Sync
    /// Gateway 3.1's `{keyspace}` paths): document, attachment, `_local`, `_all_docs`, `_bulk_docs`, `_bulk_get`,
    /// `_changes`, `_revs_diff`, `_purge`, `_raw`, `_config/sync`, `_config/import_filter` (ADR 0152), and
    /// `POST /{keyspace}/` (a new document). The others are the
    /// database's (users, roles, sessions, `_config`, `_online`, ...) and take a database name only (ADR 0142).
    public func takesKeyspace(method: String) -> Bool {
        switch self {
        case .document, .attachment, .local, .allDocs, .bulkDocs, .bulkGet, .changes, .revsDiff, .purge, .raw,
            .keyspaceConfig:
            return true
        case .database: return method == "POST"
        default: return false
        }
    }

    /// Endpoints that answer while the database is offline (everything else gets 503).
    public var worksOffline: Bool {
        switch self {
        case .root, .allDBs, .serverConfig, .expvar, .metrics, .reloadCertificate, .database, .offline, .online,
            .dbConfig, .keyspaceConfig, .resync:
            return true
        default: return false
        }
    }
}

/// A matched request: the endpoint and its decoded path parts.
public struct GatewayRoute: Sendable, Equatable {
    public var endpoint: GatewayEndpoint
    /// Database name ("" for server-level endpoints).
    public var db: String
    /// Document id (for `_local/x`: `x`), session id, or user/role name.
    public var id: String
    /// Attachment name (may contain `/`).
    public var attachment: String

    public init(_ endpoint: GatewayEndpoint, db: String = "", id: String = "", attachment: String = "") {
        self.endpoint = endpoint
        self.db = db
        self.id = id
        self.attachment = attachment
    }

    public enum Match: Sendable, Equatable {
        case route(GatewayRoute)
        /// The path names an endpoint that does not answer this method; `allow` lists those it answers.
        case methodNotAllowed(allow: [String])
        case notFound
    }

    /// Resolves `method` + raw (still percent-encoded, no query) `path` on the public or admin port.
    /// OPTIONS resolves to the route so the caller can answer with its `Allow` list.
    public static func match(method: String, path: String, admin: Bool) -> Match {
        guard let route = resolve(path: path) else { return .notFound }
        let methods = route.endpoint.methods(admin: admin)
        if methods.isEmpty { return .notFound }
        if method == "OPTIONS" || methods.contains(method) { return .route(route) }
        return .methodNotAllowed(allow: methods)
    }

    /// The endpoint a path names, whatever the method or port.
    public static func resolve(path: String) -> GatewayRoute? {
        var raw = path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        // Leading "" from the initial slash; a trailing slash leaves one "" too (`/db/` == `/db`,
        // `/db/_user/` == `/db/_user`).
        if raw.first == "" { raw.removeFirst() }
        if raw.last == "" { raw.removeLast() }
        guard let segments = decode(raw) else { return nil }
        return resolve(segments: segments)
    }

    /// The endpoint named by decoded path segments. A reserved segment (one of the first two, starting with `_`)
    /// routes as its decoded form: an escaped `/` in it separates as a written one does, so `/db/_local%2Fckpt`
    /// is `/db/_local/ckpt` (CouchDB reads `_local%2Fckpt` as the local document `_local/ckpt` too), and
    /// `%5Flocal` is `_local`. Elsewhere an escaped `/` stays inside its name: a document id (`/db/a%2Fb` is
    /// `a/b`, as in CouchDB and Sync Gateway) or an attachment name (`att%2Fname` is `att/name`, the same
    /// attachment as `/db/doc/att/name`).
    static func resolve(segments decoded: [String]) -> GatewayRoute? {
        var segments: [String] = []
        segments.reserveCapacity(decoded.count + 2)
        for (i, segment) in decoded.enumerated() {
            if i == segments.count, i < 2, segment.hasPrefix("_"), segment.contains("/") {
                segments.append(
                    contentsOf: segment.split(separator: "/", omittingEmptySubsequences: false).map(String.init))
            } else {
                segments.append(segment)
            }
        }
        // An escaped trailing slash is a trailing slash (`/db/_user%2F` == `/db/_user/`).
        if segments.count > decoded.count, segments.last == "" { segments.removeLast() }
        if segments.isEmpty { return GatewayRoute(.root) }
        // An empty database name, document id or principal name (`//x`, `/db//x`, `/db/_user//`) names
        // nothing: it would reach a handler without a database, and without authentication.
        guard !segments.prefix(2).contains(""), segments.count < 3 || !segments[2].isEmpty else { return nil }
        let first = segments[0]
        if first.hasPrefix("_") {
            guard segments.count == 1 else { return nil }
            switch first {
            case "_all_dbs": return GatewayRoute(.allDBs)
            case "_config": return GatewayRoute(.serverConfig)
            case "_expvar": return GatewayRoute(.expvar)
            case "_metrics": return GatewayRoute(.metrics)
            case "_reload_certificate": return GatewayRoute(.reloadCertificate)
            default: return nil
            }
        }
        let db = first
        if segments.count == 1 { return GatewayRoute(.database, db: db) }
        let second = segments[1]
        let rest = Array(segments.dropFirst(2))
        if !second.hasPrefix("_") {
            if rest.isEmpty { return GatewayRoute(.document, db: db, id: second) }
            return GatewayRoute(.attachment, db: db, id: second, attachment: rest.joined(separator: "/"))
        }
        switch (second, rest.count) {
        case ("_all_docs", 0): return GatewayRoute(.allDocs, db: db)
        case ("_bulk_docs", 0): return GatewayRoute(.bulkDocs, db: db)
        case ("_bulk_get", 0): return GatewayRoute(.bulkGet, db: db)
        case ("_changes", 0): return GatewayRoute(.changes, db: db)
        case ("_blipsync", 0): return GatewayRoute(.blipSync, db: db)
        case ("_revs_diff", 0): return GatewayRoute(.revsDiff, db: db)
        case ("_ensure_full_commit", 0): return GatewayRoute(.ensureFullCommit, db: db)
        case ("_session", 0): return GatewayRoute(.session, db: db)
        case ("_session", 1): return GatewayRoute(.sessionByID, db: db, id: rest[0])
        case ("_local", 1...): return GatewayRoute(.local, db: db, id: rest.joined(separator: "/"))
        case ("_user", 0): return GatewayRoute(.userList, db: db)
        case ("_user", 1): return GatewayRoute(.user, db: db, id: rest[0])
        case ("_role", 0): return GatewayRoute(.roleList, db: db)
        case ("_role", 1): return GatewayRoute(.role, db: db, id: rest[0])
        case ("_config", 0): return GatewayRoute(.dbConfig, db: db)
        case ("_config", 1):
            guard KeyspaceFunction(rawValue: rest[0]) != nil else { return nil }
            return GatewayRoute(.keyspaceConfig, db: db, id: rest[0])
        case ("_offline", 0): return GatewayRoute(.offline, db: db)
        case ("_online", 0): return GatewayRoute(.online, db: db)
        case ("_purge", 0): return GatewayRoute(.purge, db: db)
        case ("_compact", 0): return GatewayRoute(.compact, db: db)
        case ("_raw", 1): return GatewayRoute(.raw, db: db, id: rest[0])
        case ("_resync", 0): return GatewayRoute(.resync, db: db)
        default: return nil
        }
    }

    private static func decode(_ segments: [String]) -> [String]? {
        var out: [String] = []
        out.reserveCapacity(segments.count)
        for s in segments {
            guard let d = PercentEncoding.decode(s) else { return nil }
            out.append(d)
        }
        return out
    }

}
