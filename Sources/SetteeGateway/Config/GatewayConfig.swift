import SetteeCore
import SetteeJSON
import SetteeTLS

/// A Sync Gateway 1.x JSON config file (`settee-gateway sync-gateway-config.json`), backquoted strings
/// allowed. Unknown or invalid fields are errors naming their path.
public struct GatewayConfig: Sendable {
    /// Public REST API listener (`"interface"`, default `":4984"`: every interface).
    public var interface: ListenAddress
    /// Admin REST API listener (`"adminInterface"`, default `"127.0.0.1:4985"`). The admin port does no
    /// authentication, so it is bound only to this address.
    public var adminInterface: ListenAddress
    /// Log keys (`"log": ["CRUD+", "REST+", ...]`): `*` or anything containing `+`/`REST`/`HTTP` turns
    /// request logging on; otherwise the gateway logs at info level.
    public var log: [String]
    /// `log_redaction_level` (Sync Gateway's): how user data (names, document ids, paths) appears in logs;
    /// `partial` (the default) marks it `<ud>…</ud>`.
    public var logRedactionLevel: LogRedactionLevel = .partial
    public var cors: CORSConfig?
    /// Gzip responses for clients that accept it (`"compressResponses"`, default true).
    public var compressResponses: Bool
    /// Indented JSON responses (`"pretty"`); accepted, responses stay compact.
    public var pretty: Bool
    public var databases: [DatabaseConfig]
    /// `SSLCert` / `SSLKey` (Sync Gateway 1.x, top level): PEM certificate chain and private key. With both,
    /// the public and admin interfaces answer TLS only; one without the other is an error (never plain text).
    public var sslCert: String?
    public var sslKey: String?
    /// `tls_minimum_version` (`tlsv1.2` or `tlsv1.3`, as Sync Gateway 3's `api.https.tls_minimum_version`) and
    /// `tls_cipher_suites` (IANA names of TLS 1.2 suites, as Couchbase Server's `cipherSuites`): what the TLS
    /// listeners offer. Default: TLS 1.3, and TLS 1.2 with ECDHE + AEAD suites only (`TLSPolicy.default`, ADR 0144).
    public var tlsPolicy: TLSPolicy = .default
    /// `audit_log_path` (Settee's; Sync Gateway 3.x spells it `logging.audit`): a directory where the gateway's audit
    /// log (`audit.log`, ADR 0148) records logins and admin events; nil: no audit log.
    public var auditLogPath: String?
    /// The config as read (for the admin `GET /_config`; passwords are redacted there).
    public var source: JSON

    public static let defaultInterface = ListenAddress(host: "0.0.0.0", port: 4984)
    public static let defaultAdminInterface = ListenAddress(host: "127.0.0.1", port: 4985)

    /// Parses a config file's bytes.
    public static func parse(_ bytes: [UInt8]) throws(ConfigError) -> GatewayConfig {
        let converted: [UInt8]
        do { converted = try BackquotedJSON.convert(bytes) } catch {
            throw ConfigError(path: "", message: "unterminated backquoted string starting at byte \(error.offset)")
        }
        let json: JSON
        do { json = try JSON.parse(converted) } catch {
            throw ConfigError(path: "", message: "not valid JSON: \(error.description)")
        }
        return try GatewayConfig(json: json)
    }

