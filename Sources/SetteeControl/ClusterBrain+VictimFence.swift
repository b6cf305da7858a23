import SetteeClusterMap
import SetteeCore

// The victim of a failover stops serving before the survivors' seqnos are sampled (ADR 0120).
//
//   orchestrator O                                   victim V
//   ──────────────                                   ────────
//   claim epoch e (a majority persisted promise e)
//   requestFence(V, e) ───────────────────────────▶ fenceRequested(O, e): fences (NOT_MY_VBUCKET, its waiting
//                                                   durable writes end ambiguous), holds until a config ≥ e
//   ◀──────────────────────── fenceAnswered(.fenced)
//   (or .gone: its port refused the connection; or no answer, asked again each second, until V has been out of
//    reach of a majority long enough to have fenced itself)
//   requestSeqnos(survivors) … decide … push to everyone, commit once a majority accepted
//
// Why the order matters: sampled first, the victim went on acknowledging majority writes with the one replica it
// still reached until the failover config arrived, and the failover promoted another copy that never got them
// (`ClusterBrainSimulationTests` invariant 6). Told the promoting config itself, the victim handed it on to the
// survivors before anything could be re-sampled (ADR 0119's trace of seed 2035): what stops it must promote nothing.
//
// Why V stays stopped: its fence lifts only once a majority of heartbeat answers sent after it shows nobody promised
// an epoch past its config, nor e (`failoverHold`) — a majority promised e before V was asked, so any majority V
// counts with itself includes one of them (`fenceRound`) — which holds over a restart too; in practice, once V holds
// a config of epoch e or later.
// A failover refused after V was asked, before anything was pushed, publishes the config unchanged at e (O owns
// e), so V's hold ends with it.
extension ClusterBrain {
    /// After the claim: asks the victim to fence, unless the failover is forced (the operator's allowUnsafe, or two
    /// members) or the victim must have fenced itself already.
    mutating func stopVictim(_ p: inout Pending) -> [Directive] {
        guard let epoch = p.epoch, !p.allowUnsafe, config.active.count > 2 else { return askSeqnos(&p) }
        if victimMustHaveFenced(p.victim) { return askSeqnos(&p) }
        p.fenceAsked = true
        p.phase = .fencingVictim(askedAt: now)
        p.phaseStarted = now
        pending = p
        return [.requestFence(of: p.victim, epoch: epoch)]
    }

    /// Whether the victim has been out of reach of a majority long enough to have fenced itself, and is out of reach
    /// still: judged down by a majority of the views this node holds, for `failoverTimeout` since its last contact
    /// (`Timing.fenceLeadsFailover`), and not heard by this node. A refused heartbeat does not count here: a process
    /// that restarted since may serve again; only a fence request refused after the claim does (`.gone`).
    func victimMustHaveFenced(_ victim: NodeID) -> Bool {
        guard !reachable.contains(victim), down.contains(victim), let since = detector.downSince[victim] else {
            return false
        }
        return now >= since + timing.failoverTimeout - timing.unhealthyAfter
    }

    /// The victim's answer: sampled once it confirmed or its process is gone; otherwise asked again by
    /// `advancePending` until it must have fenced itself.
    mutating func fenceAnswered(from: NodeID, epoch: Int64, _ answer: FenceAnswer) -> [Directive] {
        guard var p = pending, case .fencingVictim = p.phase, from == p.victim, epoch == p.epoch else { return [] }
        switch answer {
        case .fenced, .gone: return askSeqnos(&p)
        case .notFenced, .unanswered: return []
        }
    }

    /// The victim's side: holds its actives back for the failover claimed at `epoch` by `from`, and says so. A node
    /// that serves nothing (not an active member of its config) confirms without fencing; one that holds a config of
    /// `epoch` or later, or is asked by a non-member, does not fence for it.
    mutating func fenceRequested(from: NodeID, epoch: Int64) -> [Directive] {
        guard config.active.contains(me) else { return [.answerFence(to: from, epoch: epoch, fenced: true)] }
        guard ConfigStamp.isValidEpoch(epoch), epoch > config.stamp.epoch, config.active.contains(from), from != me,
            Self.fencing(config.active, me: me)
        else { return [.answerFence(to: from, epoch: epoch, fenced: false)] }
        failoverHold = max(failoverHold ?? epoch, epoch)
        // Only heartbeats sent from now on may lift it: they carry the promises of `epoch`.
        fencedAt = now
        var out: [Directive] = []
        if fence == nil {
            let reason =
                "Failing over: \(from) claimed cluster epoch \(epoch) to fail \(me) over; active vBuckets are held "
                + "back (NOT_MY_VBUCKET) until this node holds a config of that epoch or later."
            fence = reason
            out.append(.fence(reason))
        }
        out.append(.answerFence(to: from, epoch: epoch, fenced: true))
        return out
    }

