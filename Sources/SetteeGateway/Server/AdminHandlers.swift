import SetteeCore
import SetteeDiagnostics
import SetteeJSON
import Synchronization

/// Admin-port endpoints over principals and maintenance: `_user/`, `_role/`, `_purge`.
enum AdminHandlers {
    /// `GET|POST /db/_user/`, `GET|PUT|DELETE /db/_user/{name}` and the same for `_role`.
    static func principals(_ r: GatewayRequest) async throws -> GatewayReply {
        let db = r.database
        let isRole = r.route.endpoint == .role || r.route.endpoint == .roleList
        switch (r.route.endpoint, r.method) {
        case (.userList, "GET"), (.userList, "HEAD"), (.roleList, "GET"), (.roleList, "HEAD"):
            return .json(200, .array(await db.principalNames(isRole: isRole).map { .string($0) }))
        case (.userList, "POST"), (.roleList, "POST"):
            let body = try r.bodyJSON()
            guard let name = body["name"]?.stringValue, !name.isEmpty else {
                throw GatewayError.badRequest("Missing name property")
            }
            if (try? await db.principal(name, isRole: isRole)) != nil {
                throw GatewayError.conflict("Already exists")
            }
            _ = try await db.putPrincipal(name, isRole: isRole, body)
            r.audit(isRole ? .gatewayRoleSet : .gatewayUserSet, [principalField(name, isRole: isRole)])
            return .json(201, .object([("ok", .bool(true))]))
        case (_, "GET"), (_, "HEAD"):
            return .json(200, try await db.principal(r.route.id, isRole: isRole))
        case (_, "PUT"):
            let body = try r.bodyJSON()
            if let given = body["name"]?.stringValue, given != r.route.id {
                throw GatewayError.badRequest("Name mismatch")
            }
            let created = try await db.putPrincipal(r.route.id, isRole: isRole, body)
            r.audit(isRole ? .gatewayRoleSet : .gatewayUserSet, [principalField(r.route.id, isRole: isRole)])
            return .json(created ? 201 : 200, .object([("ok", .bool(true))]))
        case (_, "DELETE"):
            try await db.deletePrincipal(r.route.id, isRole: isRole)
            r.audit(isRole ? .gatewayRoleDeleted : .gatewayUserDeleted, [principalField(r.route.id, isRole: isRole)])
            return .json(200, .object([("ok", .bool(true))]))
        default:
            throw GatewayError.status(405, "\(r.method) not allowed")
        }
    }

    /// `POST /db/_purge {"docid": ["*"], ...}` → `{"purged": {...}}`.
    static func purge(_ r: GatewayRequest) async throws -> GatewayReply {
        guard case .object(let members) = try r.bodyJSON() else {
            throw GatewayError.badRequest("Body must be a JSON object")
        }
        var request: [String: [String]] = [:]
        for (id, revs) in members {
            guard let items = revs.arrayValue else {
                throw GatewayError.badRequest("Revisions of \(id) must be an array")
            }
            request[id] = items.compactMap(\.stringValue)
        }
        let reply = try await r.database.purge(request)
        r.audit(.gatewayPurge, [("doc_ids", .array(request.keys.sorted().map { .string(AuditEvent.userData($0)) }))])
        return .json(200, reply)
    }

    /// A user's or role's name as an audit field (user data).
    static func principalField(_ name: String, isRole: Bool) -> (String, JSON) {
        (isRole ? "role" : "user", .string(AuditEvent.userData(name)))
    }
}

extension GatewayRequest {
    /// Records `kind` for this admin request's database (the admin port checks no credentials: the event names the
    /// peer address only).
    func audit(_ kind: AuditEvent.Kind, _ fields: [(String, JSON)] = []) {
        server.audit.record(
            AuditEvent(
                kind, remote: source.map { AuditEvent.Remote(ip: $0) },
                fields: [("db", .string(route.db))] + fields))
    }
}

