import NIOCore
import SetteeAuth
import SetteeDiagnostics
import SetteeRegistry

extension KVConnectionHandler {
    /// Audits a SASL login on this connection (`source` `kv-sasl`): a success (but the nodes' internal user's, whose
    /// replication connections would log one each), a failure, or a refusal by the throttle. Only the user name and
    /// mechanism are written: never the password, a SCRAM proof or nonce.
    func auditLogin(
        user: String, mechanism: String, principal: NodeRegistry.Principal?, throttled: LoginThrottle.CheckStart?
    ) {
        let described = self.remote
        let peer = remoteAddress.map { AuditEvent.Remote(ip: $0.ipAddress ?? described, port: $0.port) }
        let audit = node.registry.audit
        if let throttled {
            var seconds = 0
            if case .throttled(let s) = throttled { seconds = s }
            audit.record(.loginThrottled(user: user, source: "kv-sasl", remote: peer, retryAfterSeconds: seconds))
            return
        }
        guard let principal else {
            audit.record(.loginFailed(user: user, source: "kv-sasl", remote: peer, mechanism: mechanism))
            return
        }
        guard user != NodeRegistry.internalUsername else { return }
        let domain =
            switch principal {
            case .admin: "admin"
            case .user: "local"
            case .bucket: "bucket"
            }
        audit.record(
            .loginSucceeded(domain: domain, user: user, source: "kv-sasl", remote: peer, mechanism: mechanism))
    }
}