    public init(json: JSON) throws(ConfigError) {
        var o = try ConfigObject(json, path: "")
        interface =
            try o.string("interface").map { s throws(ConfigError) in
                try ListenAddress.parse(s, path: "interface")
            } ?? Self.defaultInterface
        adminInterface =
            try o.string("adminInterface").map { s throws(ConfigError) in
                try ListenAddress.parse(s, path: "adminInterface")
            } ?? Self.defaultAdminInterface
        log = try o.strings("log") ?? []
        if let level = try o.string("log_redaction_level") {
            guard let parsed = LogRedactionLevel(rawValue: level) else {
                throw ConfigError(path: "log_redaction_level", message: "must be none, partial or full")
            }
            logRedactionLevel = parsed
        }
        compressResponses = try o.bool("compressResponses") ?? true
        sslCert = try o.string("SSLCert")
        sslKey = try o.string("SSLKey")
        if (sslCert == nil) != (sslKey == nil) {
            throw ConfigError(
                path: sslCert == nil ? "SSLCert" : "SSLKey", message: "SSLCert and SSLKey must be given together")
        }
        let tlsMinimum = try o.string("tls_minimum_version")
        let tlsSuites = try o.strings("tls_cipher_suites")
        do { tlsPolicy = try TLSPolicy.parse(minimumVersion: tlsMinimum, cipherSuites: tlsSuites) } catch {
            throw ConfigError(
                path: "\(error)".contains("cipher suite") ? "tls_cipher_suites" : "tls_minimum_version",
                message: "\(error)")
        }
        pretty = try o.bool("pretty") ?? false
        auditLogPath = try o.string("audit_log_path")
        if let path = auditLogPath, !path.hasPrefix("/") {
            throw ConfigError(path: "audit_log_path", message: "must be an absolute directory path")
        }
        if let (key, value) = o.value("CORS") {
            cors = try CORSConfig(json: value, path: key)
        } else {
            cors = nil
        }
        var dbs: [DatabaseConfig] = []
        for member in try o.objectMembers("databases") ?? [] {
            guard DatabaseConfig.isValidName(member.name) else {
                throw ConfigError(
                    path: member.path,
                    message: "invalid database name (lowercase letters, digits and _$()+-/, starting with a letter)")
            }
            dbs.append(try DatabaseConfig(name: member.name, json: member.value, path: member.path))
        }
        databases = dbs
        try o.finish()
        source = json
    }

    /// Whether the `log` keys ask for per-request logging.
    public var logsRequests: Bool {
        log.contains { $0 == "*" || $0.hasPrefix("REST") || $0.hasPrefix("HTTP") }
    }
}

/// `host:port` of a listener. An empty host (`":4984"`) means every interface.
public struct ListenAddress: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }
    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// Whether it listens on this machine's loopback only (`127.x.x.x`, `::1`, `localhost`; empty is every
    /// interface).
    public var isLoopback: Bool {
        !host.isEmpty && CrossOrigin.namesLoopback(host: host.contains(":") ? "[\(host)]" : host)
    }

    /// Parses `":4984"`, `"127.0.0.1:4985"`, `"[::1]:4985"`, `"localhost:4985"` or a bare port `"4985"`.
    public static func parse(_ text: String, path: String) throws(ConfigError) -> ListenAddress {
        var host = ""
        var portText = Substring(text)
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
            host = String(text[text.index(after: text.startIndex)..<close])
            portText = text[text.index(after: close)...]
            guard portText.hasPrefix(":") else {
                throw ConfigError(path: path, message: "must be host:port, got \"\(text)\"")
            }
            portText = portText.dropFirst()
        } else if let colon = text.lastIndex(of: ":") {
            host = String(text[..<colon])
            portText = text[text.index(after: colon)...]
        }
        guard let port = Int(portText), (0...65535).contains(port) else {
            throw ConfigError(path: path, message: "must be host:port with a port 0-65535, got \"\(text)\"")
        }
        return ListenAddress(host: host.isEmpty ? "0.0.0.0" : host, port: port)
    }
}

/// `"CORS": {"Origin": [...], "LoginOrigin": [...], "Headers": [...], "MaxAge": seconds}`.
public struct CORSConfig: Sendable, Equatable {
    /// Origins allowed on the public port; `*` allows any (the request's Origin is echoed back).
    public var origin: [String]
    /// Origins allowed to `POST /db/_session` (log in with a cookie).
    public var loginOrigin: [String]
    /// Request headers allowed besides the simple ones.
    public var headers: [String]
    public var maxAge: Int

    public init(origin: [String] = [], loginOrigin: [String] = [], headers: [String] = [], maxAge: Int = 0) {
        self.origin = origin
        self.loginOrigin = loginOrigin
        self.headers = headers
        self.maxAge = maxAge
    }

    init(json: JSON, path: String) throws(ConfigError) {
        var o = try ConfigObject(json, path: path)
        origin = try o.strings("Origin") ?? []
        loginOrigin = try o.strings("LoginOrigin") ?? []
        headers = try o.strings("Headers") ?? []
        maxAge = try o.int("MaxAge", in: 0...(365 * 86400)) ?? 0
        try o.finish()
    }

