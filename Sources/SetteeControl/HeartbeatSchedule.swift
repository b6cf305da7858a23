import SetteeClusterMap
import SetteeCore

/// When this node sends each peer its next heartbeat (ADR 0039). Pure: the caller passes the time (`Duration` since
/// its start, as `ClusterBrain` takes it) and feeds each call's end back.
///
/// Before, a round called every peer and waited for the slowest before the next round, so one paused or cut-off
/// peer (a call that ends only at its timeout) stretched every round to that timeout and delayed every healthy
/// peer's answer, and the views it carries, by up to as much. Now each peer has its own cadence.
///
/// Invariants:
///   1. At most one call per peer is in flight: `due` never names a peer whose call has not ended.
///   2. A peer is due `interval` after its last call started (at once the first time), so a peer that answers
///      is called every `interval` whatever the other peers do.
///   3. A peer that no longer is a member is forgotten (`due` drops it), so its late answer changes nothing here.
///   4. At most one pull (fetching a newer config) is under way at a time: the newest stamp wins anyway.
///
/// ```
///   idle ──due(now) names it──▶ in flight ──ended(peer)──▶ idle (next due at start + interval)
/// ```
public struct HeartbeatSchedule: Sendable {
    public let interval: Duration
    private var started: [NodeID: Duration] = [:]
    private var inFlight: Set<NodeID> = []
    private var pulling = false

    public init(interval: Duration) {
        self.interval = interval
    }

    /// The peers to call now among `peers` (this node's members other than itself); each is marked in flight until
    /// `ended` is called for it.
    public mutating func due(peers: [NodeID], now: Duration) -> [NodeID] {
        let current = Set(peers)
        started = started.filter { current.contains($0.key) }
        inFlight.formIntersection(current)
        var out: [NodeID] = []
        for p in peers where !inFlight.contains(p) {
            if let last = started[p], now - last < interval { continue }
            started[p] = now
            inFlight.insert(p)
            out.append(p)
        }
        return out
    }

    /// The call to `peer` ended (answered or failed).
    public mutating func ended(_ peer: NodeID) {
        inFlight.remove(peer)
    }

    /// Whether a call to `peer` is under way.
    public func isInFlight(_ peer: NodeID) -> Bool { inFlight.contains(peer) }

    /// How long until the next peer falls due (zero if one is due now); nil when every peer is in flight or there
    /// are none. The caller sleeps at most this long (and at least its own floor).
    public func nextDue(peers: [NodeID], now: Duration) -> Duration? {
        var best: Duration? = nil
        for p in peers where !inFlight.contains(p) {
            let wait = started[p].map { max(.zero, $0 + interval - now) } ?? .zero
            if best.map({ wait < $0 }) ?? true { best = wait }
        }
        return best
    }

    /// Starts a pull unless one is under way: true means the caller pulls, then calls `pullEnded`.
    public mutating func startPull() -> Bool {
        if pulling { return false }
        pulling = true
        return true
    }

    public mutating func pullEnded() {
        pulling = false
    }
}
