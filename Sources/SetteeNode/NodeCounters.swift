import Synchronization

/// Node-wide counters for STAT and metrics. Relaxed atomics: they are statistics, not control state.
public final class NodeCounters: Sendable {
    public let startedAt: UInt64
    let currentConnections = Atomic<Int>(0)
    let totalConnections = Atomic<Int>(0)
    let rejectedConnections = Atomic<Int>(0)
    let cmdGet = Atomic<Int>(0)
    let cmdSet = Atomic<Int>(0)
    let getHits = Atomic<Int>(0)
    let getMisses = Atomic<Int>(0)
    let protocolErrors = Atomic<Int>(0)
    let authErrors = Atomic<Int>(0)
    let notMyVBucket = Atomic<Int>(0)
    /// Times a connection stopped reading because its unsent output was above the high-water mark.
    let outputPauses = Atomic<Int>(0)
    /// Connections closed for not authenticating (or using an open bucket) within the handshake deadline.
    let handshakeTimeouts = Atomic<Int>(0)

    public init(startedAt: UInt64) { self.startedAt = startedAt }

    public var connections: Int { currentConnections.load(ordering: .relaxed) }
    public var gets: Int { cmdGet.load(ordering: .relaxed) }
    public var sets: Int { cmdSet.load(ordering: .relaxed) }
}