    /// The value for `Access-Control-Allow-Origin` when `requestOrigin` is allowed by `list`: the origin itself
    /// when listed, `*` when only `*` allows it. A page answered `*` gets no credentials (no
    /// `Access-Control-Allow-Credentials`, and browsers refuse credentials with `*`), so `"*"` opens public
    /// reads to every site without letting any site act as the logged-in user; origins that need cookies or
    /// Basic credentials must be listed.
    public static func allowedOrigin(_ requestOrigin: String, in list: [String]) -> String? {
        if list.contains(requestOrigin) { return requestOrigin }
        return list.contains("*") ? "*" : nil
    }

    /// Whether to refuse a state change a page of another site may have made a browser send with the user's
    /// cookie or cached Basic credentials: a method other than GET/HEAD/OPTIONS, from a foreign origin that
    /// `config` does not list by name, with a content type a form may send without a CORS preflight (a request
    /// with another content type passed a preflight, which this CORS policy answered).
    public static func refusesCrossSite(
        method: String, origin: String?, host: String?, secFetchSite: String?, contentType: String?,
        config: CORSConfig?
    ) -> Bool {
        guard method != "GET" && method != "HEAD" && method != "OPTIONS" else { return false }
        guard CrossOrigin.isForeign(origin: origin, host: host, secFetchSite: secFetchSite) else { return false }
        if let origin, let config, config.origin.contains(origin) { return false }
        return CrossOrigin.isSimpleContentType(contentType)
    }

    /// Whether a websocket upgrade may come from `origin` (browsers always send it; websockets have no
    /// preflight): no `Origin` (not a browser), a `ws://`/`wss://` one (what websocket client libraries send;
    /// a browser sends its page's `http(s)` origin, or `null`), the gateway's own origin, or one the CORS list
    /// allows.
    public static func allowsWebSocket(origin: String?, host: String?, config: CORSConfig?) -> Bool {
        guard let origin, !origin.hasPrefix("ws://"), !origin.hasPrefix("wss://"),
            CrossOrigin.isForeign(origin: origin, host: host, secFetchSite: nil)
        else { return true }
        guard let config else { return false }
        return allowedOrigin(origin, in: config.origin) != nil
    }
}

/// Where a database's bucket lives (`"server"`).
public enum BucketServer: Sendable, Equatable {
    /// `"walrus:"` (the default): an embedded bucket in a temporary directory, gone at exit.
    case walrus
    /// `"walrus:/path"`, `"/path"`, `"./path"` or `"file:/path"`: an embedded bucket persisted in that directory.
    case directory(String)
    /// `"http://host:8091"` (or `couchbase://host`): a bucket of a settee cluster.
    case cluster(String)

    static func parse(_ text: String, path: String) throws(ConfigError) -> BucketServer {
        if text.isEmpty || text == "walrus:" || text == "walrus://" { return .walrus }
        if text.hasPrefix("walrus:") {
            let rest = String(text.dropFirst("walrus:".count))
            return .directory(rest.hasPrefix("//") ? String(rest.dropFirst(2)) : rest)
        }
        if text.hasPrefix("file://") { return .directory(String(text.dropFirst("file://".count))) }
        if text.hasPrefix("file:") { return .directory(String(text.dropFirst("file:".count))) }
        if text.hasPrefix("http://") || text.hasPrefix("https://") || text.hasPrefix("couchbase://")
            || text.hasPrefix("couchbases://")
        {
            return .cluster(text)
        }
        if text.hasPrefix("/") || text.hasPrefix("./") || text.hasPrefix("../") { return .directory(text) }
        throw ConfigError(
            path: path, message: "must be \"walrus:\", a directory path or http://host:8091, got \"\(text)\"")
    }
}

