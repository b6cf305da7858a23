import SetteeClusterMap
import SetteeCore

/// Who is down, and whether this node may act on it: auto-failover's decision as a pure value (views in,
/// verdict out, time injected).
///
/// Every node reports, with its heartbeat answer, which members it heard from recently (its *view*). The
/// orchestrator feeds the views it has (its own included) to `round`:
///
/// 1. **Quorum**: this node may change the cluster only while it reaches a strict majority of the active members,
///    itself included. A node cut off from the majority stops making changes.
/// 2. **Down**: a member is judged down only when a strict majority of the *other* members report they cannot
///    reach it. A member whose view this node cannot get (it is unreachable from here) counts as still reaching
///    everyone: silence is not a vote. So one cut link (orchestrator ↔ n4) never fails n4 over while the rest
///    still reach it.
/// 3. **Failover**: with quorum, exactly one member down, and that member down without a break for at least
///    `timeout`, it is the one to fail over. Two down at once is left to an operator, as in Couchbase.
///
/// ```
///   views ──▶ quorum? ──no──▶ nothing (and admin changes answer 503)
///               │yes
///               ▼
///          down = {x : |{y ≠ x : view(y) known, x ∉ view(y)}| * 2 > |members| - 1}
///               │ exactly one, down ≥ timeout
///               ▼
///            failOver(x)
/// ```
public struct FailureDetector: Sendable, Equatable {
    /// When each member judged down was first judged so (on the caller's clock), reset when it is seen again.
    public private(set) var downSince: [NodeID: Duration] = [:]

    public init() {}

    /// What one round concluded.
    public struct Verdict: Sendable, Equatable {
        /// Whether this node reaches a strict majority of the active members (itself included).
        public var hasQuorum: Bool
        /// Members a majority of the others cannot reach, in member order.
        public var down: [NodeID]
        /// The member to fail over now, if any.
        public var failOver: NodeID?
    }

    /// Whether `me`, reaching `reachable`, sees a strict majority of `members` (itself counted once).
    public static func hasQuorum(members: [NodeID], me: NodeID, reachable: Set<NodeID>) -> Bool {
        let seen = members.filter { $0 == me || reachable.contains($0) }.count
        return seen * 2 > members.count
    }

    /// Members a strict majority of the other members cannot reach. `views[y]` = the members `y` reaches;
    /// a member without a view is taken to reach everyone.
    public static func down(members: [NodeID], views: [NodeID: Set<NodeID>]) -> [NodeID] {
        let others = members.count - 1
        guard others > 0 else { return [] }
        return members.filter { x in
            let votes = members.filter { y in y != x && views[y].map { !$0.contains(x) } ?? false }.count
            return votes * 2 > others
        }
    }

    /// One round at time `now`: `members` are the active members, `views` what each reported (this node's own
    /// view under `me`), `timeout` the auto-failover timeout.
    public mutating func round(
        now: Duration, members: [NodeID], me: NodeID, views: [NodeID: Set<NodeID>], timeout: Duration
    ) -> Verdict {
        let quorum = Self.hasQuorum(members: members, me: me, reachable: views[me] ?? [])
        let down = Self.down(members: members, views: views)
        var since: [NodeID: Duration] = [:]
        for x in down { since[x] = downSince[x] ?? now }
        downSince = since
        var victim: NodeID? = nil
        if quorum, down.count == 1, let x = down.first, x != me, let start = since[x], now - start >= timeout {
            victim = x
        }
        return Verdict(hasQuorum: quorum, down: down, failOver: victim)
    }
}
