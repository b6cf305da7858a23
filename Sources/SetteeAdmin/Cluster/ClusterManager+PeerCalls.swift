import SetteePeerHTTP
import SetteeTLS

extension ClusterManager {
    /// This node's calls to other nodes, by transport (`/metrics`).
    public var peerCalls: PeerCallCounts { peers.counts }
    /// Which trust admitted this node's TLS calls to other nodes' admin APIs (`/metrics`, ADR 0057).
    public var peerTrustCounts: PeerTrustCounts { peers.trust.counts }
}