/// One entry of `"databases"`.
public struct DatabaseConfig: Sendable {
    public var name: String
    public var server: BucketServer
    /// Bucket name (defaults to the database name).
    public var bucket: String
    public var username: String?
    public var password: String?
    /// `cacertpath` (Sync Gateway's): PEM CA file that verifies the cluster's certificate for an `https://` or
    /// `couchbases://` server (a node's self-signed certificate itself will do).
    public var caCertPath: String?
    /// Users and roles to create or update at start-up (`{"GUEST": {"disabled": false, ...}}`).
    public var users: [(name: String, body: JSON)]
    public var roles: [(name: String, body: JSON)]
    /// The sync function's source; nil is `function(doc){channel(doc.channels);}`.
    public var sync: String?
    /// `import_filter` (Sync Gateway's database-level import filter, the legacy config's place for it): which
    /// documents KV clients write are imported; nil: all. With `scopes` each collection gives its own.
    public var importFilter: String?
    /// Revisions kept per branch (`revs_limit`, default 1,000): at least `Limits.gatewayMinRevsLimitWithConflicts`
    /// while `allow_conflicts` is on, at least 1 with it off (Sync Gateway's rule, refused at start-up otherwise).
    public var revsLimit: Int
    public var importDocs: Bool
    public var allowConflicts: Bool
    /// `meta_purge_interval` (days, fractional allowed): tombstones older than this are purged by the database's
    /// tombstone compaction. Nil: the bucket's own metadata purge interval (`purgeInterval`; Couchbase's 3 days when
    /// the bucket names none), as Sync Gateway aligns it with the server's.
    public var metaPurgeIntervalDays: Double?
    /// `compact_interval_days`: how often the tombstone compaction runs by itself (0.04 ... 60; default 1).
    public var compactIntervalDays: Double
    /// `local_doc_expiry_secs` (Sync Gateway's name and default, 90 days): a `_local` document (a replicator's
    /// checkpoint) neither written nor read for this many seconds expires from the bucket (ADR 0151).
    public var localDocExpirySeconds: Int
    /// `old_rev_expiry_seconds` (Sync Gateway's name and default, 300): seconds a replaced revision's body is kept
    /// for replicators and `GET ?rev=` (0 … `Limits.gatewayMaxOldRevExpirySeconds`; 0 keeps it without an age
    /// bound, as Sync Gateway's TTL of 0). With delta sync on, `rev_max_age_seconds` is the window (ADR 0156).
    public var oldRevExpirySeconds: Int
    /// `enable_shared_bucket_access` (Sync Gateway 2.x): metadata in the system XATTR `_sync`, bodies untouched.
    /// On unless the config says `false`, as in Sync Gateway 3.0 and later: SDK applications sharing the bucket read
    /// their own JSON, and a bucket written in the 1.x layout is moved to this one document by document (ADR 0037).
    public var sharedBucketAccess: Bool
    /// Start offline (`"offline": true`); `POST /db/_online` brings it up.
    public var offline: Bool
    /// `"unsupported"` options: accepted and ignored (logged at start-up).
    public var unsupported: JSON?
    /// `"event_handlers"`: webhooks posted on document changes.
    public var eventHandlers: EventHandlersConfig?
    /// `"delta_sync"`: JSON deltas in BLIP `rev` messages (off unless `{"enabled": true}`).
    public var deltaSync: DeltaSyncConfig
    /// `scopes` (Sync Gateway 3.1): the collections the database serves, each a keyspace with its own sync function
    /// (ADR 0142). Nil: the default collection only, with the top-level `sync`.
    public var collections: [CollectionConfig]?
    /// The entry as read, for `GET /db/_config`.
    public var source: JSON