/// `_compact`, as Sync Gateway 3.x: `type=tombstone` (the default) purges tombstones older than the database's
/// `meta_purge_interval` in the background (`POST`, `action=start` or `stop`), then prunes the due channel removals and
/// the recent sequences of documents not written since (ADR 0151), and `GET` answers its status (`{"status",
/// "start_time", "last_error", "compact_id", "docs_purged", "docs_checked", "channel_history_pruned",
/// "recent_sequences_trimmed"}`); `type=attachment` drops old
/// revision bodies and unreferenced attachment blobs at once (`POST`, 503 while a run is going) and answers
/// `{"revs": N}` (what it changed) with its status, which `GET` answers too (`AttachmentCompactionStatus`, ADR 0151).
extension AdminHandlers {
    static func compact(_ r: GatewayRequest) async throws -> GatewayReply {
        let db = r.database
        if r.method == "POST" {
            r.audit(
                .gatewayCompact,
                [("type", .string(r.query["type"] ?? "tombstone")), ("action", .string(r.query["action"] ?? "start"))])
        }
        switch r.query["type"] ?? "tombstone" {
        case "tombstone":
            if r.method == "GET" || r.method == "HEAD" { return .json(200, db.tombstoneCompactionStatus()) }
            switch r.query["action"] ?? "start" {
            case "start": return .json(200, try db.startTombstoneCompaction())
            case "stop": return .json(200, try db.stopTombstoneCompaction())
            case let other: throw GatewayError.badRequest("Unknown parameter for 'action': \(other)")
            }
        case "attachment":
            if r.method == "GET" || r.method == "HEAD" {
                return .json(200, db.attachmentCompaction.withLock { $0.json() })
            }
            guard let revs = await db.compact() else {
                throw GatewayError.unavailable("An attachment compaction is already running")
            }
            guard case .object(var members) = db.attachmentCompaction.withLock({ $0.json() }) else {
                return .json(200, .object([("revs", .number(Double(revs)))]))
            }
            members.insert(("revs", .number(Double(revs))), at: 0)
            return .json(200, .object(members))
        case let other:
            throw GatewayError.badRequest("Unknown parameter for 'type': \(other)")
        }
    }
}

/// `PUT /db/_config`: replaces a database's config at runtime, as Sync Gateway 1.x does.
extension AdminHandlers {
    /// Fields that say where the bucket is; they are fixed while the gateway runs.
    static let mountFields = ["server", "bucket", "pool", "username", "password", "enable_shared_bucket_access"]

    /// Parses the body as a database entry (backquoted strings allowed, as in the file), carries the mount
    /// fields over when absent (or, for a password, shown redacted), applies it (`reconfigure`: sync
    /// function, `revs_limit`, `import_docs`, `allow_conflicts`, users, roles) and keeps it for `GET`.
    static func putConfig(_ r: GatewayRequest) async throws -> GatewayReply {
        let converted: [UInt8]
        do { converted = try BackquotedJSON.convert(r.body) } catch {
            throw GatewayError.badRequest("Unterminated backquoted string at byte \(error.offset)")
        }
        let json: JSON
        do { json = try JSON.parse(converted, maxValues: GatewayHTTPLimits.maxRequestJSONValues) } catch {
            throw GatewayError.badRequest("Invalid JSON: \(error.reason)")
        }
        guard case .object(let members) = json else {
            throw GatewayError.badRequest("The config must be a JSON object")
        }
        let primary = r.database
        try await r.server.changeDatabaseConfig(r.route.db, primary: primary) { current throws(GatewayError) in
            try mergedConfig(current: current, body: members)
        }
        // The fields named, never their values (a config carries passwords).
        r.audit(.gatewayDatabaseConfigChanged, [("fields", .array(members.map { .string($0.0) }))])
        return .json(201, .object([("ok", .bool(true))]))
    }

    /// The entry `body` describes, on the bucket `current` mounted. A `server`, `bucket`, `username` or
    /// `password` other than the mounted one is a 400: remounting a bucket under live feeds is not supported
    /// (restart the gateway with the new file). Passwords shown as `xxxxx` by `GET` keep their current value.
    static func mergedConfig(current: DatabaseConfig, body: [(String, JSON)]) throws(GatewayError) -> DatabaseConfig {
        let currentMembers = current.source.objectValue ?? []
        func currentValue(_ key: String) -> JSON? { currentMembers.first { $0.0.lowercased() == key }?.1 }
        var merged = body
        for key in mountFields {
            if let i = merged.firstIndex(where: { $0.0.lowercased() == key }) {
                if key == "password", merged[i].1 == .string(redacted), let v = currentValue(key) { merged[i].1 = v }
            } else if let v = currentValue(key) {
                merged.append((key, v))
            }
        }
        if let i = merged.firstIndex(where: { $0.0.lowercased() == "users" }), case .object(let users) = merged[i].1 {
            let currentUsers = currentValue("users")?.objectValue ?? []
            merged[i].1 = .object(
                users.map { name, body in
                    guard body["password"] == .string(redacted), case .object(var m) = body else { return (name, body) }
                    m.removeAll { $0.0 == "password" }
                    if let pw = currentUsers.first(where: { $0.0 == name })?.1["password"] {
                        m.append(("password", pw))
                    }
                    return (name, .object(m))
                })
        }
        let updated: DatabaseConfig
        do { updated = try DatabaseConfig(name: current.name, json: .object(merged), path: "") } catch {
            throw .badRequest(error.description)
        }
        for (field, same) in [
            ("server", updated.server == current.server), ("bucket", updated.bucket == current.bucket),
            ("username", updated.username == current.username), ("password", updated.password == current.password),
            ("enable_shared_bucket_access", updated.sharedBucketAccess == current.sharedBucketAccess),
        ] where !same {
            throw .badRequest(
                "Changing \(field) of a running database is not supported: restart the gateway with the new config")
        }
        return updated
    }

