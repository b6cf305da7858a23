import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import SetteeAuth
import SetteeCore
import SetteeDiagnostics
import SetteeHTTPServer
import SetteeJSON

/// The request pipeline both listeners run (Sync Gateway's `handler.invoke`):
/// route (404 unknown URL, 405 + `Allow`, OPTIONS → 204 + `Allow`) → body (size limit, gzip, 415 for
/// other encodings) → database lookup (404) → offline check (503) → authentication on the public port
/// (Basic → `SyncGatewaySession` cookie → GUEST; 401 + `WWW-Authenticate`) → handler → `Accept`
/// negotiation (406) → gzip of buffered responses → `Server`, CORS headers on every response.
struct GatewayResponder: HTTPResponder {
    typealias Context = GatewayRequestContext

    let server: GatewayServer
    let admin: Bool

    static let serverHeader = "Couchbase Sync Gateway/1.5.0 settee"
    static let cookieName = "SyncGatewaySession"
    static let secFetchSite = HTTPField.Name("Sec-Fetch-Site")!

    func respond(to request: Request, context: GatewayRequestContext) async throws -> Response {
        let started = ContinuousClock.now
        let reply = await reply(to: request, source: context.sourceHost)
        let response = finish(reply, request: request)
        if server.config.logsRequests {
            server.logger.info(
                "\(request.method) \(LogText.userData(request.uri.path)) -> \(response.status.code)",
                metadata: ["admin": "\(admin)", "ms": "\((ContinuousClock.now - started).components.seconds * 1000)"])
        }
        return response
    }

    /// Routes and runs a request; every failure becomes an error reply here. `source`: the peer's host, for the
    /// login throttle.
    func reply(to request: Request, source: String?) async -> GatewayReply {
        let method = request.method.rawValue
        switch GatewayRoute.match(method: method, path: request.uri.path, admin: admin) {
        case .notFound:
            return .error(.status(404, "unknown URL"))
        case .methodNotAllowed(let allow):
            var h = HTTPFields()
            h[.allow] = allow.joined(separator: ", ")
            return .error(.status(405, "\(method) not allowed"), headers: h)
        case .route(let route):
            if method == "OPTIONS" {
                var h = HTTPFields()
                h[.allow] = route.endpoint.methods(admin: admin).joined(separator: ", ")
                if !admin, let cors = server.config.cors {
                    h[.accessControlAllowMethods] = h[.allow]
                    if cors.maxAge > 0 { h[.accessControlMaxAge] = String(cors.maxAge) }
                }
                return .buffered(status: 204, headers: h, body: [])
            }
            do {
                return try await dispatch(request, route: route, source: source)
            } catch let e as GatewayError {
                return .error(e, headers: e.status == 401 ? Self.challenge : [:])
            } catch {
                server.logger.error(
                    "request failed", metadata: ["error": "\(error)", "path": "\(LogText.userData(request.uri.path))"])
                return .error(.status(500, "Internal error: \(error)"))
            }
        }
    }

    static var challenge: HTTPFields {
        var h = HTTPFields()
        h[.wwwAuthenticate] = "Basic realm=\"Couchbase Sync Gateway\""
        return h
    }

