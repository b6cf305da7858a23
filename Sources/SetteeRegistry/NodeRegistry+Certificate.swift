import SetteeClusterMap
import Synchronization

/// The certificate fingerprint this node serves, after `POST /node/controller/reloadCertificate` (ADR 0038).
extension NodeRegistry {
    /// Records that this node's TLS ports now present the certificate with `fingerprint`: `node` (what the node
    /// says of itself: `/settee/internal/node`, the join answer, its own entry in maps) carries it from now on.
    /// The cluster document's entry for this node changes only through the orchestrator
    /// (`ClusterManager.publishServedFingerprint`), like every other change of the document.
    public func setServedTLSFingerprint(_ fingerprint: String) {
        liveNode.withLock { $0.tlsFingerprint = fingerprint }
    }
}
