import Foundation
import HTTPTypes
import HummingbirdCore
import SetteeCore
import SetteeJSON
import SetteeSync

/// `_session` on both ports. Public: `GET` (who am I; works unauthenticated), `POST {"name","password"}`
/// (log in: `Set-Cookie: SyncGatewaySession=...`), `DELETE` (log out). Admin: `POST {"name","ttl"}`
/// (create a session for a user), `GET|DELETE /db/_session/{id}`.
enum SessionHandlers {
    static func handle(_ r: GatewayRequest) async throws -> GatewayReply {
        let db = r.database
        if r.admin { return try await admin(r) }
        switch r.method {
        case "GET", "HEAD":
            let user = try? await GatewayResponder(server: r.server, admin: false).authenticate(
                headers: r.request.headers, db: db, source: r.source)
            return .json(200, sessionBody(user))
        case "POST":
            if let origin = r.request.headers[.origin], let cors = r.server.config.cors,
                CORSConfig.allowedOrigin(origin, in: cors.loginOrigin) == nil
            {
                throw GatewayError.badRequest("No CORS")
            }
            var name: String? = nil
            var password: String? = nil
            if !r.body.isEmpty {
                let body = try r.bodyJSON()
                name = body["name"]?.stringValue
                password = body["password"]?.stringValue
            }
            let user: UserContext
            if let name, let password {
                user = try await GatewayResponder.login(
                    name: name, password: password, source: r.source, db: db, guard: r.server.loginGuard,
                    audit: r.server.audit, door: "gateway-session")
            } else if let (n, p) = BasicAuth.parse(r.request.headers[.authorization]) {
                user = try await GatewayResponder.login(
                    name: n, password: p, source: r.source, db: db, guard: r.server.loginGuard,
                    audit: r.server.audit, door: "gateway-session")
            } else {
                throw GatewayError.status(401, "Invalid login")
            }
            guard let userName = user.name, !userName.isEmpty else { throw GatewayError.status(401, "Invalid login") }
            let session = try await db.createSession(user: userName, ttlSeconds: GatewayHTTPLimits.sessionTTLSeconds)
            var h = HTTPFields()
            h[.setCookie] = cookie(
                db: r.route.db, id: session.id, expires: Date(timeIntervalSince1970: session.expires))
            return .json(200, sessionBody(user), headers: h)
        case "DELETE":
            guard let id = GatewayResponder.sessionCookie(r.request.headers[.cookie]) else {
                throw GatewayError.status(404, "no session")
            }
            await db.deleteSession(id)
            var h = HTTPFields()
            h[.setCookie] = cookie(db: r.route.db, id: "", expires: Date(timeIntervalSince1970: 0))
            return .json(200, .object([("ok", .bool(true))]), headers: h)
        default:
            throw GatewayError.status(405, "\(r.method) not allowed")
        }
    }

    static func cookie(db: String, id: String, expires: Date) -> String {
        // SameSite=Lax: other sites' pages cannot make a browser send it with a POST, PUT or DELETE.
        "\(GatewayResponder.cookieName)=\(id); Path=/\(db); Expires=\(HTTPDate.format(expires)); HttpOnly"
            + "; SameSite=Lax"
    }

    /// `{"ok": true, "userCtx": {"name", "channels": {ch: 1}}, "authentication_handlers": [...]}`.
    static func sessionBody(_ user: UserContext?) -> JSON {
        let name: JSON = (user?.name).map { $0.isEmpty ? .null : .string($0) } ?? .null
        let channels = (user?.channels ?? []).sorted().map { ($0, JSON.number(1)) }
        return .object([
            ("authentication_handlers", .array([.string("default"), .string("cookie")])),
            ("ok", .bool(true)),
            ("userCtx", .object([("channels", .object(channels)), ("name", name)])),
        ])
    }

    static func admin(_ r: GatewayRequest) async throws -> GatewayReply {
        let db = r.database
        switch (r.route.endpoint, r.method) {
        case (.session, "POST"):
            let body = try r.bodyJSON()
            guard let name = body["name"]?.stringValue, !name.isEmpty, name != "GUEST" else {
                throw GatewayError.badRequest("Invalid or missing user name")
            }
            var ttl = GatewayHTTPLimits.sessionTTLSeconds
            if let t = body["ttl"] {
                guard let n = t.intValue, n >= 1 else { throw GatewayError.badRequest("Invalid ttl") }
                ttl = n
            }
            _ = try await db.principal(name, isRole: false)
            let session = try await db.createSession(user: name, ttlSeconds: ttl)
            return .json(
                200,
                .object([
                    ("cookie_name", .string(GatewayResponder.cookieName)),
                    ("expires", .string(HTTPDate.iso8601(Date(timeIntervalSince1970: session.expires)))),
                    ("session_id", .string(session.id)),
                ]))
        case (.sessionByID, "GET"), (.sessionByID, "HEAD"):
            guard let user = await db.session(r.route.id) else { throw GatewayError.notFound("missing") }
            return .json(200, sessionBody(user))
        case (.sessionByID, "DELETE"):
            guard await db.session(r.route.id) != nil else { throw GatewayError.notFound("missing") }
            await db.deleteSession(r.route.id)
            return .json(200, .object([("ok", .bool(true))]))
        default:
            throw GatewayError.status(405, "\(r.method) not allowed")
        }
    }
}
