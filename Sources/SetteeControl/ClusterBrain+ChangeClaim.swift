import SetteeClusterMap
import SetteeCore

// Epoch claims for config changes other than failover (ADR 0034): a rebalance step, a hand-over of held vBuckets,
// adding, recovering or removing a member. Each claims a new epoch from a majority exactly as a failover does
// (`claim`), then the interpreter publishes the change in it. So an orchestrator cut off from the majority publishes
// nothing (it gets no majority's promise), and a change published before it noticed loses to anything the majority
// publishes after claiming a later epoch, whatever its `rev`.
//
//   idle ──changeRequested(id)──▶ claiming(epoch e) ──promises from a strict majority──▶ changeClaimed(id, e)
//     ▲  (busy / no quorum:            │ a majority impossible, or roundTimeout
//     │   changeRefused at once)       ▼
//     └──────────────────────── changeRefused(id, .epochRefused(e))
//
//   changeCommitting(claim) ──▶ commitChange(claim)          the interpreter commits the change in the claim
//                           └─▶ changeStale(claim, reason)   it commits nothing (ADR 0039's staleness rule)
//
// Invariants:
// 1. At most one claim (change or failover) runs at a time on a node; the other is refused as busy.
// 2. `changeClaimed(id, e)` only after this node persisted its own promise of `e` and a strict majority of the
//    electorate (the active members, itself counted) answered that they persisted it too.
// 3. `e` is above the config's epoch and every epoch this node promised, so two claims never share an epoch.
// 4. Only an active member claims (or a node with no members yet, alone).
// 5. A change is committed in a claim only after `changeCommitting` answered `commitChange` on the brain's own
//    promise and config (`EpochClaim.staleness`): the interpreter asks with the store's order held, so no promise or
//    adoption lands between the answer and the commit, and the store never judges a claim (ADR 0130).
extension ClusterBrain {
    /// A change's epoch claim while its promises are counted.
    struct ChangeClaim: Sendable, Equatable {
        var id: UInt64
        var epoch: Int64
        var granted: Set<NodeID>
        var answered: Set<NodeID>
        var started: Duration
        /// Who must promise: the active members, this node included.
        var electorate: [NodeID]
    }

    /// Whether a change's epoch claim is being counted.
    public var isClaimingChange: Bool { change != nil }

    /// Whether a claim (a change's or a failover's) is under way on this node.
    public var isClaiming: Bool { change != nil || pending != nil }

    /// Starts the claim of change `id`: refused at once while another claim runs or without quorum. The epoch is
    /// above `seen` too (the highest promise a repair saw its peers report).
    mutating func startChange(_ id: UInt64, above seen: Int64 = 0) -> [Directive] {
        if pending != nil || change != nil { return [.changeRefused(id: id, .busy)] }
        // A member another is failing over makes no changes: its config is the one being replaced, and a change
        // published over it would restore what the failover took away (the simulation found one undoing it).
        if let e = failoverHold {
            return [
                .changeRefused(
                    id: id, .noQuorum("\(me) is being failed over (cluster epoch \(e)); it makes no cluster changes."))
            ]
        }
        // A member failed over (or not yet rebalanced in) has no vote, so it cannot count itself into a majority of
        // the members it would change (the simulation found a failed-over node publishing this way).
        if !config.active.isEmpty, !config.active.contains(me) {
            return [
                .changeRefused(
                    id: id, .noQuorum("\(me) is not an active cluster member; it makes no cluster changes."))
            ]
        }
        // A two-member cluster has no majority without both: a change there needs both too (as before, when it
        // was refused without quorum).
        if config.active.count > 1, !hasQuorum {
            let seen = config.active.filter { $0 == me || reachable.contains($0) }.count
            return [
                .changeRefused(
                    id: id,
                    .noQuorum(
                        "No quorum: \(me) reaches \(seen) of \(config.active.count) active cluster members, not a "
                            + "majority; it makes no cluster changes until it does."))
            ]
        }
        let floor = seen > (promise?.epoch ?? 0) ? EpochPromise(epoch: seen, candidate: me) : promise
        guard let epoch = EpochRules.nextEpoch(current: config.stamp, promise: floor) else {
            return [.changeRefused(id: id, Self.epochLimitReached(config.stamp, promise))]
        }
        let mine = EpochPromise(epoch: epoch, candidate: me)
        promise = mine
        // An unclustered node (no members yet) decides alone.
        let electorate = config.active.isEmpty ? [me] : config.active
        if EpochRules.isMajority([me], of: electorate) {
            return [.persistPromise(mine)] + claimed(id, epoch: epoch)
        }
        change = ChangeClaim(
            id: id, epoch: epoch, granted: [me], answered: [me], started: now, electorate: electorate)
        return [
            .persistPromise(mine),
            .requestPromises(epoch: epoch, stamp: config.stamp, from: electorate.filter { $0 != me }),
        ]
    }

    /// Counts one answer to the change's promise request.
    mutating func changePromiseAnswered(from: NodeID, granted: Bool) -> [Directive] {
        guard var c = change else { return [] }
        if from == me && !granted {
            // This node's own promise could not be persisted (it promised the epoch to another meanwhile).
            change = nil
            return [.changeRefused(id: c.id, .epochRefused(c.epoch))]
        }
        c.answered.insert(from)
        if granted { c.granted.insert(from) }
        if EpochRules.isMajority(c.granted, of: c.electorate) {
            change = nil
            return claimed(c.id, epoch: c.epoch)
        }
        let undecided = c.electorate.filter { !c.answered.contains($0) }
        if !EpochRules.isMajority(c.granted.union(undecided), of: c.electorate) {
            change = nil
            return [.changeRefused(id: c.id, .epochRefused(c.epoch))]
        }
        change = c
        return []
    }

    /// Gives up a claim whose promises did not come within `roundTimeout`.
    mutating func advanceChange() -> [Directive] {
        guard let c = change, now - c.started >= timing.roundTimeout else { return [] }
        change = nil
        return [.changeRefused(id: c.id, .epochRefused(c.epoch))]
    }

    /// Whether a change may be committed in `claim` now (`EpochClaim.staleness` on this brain's promise and config):
    /// `commitChange` when this node still holds its own promise of exactly the claim's epoch and no config of that
    /// epoch or later arrived since, `changeStale` with the reason otherwise. Changes nothing in the brain: the
    /// commit comes back as `configLoaded`.
    func changeCommitting(_ claim: EpochClaim) -> [Directive] {
        guard claim.claimant == me else {
            return [.changeStale(claim, reason: "\(claim) is not a claim of \(me); it commits nothing here.")]
        }
        if let why = claim.staleness(promise: promise, current: config.stamp) {
            return [.changeStale(claim, reason: why)]
        }
        return [.commitChange(claim)]
    }
}
