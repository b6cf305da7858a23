import Foundation
import Hummingbird
import Logging
import NIOCore
import SetteeHTTPServer
import SetteeRegistry
import SetteeStorage

/// What the admin console needs from the process that hosts it.
public struct ConsoleOptions: Sendable {
    /// The log-in sessions (its idle timeout comes from `--ui-session-timeout`).
    public var sessions: ConsoleSessions
    /// The node's metrics for `/metrics`; nil serves none (tests of the bare API).
    public var metrics: NodeMetrics?

    public init(sessions: ConsoleSessions, metrics: NodeMetrics? = nil) {
        self.sessions = sessions
        self.metrics = metrics
    }
}

/// The console's routes: `/` → `/ui/`, the static pages under `/ui/`, and `POST /uilogin` / `POST /uilogout`.
///
/// The pages are SwiftPM resources of SetteeAdmin (`Console/Resources/ui`), read once into memory on first use;
/// only files found there are served, so a path can never leave that folder.
enum ConsoleRoutes {
    static func add(to router: Router<AdminRequestContext>, api: AdminAPI, options: ConsoleOptions) {
        router.get("/") { _, _ in Response(status: .found, headers: [.location: "/ui/"]) }
        // Hummingbird ignores a trailing slash: this serves `/ui/` and `/ui` (the pages use absolute paths).
        router.get("/ui") { _, _ in StaticFiles.response(for: "index.html") }
        router.get("/ui/:file") { _, c in StaticFiles.response(for: c.parameters.get("file") ?? "") }
        router.post("/uilogin") { r, c in await login(r, source: c.sourceHost, api: api, sessions: options.sessions) }
        router.post("/uilogout") { r, _ in
            let sessions = options.sessions
            if let token = sessions.token(fromCookieHeader: r.headers[.cookie]) { sessions.remove(token) }
            return AdminResponses.empty(
                .ok, headers: [.setCookie: "\(sessions.cookieName)=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"])
        }
    }

    /// `user` and `password` as form fields; 200 with the session cookie, 400 when they do not match (ns_server's
    /// codes). The nodes' internal user cannot log in here. The password is checked through the login guard, as
    /// Basic credentials are: 429 once this user or address has failed too often (this route had no throttle).
    static func login(_ request: Request, source: String?, api: AdminAPI, sessions: ConsoleSessions) async -> Response {
        let form: FormBody
        switch await api.form(request) {
        case .success(let f): form = f
        case .failure(let e): return e.response
        }
        guard api.registry.isInitialized else {
            return AdminResponses.general(.badRequest, "This node is not initialised yet: POST /clusterInit first.")
        }
        guard let user = form["user"], let password = form["password"], user != NodeRegistry.internalUsername else {
            return AdminResponses.empty(.badRequest)
        }
        let principal: NodeRegistry.Principal?
        switch await AdminAuthMiddleware.checkPassword(
            registry: api.registry, source: source, user: user, password: password, door: "console")
        {
        case .throttled(let response): return response
        case .checked(let p): principal = p
        }
        guard principal == .admin else {
            api.logger.notice("console log-in refused")
            return AdminResponses.empty(.badRequest)
        }
        let token = sessions.create()
        return AdminResponses.empty(
            .ok, headers: [.setCookie: "\(sessions.cookieName)=\(token); Path=/; HttpOnly; SameSite=Strict"])
    }
}

/// The console's files, loaded from the module's resources once.
enum StaticFiles {
    struct File: Sendable {
        var bytes: ByteBuffer
        var contentType: String
    }

    static let files: [String: File] = {
        guard let dir = Bundle.module.resourceURL?.appendingPathComponent("ui"),
            let names = try? FileManager.default.contentsOfDirectory(atPath: dir.path)
        else { return [:] }
        var out: [String: File] = [:]
        for name in names {
            guard let data = FileManager.default.contents(atPath: dir.appendingPathComponent(name).path) else {
                continue
            }
            out[name] = File(bytes: ByteBuffer(bytes: data), contentType: contentType(name))
        }
        return out
    }()

    static func contentType(_ name: String) -> String {
        switch name.split(separator: ".").last.map(String.init) ?? "" {
        case "html": "text/html; charset=utf-8"
        case "js": "text/javascript; charset=utf-8"
        case "css": "text/css; charset=utf-8"
        case "svg": "image/svg+xml"
        default: "application/octet-stream"
        }
    }

    static func response(for name: String) -> Response {
        guard let file = files[name] else { return AdminResponses.text(.notFound, "Not found.\n") }
        return Response(
            status: .ok,
            headers: [
                .contentType: file.contentType, .cacheControl: "no-cache",
                .contentSecurityPolicy:
                    "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
                .xContentTypeOptions: "nosniff",
            ],
            body: ResponseBody(byteBuffer: file.bytes))
    }
}