    private func dispatch(_ request: Request, route: GatewayRoute, source: String?) async throws -> GatewayReply {
        let method = request.method.rawValue
        // The admin port checks no password (Sync Gateway's), so a web page in a browser on this host must not reach
        // it: no cross-site writes (and no CORS list applies to it), and, when it listens on loopback only, no Host
        // but a loopback one (a page whose domain was re-pointed at 127.0.0.1 could otherwise read it too).
        if refusesHost(request.head.authority) {
            throw GatewayError.status(
                403, "Host \(LogText.userData(request.head.authority ?? "")) is not this admin port's")
        }
        if CORSConfig.refusesCrossSite(
            method: method, origin: request.headers[.origin], host: request.head.authority,
            secFetchSite: request.headers[Self.secFetchSite], contentType: request.headers[.contentType],
            config: admin ? nil : server.config.cors)
        {
            throw GatewayError.status(403, "Cross-origin request refused")
        }
        var query: [String: String] = [:]
        for (k, v) in request.uri.queryParameters { query[String(k)] = String(v) }
        var db: GatewayDatabase? = nil
        // Routing never yields an empty name for a database endpoint; if it did, the request would skip
        // the lookup and authentication below, so refuse it here too.
        if route.endpoint.needsDatabase && route.db.isEmpty { throw GatewayError.status(404, "unknown URL") }
        var route = route
        if !route.db.isEmpty {
            let found: GatewayDatabase
            if route.endpoint.takesKeyspace(method: method) {
                // `db`, `db.c` or `db.s.c` (ADR 0142); from here on `route.db` is the database's name.
                guard let (name, keyspace) = server.keyspace(route.db) else {
                    let db = Keyspace.parsePath(route.db)?.db ?? route.db
                    throw GatewayError.status(
                        404,
                        server.databases[db] == nil
                            ? "no such database \"\(db)\"" : "keyspace \"\(route.db)\" not found")
                }
                route.db = name
                found = keyspace
            } else {
                guard let primary = server.databases[route.db] else {
                    throw GatewayError.status(404, "no such database \"\(route.db)\"")
                }
                found = primary
            }
            if !route.endpoint.worksOffline && !found.isOnline {
                throw GatewayError.status(503, "DB is currently under maintenance")
            }
            db = found
        }
        var user: UserContext? = nil
        if !admin, let db, route.endpoint != .session {
            user = try await authenticate(headers: request.headers, db: db, source: source)
        }
        // Read only after authenticating: an anonymous caller (a log-in) may make the gateway buffer only a small
        // body, compressed or not (a 64 KiB gzip of `[0,0,…]` was 64 MiB of JSON, over 1 GB of values).
        let anonymous = !admin && user == nil
        let body = try await readBody(
            request, limit: anonymous ? GatewayHTTPLimits.maxAnonymousBody : GatewayHTTPLimits.maxRequestBody)
        let r = GatewayRequest(
            request: request, route: route, method: method, query: query, body: body, admin: admin, user: user,
            source: source, server: server, db: db)
        return try await GatewayHandlers.handle(r)
    }

    /// Whether the admin port, listening on loopback only, refuses a request naming `host`: a page whose domain was
    /// re-pointed at 127.0.0.1 (DNS rebinding) names its own domain, and the admin port checks no password.
    func refusesHost(_ host: String?) -> Bool {
        guard admin, server.config.adminInterface.isLoopback, let host else { return false }
        return !CrossOrigin.namesLoopback(host: host)
    }

    /// Reads the whole body, at most `limit` bytes before and after decoding `Content-Encoding: gzip`.
    private func readBody(_ request: Request, limit: Int) async throws -> [UInt8] {
        var request = request
        let buffer: ByteBuffer
        do { buffer = try await request.collectBody(upTo: limit) } catch {
            throw GatewayError.status(413, "Request body exceeds \(limit) bytes")
        }
        let bytes = Array(buffer.readableBytesView)
        switch request.headers[.contentEncoding]?.lowercased() {
        case nil, "", "identity": return bytes
        case "gzip", "x-gzip": return try GzipCodec.gunzip(bytes, limit: limit)
        case let other?: throw GatewayError.status(415, "Unsupported Content-Encoding \(other); use gzip")
        }
    }

    // MARK: Authentication

    /// Basic credentials, else the session cookie, else GUEST (Sync Gateway's `checkAuth`). `source`: the peer's
    /// host (`LoginGuard.sourceHost`), for the login throttle.
    func authenticate(headers: HTTPFields, db: GatewayDatabase, source: String?) async throws -> UserContext {
        if let (name, password) = BasicAuth.parse(headers[.authorization]) {
            return try await Self.login(
                name: name, password: password, source: source, db: db, guard: server.loginGuard, audit: server.audit,
                door: "gateway-basic")
        }
        if let id = Self.sessionCookie(headers[.cookie]), let user = await db.session(id) {
            return user
        }
        guard let guest = await db.guestContext() else { throw GatewayError.status(401, "Login required") }
        return guest
    }