    /// Whether the claimed epoch no longer governs the failover: this node holds another config than the one the
    /// epoch was claimed over (the fence phase can last the failover timeout, and a change claimed meanwhile may
    /// have been adopted), or promised a later epoch to another. Its decision would be over a stale config. Once
    /// pushed, the failover config itself is what `startPushing` and the commit compare.
    func claimLost(_ p: Pending) -> Bool {
        guard let e = p.epoch, let base = p.base else { return false }
        if case .pushing = p.phase { return false }
        if case .claiming = p.phase { return config.stamp != base }
        return config.stamp != base || promisedPast(e)
    }

    /// Whether this node promised another candidate `epoch`, or a later one, after claiming `epoch` itself. A promise
    /// below it is not: it cannot be this node's word after its own claim (a loaded CI run once refused a two-node
    /// failover as busy when the interpreter mirrored the registry's older promise into the brain, before ADR 0130).
    func promisedPast(_ epoch: Int64) -> Bool {
        guard let p = promise else { return false }
        return p.epoch > epoch || (p.epoch == epoch && p.candidate != me)
    }

    /// Ends a failover with `why`. Once its victim was asked to fence, and nothing was pushed, the config is
    /// published unchanged at the claimed epoch (this node still owns it): the victim's hold, and the promises that
    /// keep a restarted victim fenced, end with it. A failover config already pushed may still spread, and is left
    /// to do so.
    mutating func refuse(_ p: Pending, _ why: Refusal) -> [Directive] {
        pending = nil
        guard p.fenceAsked, let e = p.epoch, !promisedPast(e), config.stamp.epoch < e,
            let rev = EpochRules.nextRevision(after: config.stamp.rev)
        else { return [.failoverRefused(p.victim, why)] }
        if case .pushing = p.phase { return [.failoverRefused(p.victim, why)] }
        return republish(at: e, rev: rev) + [.failoverRefused(p.victim, why)]
    }

    /// Adopts this node's config unchanged at `(epoch, rev)`, which it owns, and publishes it: a failover's release
    /// and a repair alike.
    mutating func republish(at epoch: Int64, rev: Int64) -> [Directive] {
        config = Config(
            stamp: ConfigStamp(epoch: epoch, rev: rev, publisher: me), active: config.active,
            placements: config.placements)
        return [.publish(config, failed: nil, to: config.active.filter { $0 != me })]
    }

    /// How long a failover asks its victim to fence before it gives up: the failover timeout, the silence after which
    /// views count the victim down, and a round.
    var victimFenceLimit: Duration { timing.failoverTimeout + timing.unhealthyAfter + timing.roundTimeout }
}

// Repair: an epoch promised and never published. A failover's orchestrator that died after its victim fenced leaves
// the victim held, and every fenced node behind the majority's promise, until a config of that epoch or later is
// published. Once that has lasted longer than any live failover can (its fence phase, a seqno and a push round), the
// orchestrator claims a new epoch like any change and publishes its config unchanged in it.
extension ClusterBrain {
    /// The change id of a repair's claim; the interpreter never asks for it (its ids start at 1).
    static let repairChange: UInt64 = 0

    /// How long an epoch may stay promised and unpublished before the orchestrator repairs it: longer than a live
    /// failover lasts (its fence phase, then a seqno and a push round).
    var stuckEpochRepairAfter: Duration { victimFenceLimit + timing.roundTimeout * 2 }

    /// Starts a repair's claim when an epoch past the config has been promised here or by a reached peer for
    /// `stuckEpochRepairAfter`, this node orchestrates with quorum, and nothing is under way or newer elsewhere.
    mutating func repairStuckEpoch() -> [Directive] {
        let past = config.stamp.epoch
        let stuck =
            (promise?.epoch ?? 0) > past || reachable.contains { (peers[$0]?.promised ?? 0) > past }
        guard stuck else {
            stuckSince = nil
            return []
        }
        let since = stuckSince ?? now
        stuckSince = since
        let newer = reachable.contains { p in
            peers[p].map { EpochRules.adopts(incoming: $0.stamp, current: config.stamp, promise: promise, me: me) }
                ?? false
        }
        guard now - since >= stuckEpochRepairAfter, pending == nil, change == nil, failoverHold == nil,
            config.active.contains(me), orchestrator == me, hasQuorum, !newer
        else { return [] }
        // Asked again only after another full wait; above every promise the reached peers reported, which they
        // would otherwise refuse.
        stuckSince = now
        let seen = reachable.compactMap { peers[$0]?.promised }.max() ?? 0
        return startChange(Self.repairChange, above: seen)
    }

    /// A change's claim succeeded: the interpreter is told, except for a repair, which publishes the config
    /// unchanged at the claimed epoch itself.
    mutating func claimed(_ id: UInt64, epoch: Int64) -> [Directive] {
        guard id == Self.repairChange else { return [.changeClaimed(id: id, epoch: epoch)] }
        guard config.stamp.epoch < epoch, let rev = EpochRules.nextRevision(after: config.stamp.rev) else { return [] }
        return republish(at: epoch, rev: rev)
    }
}
