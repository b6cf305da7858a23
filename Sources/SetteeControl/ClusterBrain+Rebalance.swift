import SetteeClusterMap
import SetteeCore

// The rebalance this node runs, as the brain's state (issue 69 item 3): the brain holds the `RebalanceRun` of the
// bucket being rebalanced and routes its events and directives, so the run's decisions sit beside the brain's
// others and see its quorum. The batch protocol itself is `RebalanceRun`'s (forward, catch up, hand over, switch;
// ADR 0119); the brain adds one rule:
//
// 1. A batch starts only while this node reaches a strict majority of the active members (`hasQuorum`): cut off
//    from the majority it may be failed over by it, and it publishes nothing more (each commit also claims an epoch
//    from a majority, ADR 0034; this keeps it from starting a batch it cannot finish).
//
//   rebalanceStarted(run) ──▶ rebalance = run, run.handle(.start) ──▶ [.rebalance(directive)]
//   rebalance(event)      ──▶ run.handle(event, quorumProblem) ──────▶ [.rebalance(directive)]; an ended run is
//                                                                      dropped
extension ClusterBrain {
    /// Starts `run` (replacing any run left here: the shell runs one rebalance at a time) and returns its first
    /// directives.
    mutating func startRebalance(_ run: RebalanceRun) -> [Directive] {
        rebalance = run
        return routeRebalance(.start)
    }

    /// Hands `event` to the running rebalance; nothing when none runs.
    mutating func routeRebalance(_ event: RebalanceRun.Event) -> [Directive] {
        guard var run = rebalance else { return [] }
        let out = run.handle(event, now: now, quorumProblem: rebalanceQuorumProblem)
        rebalance = run.isOver ? nil : run
        return out.map { .rebalance($0) }
    }

    /// Why this node must not start a rebalance batch now (rule 1), or nil.
    var rebalanceQuorumProblem: String? {
        guard config.active.count > 1, !hasQuorum else { return nil }
        let seen = config.active.filter { $0 == me || reachable.contains($0) }.count
        return "No quorum: \(me) reaches \(seen) of \(config.active.count) active cluster members, not a majority; "
            + "it makes no cluster changes until it does."
    }
}