    /// Checks a password unless this user has too many recent failures from this source (429, no bcrypt run;
    /// failures elsewhere or in other names never count, `LoginThrottle`); a failure is answered
    /// after `Limits.loginFailureDelayMs`. An allowed attempt counts as it arrives (`LoginGuard.beginCheck`), so N
    /// wrong logins arriving together cost at most `Limits.loginFailuresBeforeThrottle` bcrypt runs; one past the
    /// allowance waits (suspended) up to `Limits.loginBusyWaitMs` for a running check to end, else gets 429.
    /// Each outcome is audited (`door`: `gateway-basic` or `gateway-session`), with the user name and database only.
    static func login(
        name: String, password: String, source: String?, db: GatewayDatabase, guard loginGuard: LoginGuard,
        audit: AuditLog = .disabled(), door: String = "gateway-basic"
    ) async throws -> UserContext {
        let remote = source.map { AuditEvent.Remote(ip: $0) }
        let start = await loginGuard.beginCheckWaiting(source: source, user: name)
        guard start == .allow else {
            var seconds = 0
            if case .throttled(let s) = start { seconds = s }
            var event = AuditEvent.loginThrottled(user: name, source: door, remote: remote, retryAfterSeconds: seconds)
            event.fields.append(("db", .string(db.name)))
            audit.record(event)
            try? await Task.sleep(for: .milliseconds(Limits.loginFailureDelayMs))
            throw GatewayError.status(429, "Too many failed logins; try again later")
        }
        // An unknown user costs a decoy bcrypt run like a known one (`GatewayDatabase.authenticate`).
        let user = await db.authenticate(name: name, password: password)
        loginGuard.endCheck(source: source, user: name, succeeded: user != nil)
        var event =
            user == nil
            ? AuditEvent.loginFailed(user: name, source: door, remote: remote)
            : AuditEvent.loginSucceeded(domain: "gateway", user: name, source: door, remote: remote)
        event.fields.append(("db", .string(db.name)))
        audit.record(event)
        guard let user else {
            try? await Task.sleep(for: .milliseconds(Limits.loginFailureDelayMs))
            throw GatewayError.status(401, "Invalid login")
        }
        return user
    }

    /// The `SyncGatewaySession` value of a `Cookie` header.
    static func sessionCookie(_ header: String?) -> String? {
        guard let header else { return nil }
        for pair in header.split(separator: ";") {
            let kv = pair.trimmingCharacters(in: .whitespaces)
            if kv.hasPrefix(cookieName + "=") {
                let v = String(kv.dropFirst(cookieName.count + 1))
                return v.isEmpty ? nil : v
            }
        }
        return nil
    }

    // MARK: Response decoration

    /// Adds `Server`, CORS and `Vary`; checks `Accept`; gzips a buffered body the client accepts gzip for.
    func finish(_ reply: GatewayReply, request: Request) -> Response {
        var response: Response
        switch reply {
        case .stream(let r):
            response = r
        case .buffered(var status, var headers, var body):
            if status < 300, headers[.contentType] == GatewayReply.jsonType,
                !GatewayRequest.accepts(GatewayReply.jsonType, accept: request.headers[.accept])
            {
                let e = GatewayError.status(406, "only application/json available")
                status = e.status
                body = GatewayReply.errorBody(e)
            }
            if server.config.compressResponses, body.count >= GatewayHTTPLimits.gzipMinimumBytes,
                GzipCodec.accepts(request.headers[.acceptEncoding]), headers[.contentEncoding] == nil,
                let zipped = GzipCodec.gzip(body)
            {
                body = zipped
                headers[.contentEncoding] = "gzip"
                headers[.vary] = "Accept-Encoding"
            }
            if request.method == .head { headers[.contentLength] = String(body.count) }
            response = Response(
                status: HTTPResponse.Status(code: status), headers: headers,
                body: request.method == .head ? ResponseBody() : ResponseBody(byteBuffer: ByteBuffer(bytes: body)))
        }
        response.headers[.syncServer] = Self.serverHeader
        if !admin, let cors = server.config.cors, let origin = request.headers[.origin],
            let allowed = CORSConfig.allowedOrigin(origin, in: cors.origin)
        {
            response.headers[.accessControlAllowOrigin] = allowed
            if allowed != "*" {
                response.headers[.accessControlAllowCredentials] = "true"
                response.headers[.vary] = [response.headers[.vary], "Origin"].compactMap { $0 }.joined(separator: ", ")
            }
            response.headers[.accessControlAllowHeaders] =
                (["Content-Type", "Authorization"] + cors.headers).joined(separator: ", ")
        }
        return response
    }
}

extension GatewayReply {
    static func errorBody(_ e: GatewayError) -> [UInt8] {
        var b = e.json.serialized()
        b.append(UInt8(ascii: "\n"))
        return b
    }
}
