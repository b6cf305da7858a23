import SetteeClusterMap
import SetteeCore

// The serving lease (ADR 0124): a member serves as the active of a vBucket only while it holds a lease, and the lease
// is checked on every request against the monotonic clock, not by a tick.
//
// Why the fence is not enough: the fence goes up at a tick (`fenceRound`), and a process that was paused (SIGSTOP, a
// long stall, a VM pause) runs no tick while paused. Resumed after the majority failed it over, it answered the
// requests already waiting in its sockets from its old state before its next tick ran: stale reads, and a plain write
// acknowledged and then lost (issue 69). The lease is a deadline the request path compares the clock with, so the
// first request read after the pause is refused whatever the timers did.
//
// Invariants:
//   1. Lease contact is an answer to this node's own heartbeat, dated when sent (as the fence's `answeredAt`), that
//      shows nothing newer than this node holds: no config it would adopt and no promise past its config's epoch.
//      So a victim that resumes mid-failover or after it renews nothing from peers that promised the failover's
//      epoch (a majority did, before the victim was asked to fence) until it holds their config.
//   2. `lease` is `.until(c + leaseDuration)` where `c` is the latest instant by which a strict majority of the active
//      members (itself counted) gave lease contact; `.none` while fenced, before such contact, or when this node is
//      not an active member.
//   3. `Timing.leaseEndsBeforeFailover`: `leaseDuration / (1 − ρ) < failoverTimeout / (1 + ρ)`. A majority's views
//      start counting a member down no sooner than the member's lease contact (the peer received the heartbeat it
//      answered after it was sent), and fail it over `failoverTimeout` after that at the earliest, so the lease has
//      run out on the member's clock before any other copy is promoted in its place.
//   4. With fewer than three active members there is no self-fencing (ADR 0020 rule 4): two members fail each other
//      over only by an operator's forced decision. The lease is `.unbounded` there, as the fence is absent.
//
// ```
//   heartbeat sent at s ──▶ answered clean by p ──▶ leaseContactAt[p] = s
//   lease = .until(majority's s + leaseDuration)   request at t: serves as active iff t < expiry (one clock read)
// ```
extension ClusterBrain {
    /// Whether, and until when, this node may serve as an active.
    public enum Lease: Sendable, Equatable {
        /// It may not (fenced, no majority contact yet, or not an active member).
        case none
        /// Until this instant of the brain's clock (exclusive).
        case until(Duration)
        /// No bound: fewer than three active members, where no member fences itself (invariant 4).
        case unbounded

        /// Whether the lease holds at `t` (the brain's clock).
        public func holds(at t: Duration) -> Bool {
            switch self {
            case .none: return false
            case .until(let end): return t < end
            case .unbounded: return true
            }
        }
    }

    /// This node's serving lease now (invariant 2).
    public var lease: Lease {
        guard config.active.contains(me) else { return .none }
        guard Self.fencing(config.active, me: me) else { return .unbounded }
        guard fence == nil, unconfirmed == nil, let c = lastLeaseContact else { return .none }
        return .until(c + timing.leaseDuration)
    }

    /// The latest instant by which a strict majority of the active members (this node counted) gave lease contact
    /// (invariant 1); nil when they never did.
    var lastLeaseContact: Duration? {
        let needed = config.active.count / 2  // others needed besides itself for a strict majority
        if needed == 0 { return now }
        let times = config.active.filter { $0 != me }.compactMap { leaseContactAt[$0] }.sorted(by: >)
        return times.count >= needed ? times[needed - 1] : nil
    }

    /// Records `from`'s answer to the heartbeat sent at `sent` as lease contact when it shows nothing newer than this
    /// node holds (invariant 1).
    mutating func noteLeaseContact(from: NodeID, sent: Duration, stamp: ConfigStamp, promised: Int64) {
        let newer = EpochRules.adopts(incoming: stamp, current: config.stamp, promise: promise, me: me)
        guard !newer, promised <= config.stamp.epoch else { return }
        leaseContactAt[from] = max(leaseContactAt[from] ?? sent, sent)
    }
}
