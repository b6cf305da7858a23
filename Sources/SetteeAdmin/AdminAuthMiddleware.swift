import Foundation
import Hummingbird
import SetteeStorage

/// HTTP Basic authentication for the admin API.
///
/// Rules (ns_server's): `GET /` always answers (SDK pings); before the node is initialised the setup
/// endpoints and the pool listings need no credentials and everything else is refused; once
/// initialised every request needs the admin's credentials. A refusal is `401` with Couchbase's realm.
struct AdminAuthMiddleware: RouterMiddleware {
    typealias Context = BasicRequestContext
    let registry: NodeRegistry

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
        if !registry.isInitialized {
            let open =
                (request.method == .post && Self.setupEndpoints.contains(path))
                || (request.method == .get && Self.openReads.contains(path))
            return open ? try await next(request, context) : AdminResponses.unauthorized
        }
        guard let (user, password) = Self.basicCredentials(request.headers[.authorization]) else {
            return AdminResponses.unauthorized
        }
        let registry = self.registry
        // PBKDF2 on a cache miss: off the event loop.
        let principal = await Blocking.run { registry.authenticate(username: user, password: password) }
        guard principal == .admin else { return AdminResponses.unauthorized }
        return try await next(request, context)
    }

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
