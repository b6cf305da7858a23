import Foundation
import HTTPTypes
import Hummingbird
import SetteeStorage

/// HTTP Basic authentication for the admin API.
///
/// Rules (ns_server's): `GET /` always answers (SDK pings); before the node is initialised the setup
/// endpoints and the pool listings need no credentials and everything else is refused; once
/// initialised every request needs credentials: the admin's, or a local RBAC user's whose roles allow
/// the request (`RBACPolicy`; else `403`), except the reads `AnonymousAccess` opens to requests without
/// credentials (pools, and buckets with `authType=none`). Bad credentials are `401` with Couchbase's realm.
///
/// The console (Console/): its static pages and `POST /uilogin|/uilogout` are open; a request carrying
/// `ns-server-ui: yes` and a live session cookie is the admin's, as in ns_server (the custom header cannot be
/// sent cross-site without CORS, the cookie is SameSite=Strict). Refusals of such requests carry no Basic
/// challenge, so the browser shows the console's log-in page rather than its own dialog.
struct AdminAuthMiddleware: RouterMiddleware {
    typealias Context = BasicRequestContext
    let registry: NodeRegistry
    var sessions: ConsoleSessions? = nil

    static let setupEndpoints: Set<String> = [
        "/settings/web", "/clusterInit", "/node/controller/setupServices", "/pools/default",
        "/node/controller/setupNetConfig", "/settee/internal/join",
    ]
    static let openReads: Set<String> = ["/pools", "/pools/default", "/pools/nodes", "/settee/internal/node"]

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        let path = request.uri.path
        if request.method == .get && (path == "/" || path.isEmpty) { return try await next(request, context) }
        let fromConsole = request.headers[Self.consoleHeader] == "yes"
        if sessions != nil {
            if (request.method == .get && (path == "/ui" || path.hasPrefix("/ui/")))
                || (request.method == .post && (path == "/uilogin" || path == "/uilogout"))
            {
                return try await next(request, context)
            }
            if fromConsole, let sessions, let token = sessions.token(fromCookieHeader: request.headers[.cookie]),
                sessions.validate(token)
            {
                return try await next(request, context)
            }
        }
        let refusal = fromConsole ? AdminResponses.empty(.unauthorized) : AdminResponses.unauthorized
        if !registry.isInitialized {
            let open =
                (request.method == .post && Self.setupEndpoints.contains(path))
                || (request.method == .get && Self.openReads.contains(path))
            return open ? try await next(request, context) : refusal
        }
        guard let authorization = request.headers[.authorization] else {
            // No credentials at all: Couchbase 4.x's reads of buckets without a password (ADR 0015). Not for
            // the console, whose pages take a 401 as "show the log-in page".
            guard !fromConsole, AnonymousAccess.allows(method: request.method, path: path, registry: registry) else {
                return refusal
            }
            return try await AnonymousAccess.$isAnonymous.withValue(true) { try await next(request, context) }
        }
        // Credentials given but malformed or wrong are refused, never treated as anonymous.
        guard let (user, password) = Self.basicCredentials(authorization) else {
            return refusal
        }
        let registry = self.registry
        // PBKDF2 on a cache miss: off the event loop.
        let principal = await Blocking.run { registry.authenticate(username: user, password: password) }
        switch principal {
        case .admin?:
            return try await next(request, context)
        case .user(_, let roles)?:
            guard RBACPolicy.allows(roles: roles, method: request.method, path: path) else {
                return RBACPolicy.forbidden
            }
            return try await next(request, context)
        case .bucket?, nil:
            return refusal
        }
    }

    static let consoleHeader = HTTPField.Name("ns-server-ui")!

    /// `Basic base64(user:password)` → (user, password); nil when absent or malformed.
    static func basicCredentials(_ header: String?) -> (String, String)? {
        guard let header else { return nil }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "basic",
            let data = Data(base64Encoded: String(parts[1]).trimmingCharacters(in: .whitespaces)),
            let decoded = String(data: data, encoding: .utf8),
            let colon = decoded.firstIndex(of: ":")
        else { return nil }
        return (String(decoded[..<colon]), String(decoded[decoded.index(after: colon)...]))
    }
}
