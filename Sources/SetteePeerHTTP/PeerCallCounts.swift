import Synchronization

/// Counts of this node's calls to other nodes' admin APIs, by transport, and of the calls refused because the
/// peer's certificate was not the pinned one. `/metrics` shows them (`settee_peer_calls_total{transport}`,
/// `settee_peer_calls_refused_total`), so an operator can see that node-to-node traffic is on TLS.
public final class PeerCallCounts: Sendable {
    private let tlsCalls = Atomic<Int>(0)
    private let plainCalls = Atomic<Int>(0)
    private let refusedCalls = Atomic<Int>(0)

    public init() {}

    /// Calls made (or attempted) over HTTPS pinned to the peer's certificate.
    public var tls: Int { tlsCalls.load(ordering: .relaxed) }
    /// Calls made over plain HTTP (peers that advertise no TLS, the views port).
    public var plain: Int { plainCalls.load(ordering: .relaxed) }
    /// Calls refused because the peer presented another certificate than the pinned one.
    public var refused: Int { refusedCalls.load(ordering: .relaxed) }

    /// One call made (or attempted) over the given transport.
    public func countCall(tls: Bool) {
        if tls {
            tlsCalls.wrappingAdd(1, ordering: .relaxed)
        } else {
            plainCalls.wrappingAdd(1, ordering: .relaxed)
        }
    }

    /// One call refused: the peer's certificate was not the pinned one, or no trusted CA vouched for it.
    public func countRefusal() { refusedCalls.wrappingAdd(1, ordering: .relaxed) }
}
