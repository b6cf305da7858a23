import Foundation
import SetteeHTTPServer
import SetteeJSON
import Synchronization

/// The route table: one handler per endpoint and method. Handlers throw `GatewayError` for error
/// replies; the responder renders them.
enum GatewayHandlers {
    static func handle(_ r: GatewayRequest) async throws -> GatewayReply {
        switch (r.route.endpoint, r.method) {
        case (.root, _): return root(r)
        case (.allDBs, _): return .json(200, .array(r.server.config.databases.map { .string($0.name) }))
        case (.serverConfig, _):
            let current = r.server.databaseConfigs.withLock { $0 }
            return .json(200, redactedConfig(r.server.config, current: current))
        case (.expvar, _): return .json(200, r.server.expvar())
        case (.metrics, _): return .bytes(200, r.server.prometheusText(), contentType: PrometheusText.contentType)
        case (.reloadCertificate, _): return try await GatewayServer.reloadCertificateReply(r.server)

        case (.database, "GET"), (.database, "HEAD"): return .json(200, await r.database.info())
        case (.database, "POST"): return try await DocumentHandlers.post(r)
        case (.database, "PUT"):
            // Clients' create_target: the database exists (412); creating one at runtime is not supported.
            throw GatewayError(status: 412, error: "file_exists", reason: "Database already exists")
        case (.database, "DELETE"):
            throw GatewayError.status(403, "Deleting a database over the REST API is not supported")

        case (.document, "GET"), (.document, "HEAD"): return try await DocumentHandlers.get(r)
        case (.document, "PUT"): return try await DocumentHandlers.put(r)
        case (.document, "DELETE"): return try await DocumentHandlers.delete(r)
        case (.attachment, "GET"), (.attachment, "HEAD"): return try await DocumentHandlers.getAttachment(r)
        case (.attachment, "PUT"): return try await DocumentHandlers.putAttachment(r)

        case (.local, "GET"), (.local, "HEAD"): return .json(200, try await r.database.local(r.route.id))
        case (.local, "PUT"):
            let rev = try await r.database.putLocal(r.route.id, try localBody(r))
            return .ok(201, id: "_local/" + r.route.id, rev: rev)
        case (.local, "DELETE"):
            let rev = r.query["rev"] ?? r.header("If-Match")?.trimmingCharacters(in: CharacterSet(charactersIn: "\""))
            try await r.database.deleteLocal(r.route.id, rev: rev)
            return .json(200, .object([("ok", .bool(true)), ("id", .string("_local/" + r.route.id))]))

        case (.allDocs, _): return try await BulkHandlers.allDocs(r)
        case (.bulkDocs, _): return try await BulkHandlers.bulkDocs(r)
        case (.bulkGet, _): return try await BulkHandlers.bulkGet(r)
        case (.revsDiff, _): return try await BulkHandlers.revsDiff(r)
        case (.ensureFullCommit, _):
            try await r.database.ensureFullCommit()
            return .json(
                201, .object([("ok", .bool(true)), ("instance_start_time", .number(Double(r.server.startTime)))]))
        case (.changes, _): return try await ChangesHandlers.changes(r)
        case (.blipSync, _):
            throw BLIPSyncUpgrade.refusal(upgrade: r.header("Upgrade"), subprotocol: r.header("Sec-WebSocket-Protocol"))

        case (.session, _), (.sessionByID, _): return try await SessionHandlers.handle(r)

        case (.userList, _), (.user, _), (.roleList, _), (.role, _): return try await AdminHandlers.principals(r)
        case (.dbConfig, "PUT"): return try await AdminHandlers.putConfig(r)
        case (.keyspaceConfig, _): return try await AdminHandlers.keyspaceFunction(r)
        case (.dbConfig, _):
            let entry = r.server.databaseConfigs.withLock { $0[r.route.db] }
            return .json(200, entry.map { redactedDatabase($0) } ?? .object([]))
        case (.resync, _):
            // Every keyspace, each with its own sync function (ADR 0142).
            var changed = 0
            for db in r.keyspaces { changed += try await db.resync() }
            return .json(200, .object([("changes", .number(Double(changed)))]))
        case (.offline, _):
            for db in r.keyspaces { await db.setOnline(false) }
            return .json(200, .object([("ok", .bool(true))]))
        case (.online, _):
            for db in r.keyspaces { await db.setOnline(true) }
            return .json(200, .object([("ok", .bool(true))]))
        case (.purge, _): return try await AdminHandlers.purge(r)
        case (.compact, _): return try await AdminHandlers.compact(r)
        case (.raw, _): return .json(200, try await r.database.raw(r.route.id))
        default:
            throw GatewayError.status(405, "\(r.method) not allowed")
        }
    }

    static func root(_ r: GatewayRequest) -> GatewayReply {
        var m: [(String, JSON)] = [
            ("couchdb", .string("Welcome")),
            ("vendor", .object([("name", .string("Couchbase Sync Gateway")), ("version", .string("1.5"))])),
            ("version", .string(GatewayResponder.serverHeader)),
        ]
        if r.admin { m.append(("ADMIN", .bool(true))) }
        return .json(200, .object(m))
    }

    /// `_local` bodies: any object; `_rev` in the body, else from `?rev=`.
    static func localBody(_ r: GatewayRequest) throws(GatewayError) -> JSON {
        var body = try r.documentJSON()
        guard case .object = body else { throw .badRequest("Document body must be a JSON object") }
        if body["_rev"] == nil, let rev = r.query["rev"] { body.set("_rev", .string(rev)) }
        return body
    }

    /// The server config without passwords, with each database's entry as currently in force.
    static func redactedConfig(_ config: GatewayConfig, current: [String: DatabaseConfig] = [:]) -> JSON {
        var j = config.source
        var dbs: [(String, JSON)] = []
        for db in config.databases { dbs.append((db.name, redactedDatabase(current[db.name] ?? db))) }
        if j["databases"] != nil { j.set("databases", .object(dbs)) }
        return j
    }

    static func redactedDatabase(_ db: DatabaseConfig) -> JSON {
        var j = db.redactedSource
        for key in ["users", "roles"] {
            guard case .object(let principals)? = j[key] else { continue }
            j.set(
                key,
                .object(
                    principals.map { name, body in
                        var b = body
                        if b["password"] != nil { b.set("password", .string("xxxxx")) }
                        return (name, b)
                    }))
        }
        return j
    }
}
