import NIOCore
import SetteeDiagnostics
import SetteeHTTPServer
import SetteeJSON
import SetteeRegistry

/// Who made the admin request being handled, for the audit records its handler writes: set by `AdminAuthMiddleware`
/// on the request's task once the credentials are checked (nil for anonymous reads and console sessions, which
/// are the administrator's).
struct AuditCaller: Sendable {
    /// `admin`, `local` (an RBAC user) or `builtin` (the nodes' internal user).
    var domain: String
    var user: String
    var remote: AuditEvent.Remote?

    @TaskLocal static var current: AuditCaller? = nil

    /// The peer of `context` as an audit `remote` (address and port).
    static func remote(_ context: PeerAddressRequestContext) -> AuditEvent.Remote? {
        guard let address = context.remoteAddress else { return nil }
        return AuditEvent.Remote(ip: address.ipAddress ?? context.sourceHost ?? "unknown", port: address.port)
    }

    /// An event of `kind` by the current caller (none for the node's own decisions: an automatic failover).
    static func event(_ kind: AuditEvent.Kind, _ fields: [(String, JSON)] = []) -> AuditEvent {
        let caller = current
        return AuditEvent(kind, user: caller.map { ($0.domain, $0.user) }, remote: caller?.remote, fields: fields)
    }
}

extension AdminAPI {
    /// Records an event of `kind` by the request's caller (`AuditCaller.current`) in this node's audit log.
    func audit(_ kind: AuditEvent.Kind, _ fields: [(String, JSON)] = []) {
        registry.audit.record(AuditCaller.event(kind, fields))
    }
}