    /// Sync Gateway's database-name rule.
    public static func isValidName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, ("a"..."z").contains(first) else { return false }
        return name.unicodeScalars.allSatisfy { c in
            ("a"..."z").contains(c) || ("0"..."9").contains(c) || "_$()+-/".unicodeScalars.contains(c)
        }
    }

    init(name: String, json: JSON, path: String) throws(ConfigError) {
        var o = try ConfigObject(json, path: path)
        self.name = name
        if let s = try o.string("server") {
            server = try BucketServer.parse(s, path: o.child("server"))
        } else {
            server = .walrus
        }
        bucket = try o.string("bucket") ?? name
        if bucket.isEmpty { throw ConfigError(path: o.child("bucket"), message: "must not be empty") }
        _ = try o.string("pool")
        username = try o.string("username")
        password = try o.string("password")
        caCertPath = try o.string("cacertpath")
        users = try Self.principals(&o, key: "users", isRole: false)
        roles = try Self.principals(&o, key: "roles", isRole: true)
        sync = try o.string("sync")
        importFilter = try o.string("import_filter")
        revsLimit = try o.int("revs_limit", in: 1...Int(Int32.max)) ?? 1000
        if let (k, v) = o.value("import_docs") {
            switch v {
            case .bool(let b): importDocs = b
            case .string("continuous"): importDocs = true
            default: throw ConfigError(path: o.child(k), message: "must be true, false or \"continuous\"")
            }
        } else {
            importDocs = false
        }
        allowConflicts = try o.bool("allow_conflicts") ?? true
        if allowConflicts, revsLimit < Limits.gatewayMinRevsLimitWithConflicts {
            throw ConfigError(
                path: o.child("revs_limit"),
                message:
                    "The revs_limit (\(revsLimit)) value cannot be set lower than \(Limits.gatewayMinRevsLimitWithConflicts) while allow_conflicts is true"
            )
        }
        metaPurgeIntervalDays = try o.double("meta_purge_interval", in: 0...Limits.gatewayMaxMetaPurgeIntervalDays)
        if metaPurgeIntervalDays == 0 {
            throw ConfigError(path: o.child("meta_purge_interval"), message: "must be more than 0 days")
        }
        compactIntervalDays = try o.double("compact_interval_days", in: 0.04...60) ?? Limits.gatewayCompactIntervalDays
        localDocExpirySeconds =
            try o.int("local_doc_expiry_secs", in: 1...Limits.gatewayMaxLocalDocExpirySeconds)
            ?? Limits.gatewayLocalDocExpirySeconds
        oldRevExpirySeconds =
            try o.int("old_rev_expiry_seconds", in: 0...Limits.gatewayMaxOldRevExpirySeconds)
            ?? Limits.gatewayOldRevExpirySeconds
        sharedBucketAccess = try o.bool("enable_shared_bucket_access") ?? true
        offline = try o.bool("offline") ?? false
        if let (k, v) = o.value("event_handlers") {
            eventHandlers = try EventHandlersConfig(json: v, path: o.child(k))
        } else {
            eventHandlers = nil
        }
        if let (k, v) = o.value("delta_sync") {
            deltaSync = try DeltaSyncConfig(json: v, path: o.child(k))
        } else {
            deltaSync = .disabled
        }
        if let (k, v) = o.value("scopes") {
            let parsed = try CollectionConfig.parseScopes(v, path: o.child(k))
            if sync != nil {
                throw ConfigError(
                    path: o.child("sync"), message: "with scopes, each collection gives its own sync function")
            }
            if importFilter != nil {
                throw ConfigError(
                    path: o.child("import_filter"), message: "with scopes, each collection gives its own import filter")
            }
            if case .cluster = server {
            } else if parsed.contains(where: { !$0.keyspace.isDefault }) {
                throw ConfigError(
                    path: o.child(k), message: "named collections need a cluster bucket (server http://host:8091)")
            }
            collections = parsed
        } else {
            collections = nil
        }
        if let (k, v) = o.value("unsupported") {
            guard case .object = v else { throw ConfigError(path: o.child(k), message: "must be an object") }
            unsupported = v
        } else {
            unsupported = nil
        }
        try o.finish()
        source = json
    }

    private static func principals(
        _ o: inout ConfigObject, key: String, isRole: Bool
    ) throws(ConfigError) -> [(name: String, body: JSON)] {
        var out: [(name: String, body: JSON)] = []
        for member in try o.objectMembers(key) ?? [] {
            var p = try ConfigObject(member.value, path: member.path)
            _ = try p.string("name")
            _ = try p.strings("admin_channels")
            _ = try p.strings("all_channels")
            if !isRole {
                _ = try p.string("password")
                _ = try p.strings("admin_roles")
                _ = try p.strings("roles")
                _ = try p.string("email")
                _ = try p.bool("disabled")
            }
            try p.finish()
            out.append((name: member.name, body: member.value))
        }
        return out
    }

    /// The collections the database serves: those of `scopes`, or the default collection with the top-level `sync`.
    public var keyspaces: [CollectionConfig] {
        collections ?? [CollectionConfig(keyspace: .defaultCollection, sync: sync, importFilter: importFilter)]
    }

    /// The entry as `GET /db/_config` shows it: the password replaced by `xxxxx`.
    public var redactedSource: JSON {
        var j = source
        if password != nil { j.set("password", .string("xxxxx")) }
        return j
    }
}
