import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import SetteeAuth
import SetteeCore
import SetteeDiagnostics
import SetteeHTTPServer
import SetteeRegistry
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
///
/// Cross-site: a request that changes state (not GET/HEAD/OPTIONS) from a page of another origin (`Origin` or
/// `Sec-Fetch-Site` says so) is refused with 403 before anything else, console log-in included.
struct AdminAuthMiddleware: RouterMiddleware {
    typealias Context = AdminRequestContext
    let registry: NodeRegistry
    var sessions: ConsoleSessions? = nil

    static let setupEndpoints: Set<String> = [
        "/settings/web", "/clusterInit", "/node/controller/setupServices", "/pools/default",
        "/node/controller/setupNetConfig",
    ]
    static let openReads: Set<String> = ["/pools", "/pools/default", "/pools/nodes", "/settee/internal/node"]

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        let path = request.uri.path
        // No CORS here: a page of another site may not make a browser send a state change with the admin's
        // cached Basic credentials or console cookie (as a form POST would). Clients without `Origin` pass.
        if request.method != .get && request.method != .head && request.method != .options,
            CrossOrigin.isForeign(
                origin: request.headers[.origin], host: request.head.authority,
                secFetchSite: request.headers[Self.secFetchSite])
        {
            return AdminResponses.general(.forbidden, "Cross-origin request refused.")
        }
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
                // A console session is the administrator's (only the admin can log in to the console).
                let caller = AuditCaller(domain: "admin", user: "console-session", remote: AuditCaller.remote(context))
                return try await AuditCaller.$current.withValue(caller) { try await next(request, context) }
            }
        }
        let refusal = fromConsole ? AdminResponses.empty(.unauthorized) : AdminResponses.unauthorized
        if !registry.isInitialized {
            if request.method == .post && path == "/settee/internal/join" {
                return try await joinUninitialised(request, context: context, refusal: refusal, next: next)
            }
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
        guard let (user, password) = BasicAuth.parse(authorization) else {
            return refusal
        }
        let principal: NodeRegistry.Principal?
        let remote = AuditCaller.remote(context)
        switch await Self.checkPassword(
            registry: registry, source: context.sourceHost, user: user, password: password, remote: remote)
        {
        case .throttled(let response): return response
        case .checked(let p): principal = p
        }
        switch principal {
        case .admin?:
            let caller = AuditCaller(
                domain: user == NodeRegistry.internalUsername ? "builtin" : "admin", user: user,
                remote: remote)
            return try await AuditCaller.$current.withValue(caller) { try await next(request, context) }
        case .user(_, let roles)?:
            let caller = AuditCaller(domain: "local", user: user, remote: remote)
            guard RBACPolicy.allows(roles: roles, method: request.method, path: path) else {
                registry.audit.record(
                    .accessDenied(
                        domain: "local", user: user, remote: remote, method: request.method.rawValue, path: path))
                return RBACPolicy.forbidden
            }
            return try await AuditCaller.$current.withValue(caller) {
                try await CallerRoles.$roles.withValue(roles) { try await next(request, context) }
            }
        case .bucket?, nil:
            return refusal
        }
    }

    /// A password check through the login guard (`NodeRegistry.authenticateGuarded`, the one every HTTP port
    /// uses): the principal, or the 429 to answer.
    enum GuardedCheck {
        case throttled(Response)
        case checked(NodeRegistry.Principal?)
    }

    /// `NodeRegistry.authenticateGuarded` with its refusal as the admin port answers it (429, Retry-After), and the
    /// outcome audited (`door`: `rest` or `console`): a failure and a throttled attempt always, a success but for the
    /// nodes' internal user (every peer call would log one).
    static func checkPassword(
        registry: NodeRegistry, source: String?, user: String, password: String, door: String = "rest",
        remote: AuditEvent.Remote? = nil
    ) async -> GuardedCheck {
        let remote = remote ?? source.map { AuditEvent.Remote(ip: $0) }
        switch await registry.authenticateGuarded(source: source, user: user, password: password) {
        case .checked(let principal?):
            if user != NodeRegistry.internalUsername {
                let domain =
                    switch principal {
                    case .admin: "admin"
                    case .user: "local"
                    case .bucket: "bucket"
                    }
                registry.audit.record(.loginSucceeded(domain: domain, user: user, source: door, remote: remote))
            }
            return .checked(principal)
        case .checked(nil):
            registry.audit.record(.loginFailed(user: user, source: door, remote: remote))
            return .checked(nil)
        case .throttled(let seconds):
            registry.audit.record(
                .loginThrottled(user: user, source: door, remote: remote, retryAfterSeconds: seconds))
            return .throttled(tooManyLogins(retryAfterSeconds: seconds))
        }
    }

    /// 429 for a login refused by the guard.
    static func tooManyLogins(retryAfterSeconds: Int) -> Response {
        var response = AdminResponses.general(.tooManyRequests, "Too many failed logins; try again later.")
        response.headers[.retryAfter] = String(retryAfterSeconds)
        return response
    }

    /// `POST /settee/internal/join` on a node without credentials of its own: the caller must prove it knows a
    /// secret of the document it sends (the cluster admin's password or the internal secret), so nobody can
    /// make a fresh node adopt a cluster document (and create its buckets) just by reaching its port.
    private func joinUninitialised(
        _ request: Request, context: Context, refusal: Response,
        next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        guard let (user, password) = BasicAuth.parse(request.headers[.authorization]) else { return refusal }
        var request = request
        let buffer: ByteBuffer
        do { buffer = try await request.collectBody(upTo: Limits.maxClusterDocumentBytes) } catch {
            return AdminResponses.general(.contentTooLarge, "config too large")
        }
        let document = Array(buffer.readableBytesView)
        let proven = await BlockingPool.run {
            NodeRegistry.joinCredentialsMatch(document: document, username: user, password: password)
        }
        return proven ? try await next(request, context) : refusal
    }

    static let consoleHeader = HTTPField.Name("ns-server-ui")!
    static let secFetchSite = HTTPField.Name("Sec-Fetch-Site")!

}