    /// How `GET /db/_config` shows passwords.
    static let redacted = "xxxxx"

    /// `GET|HEAD|PUT|DELETE /{keyspace}/_config/sync` and `/{keyspace}/_config/import_filter` (Sync Gateway 3.x's
    /// "database configuration" API, admin port): `GET` answers the keyspace's source as `application/javascript`
    /// (an empty body when none is configured); `PUT` takes the source as the body (any content type; Sync Gateway
    /// documents `application/javascript`; an empty or blank body is the same as `DELETE`) and `DELETE` removes it
    /// (the default sync function, no import filter), each answering `{"ok":true}`. A change goes through the one
    /// config-change path `PUT /db/_config` uses (`GatewayServer.changeDatabaseConfig`): kept in the database's
    /// entry (`GET /db/_config` shows it), applied to this keyspace only, taking effect for writes and imports that
    /// start after it; a source that does not compile is a 400 with the compiler's reason and the function in force
    /// stays. Body not UTF-8: 400.
    static func keyspaceFunction(_ r: GatewayRequest) async throws -> GatewayReply {
        guard let function = KeyspaceFunction(rawValue: r.route.id) else { throw GatewayError.notFound("unknown URL") }
        let keyspace = r.database.keyspace
        if r.method == "GET" || r.method == "HEAD" {
            let entry = r.server.databaseConfigs.withLock { $0[r.route.db] }
            let source = entry?.source(of: function, for: keyspace) ?? ""
            return .bytes(200, Array(source.utf8), contentType: javaScriptType)
        }
        var source: String? = nil
        if r.method == "PUT" {
            guard let text = String(validating: r.body, as: UTF8.self) else {
                throw GatewayError.badRequest("The body must be JavaScript source in UTF-8")
            }
            if !text.allSatisfy(\.isWhitespace) { source = text }
        }
        try await r.server.changeDatabaseConfig(r.route.db, primary: r.database, only: keyspace) {
            current throws(GatewayError) in
            do throws(ConfigError) { return try current.replacing(function, of: keyspace, with: source) } catch {
                throw .badRequest(error.description)
            }
        }
        r.audit(
            .gatewayDatabaseConfigChanged,
            [("keyspace", .string(keyspace.description)), ("fields", .array([.string(function.rawValue)]))])
        return .json(200, .object([("ok", .bool(true))]))
    }

    /// The media type of a JavaScript source body (RFC 9239; what Sync Gateway names for these endpoints).
    static let javaScriptType = "application/javascript"
}

extension GatewayServer {
    /// The one way a database's config entry changes at runtime (`PUT /db/_config`, `/{keyspace}/_config/...`):
    /// `edit` makes the new entry from the one in force, the database's collections must stay the same (each is a
    /// keyspace with its own change stream, opened at start: 400), each keyspace (or only `only`) is reconfigured
    /// with its part of the new entry (`GatewayDatabase.reconfigure`: sync function and import filter compiled
    /// before either replaces the one in force; a source that does not compile is a 400), and the entry is kept for
    /// `GET /db/_config`. Config users and roles are applied by the first keyspace only, as at start. `primary` is
    /// the database answering when the server was built without keyspaces (tests). Changes of one database run one
    /// at a time: a second while one runs is a 409, so two changes cannot interleave their reconfigures and leave the
    /// kept entry saying what no keyspace runs. 404: no such database.
    func changeDatabaseConfig(
        _ name: String, primary: GatewayDatabase, only: Keyspace? = nil,
        _ edit: (DatabaseConfig) throws(GatewayError) -> DatabaseConfig
    ) async throws(GatewayError) {
        guard configChanges.withLock({ $0.insert(name).inserted }) else {
            throw .conflict("Another config change of database \(name) is running; retry")
        }
        defer { _ = configChanges.withLock { $0.remove(name) } }
        guard let current = databaseConfigs.withLock({ $0[name] }) else { throw .notFound("no such database") }
        let updated = try edit(current)
        guard updated.keyspaces.map(\.keyspace) == current.keyspaces.map(\.keyspace) else {
            throw .badRequest(
                "scopes: the database's collections cannot change while the gateway runs (restart it with the new file)"
            )
        }
        for (i, c) in updated.keyspaces.enumerated() where only == nil || only == c.keyspace {
            guard let db = keyspaces[name]?[c.keyspace] ?? (c.keyspace.isDefault ? primary : nil) else { continue }
            var options = DatabaseOptions(config: updated)
            options.syncSource = c.sync
            options.importFilterSource = c.importFilter
            options.keyspace = c.keyspace
            options.links = db.options.links
            if i > 0 {
                // Config users and roles are the database's: the first keyspace applies them (as at start).
                options.users = [:]
                options.roles = [:]
            }
            try await db.reconfigure(options)
        }
        databaseConfigs.withLock { $0[name] = updated }
    }
}
