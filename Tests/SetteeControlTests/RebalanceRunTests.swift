import SetteeClusterMap
import SetteeControl
import SetteeCore
import Testing

/// `RebalanceRun`'s steps one event at a time, and the brain's ownership of it, without a network.
@Suite struct RebalanceRunTests {
    static let a = NodeID("a")
    static let b = NodeID("b")
    static let c = NodeID("c")

    /// vb 0 moves its active from a to c ([a, b] → [c, b]); vb 1 keeps a and swaps b for c ([a, b] → [a, c]).
    static let moves = [
        VBucketMove(vbucket: VBucketID(0), from: [a, b], to: [c, b], source: a, newCopies: [c], droppedCopies: [a]),
        VBucketMove(vbucket: VBucketID(1), from: [a, b], to: [a, c], source: a, newCopies: [c], droppedCopies: [b]),
    ]

    static func rows(_ state: [SeqnoReport.State], high: UInt64, persisted: UInt64) -> [SeqnoReport.Row] {
        state.map { SeqnoReport.Row(state: $0, high: high, persisted: persisted) }
    }

    // Proves the directives of one batch, in order: forward, the catch-up sample of the source, polls of the new copy
    // until it persisted that seqno (a poll round `pollInterval` apart), the hand-over (takeover for the move that
    // changes its active, dual for the one that keeps it), the source sampled again and required pending for the
    // takeover, the hand-over wait, then the switch and the progress.
    @Test func oneBatchRunsForwardCatchUpHandOverSwitch() {
        var run = RebalanceRun(bucket: "b", moves: Self.moves, batchSize: 2)
        let ms = { (n: Int64) in Duration.milliseconds(n) }
        #expect(
            run.handle(.start, now: ms(0)) == [
                .commit(.forward([VBucketID(0): [Self.c, Self.b], VBucketID(1): [Self.a, Self.c]]))
            ])
        #expect(run.handle(.committed, now: ms(1)) == [.requestSeqnos(from: Self.a, persist: [])])
        #expect(
            run.handle(
                .seqnosAnswered(from: Self.a, Self.rows([.active, .active], high: 10, persisted: 3)), now: ms(2))
                == [.requestSeqnos(from: Self.c, persist: [VBucketID(0), VBucketID(1)])])
        // c has 10 of vb 0 persisted, only 9 of vb 1: another round, for vb 1 only.
        let c1 = [
            SeqnoReport.Row(state: .replica, high: 10, persisted: 10), .init(state: .replica, high: 10, persisted: 9),
        ]
        #expect(run.handle(.seqnosAnswered(from: Self.c, c1), now: ms(3)) == [.wait(until: ms(23))])
        #expect(run.handle(.tick, now: ms(10)) == [.wait(until: ms(23))])
        #expect(run.handle(.tick, now: ms(23)) == [.requestSeqnos(from: Self.c, persist: [VBucketID(1)])])
        #expect(
            run.handle(
                .seqnosAnswered(from: Self.c, Self.rows([.replica, .replica], high: 10, persisted: 10)), now: ms(24))
                == [.commit(.handOver(takeover: [VBucketID(0)], dual: [VBucketID(1)]))])
        #expect(run.handle(.committed, now: ms(25)) == [.requestSeqnos(from: Self.a, persist: [])])
        #expect(
            run.handle(
                .seqnosAnswered(from: Self.a, Self.rows([.pending, .active], high: 12, persisted: 12)), now: ms(26))
                == [.requestSeqnos(from: Self.c, persist: [VBucketID(0), VBucketID(1)])])
        #expect(
            run.handle(
                .seqnosAnswered(from: Self.c, Self.rows([.replica, .replica], high: 12, persisted: 12)), now: ms(27))
                == [.commit(.switchChains([VBucketID(0): [Self.c, Self.b], VBucketID(1): [Self.a, Self.c]]))])
        #expect(run.handle(.committed, now: ms(28)) == [.progress(done: 2, total: 2), .finished])
        #expect(run.isOver)
    }

    // Proves a takeover's source that does not report the vBucket pending (it did not apply the hand-over) reverts
    // the batch, and the run fails once the revert is committed.
    @Test func aTakeoverSourceNotPendingRevertsTheBatch() {
        var run = RebalanceRun(bucket: "b", moves: Array(Self.moves.prefix(1)), batchSize: 1)
        _ = run.handle(.start, now: .zero)
        _ = run.handle(.committed, now: .zero)
        _ = run.handle(.seqnosAnswered(from: Self.a, Self.rows([.active], high: 1, persisted: 1)), now: .zero)
        _ = run.handle(.seqnosAnswered(from: Self.c, Self.rows([.replica], high: 1, persisted: 1)), now: .zero)
        #expect(run.handle(.committed, now: .zero) == [.requestSeqnos(from: Self.a, persist: [])])
        #expect(
            run.handle(.seqnosAnswered(from: Self.a, Self.rows([.active], high: 2, persisted: 2)), now: .zero) == [
                .commit(.revert([VBucketID(0)]))
            ])
        #expect(run.handle(.committed, now: .zero) == [.failed("vb 0 on a is active, not pending")])
    }

    // Proves a seqnos report without a row for a moving vBucket (peer bytes) is a failed answer that reverts, never a
    // trap, and a revert whose commit failed is retried `revertRetry` apart until `revertTimeout`.
    @Test func aShortReportRevertsAndAFailedRevertIsRetried() {
        let timing = RebalanceRun.Timing(revertRetry: .seconds(1), revertTimeout: .seconds(2))
        var run = RebalanceRun(bucket: "b", moves: Array(Self.moves.suffix(1)), batchSize: 1, timing: timing)
        _ = run.handle(.start, now: .zero)
        _ = run.handle(.committed, now: .zero)
        #expect(
            run.handle(.seqnosAnswered(from: Self.a, Self.rows([.active], high: 1, persisted: 1)), now: .zero) == [
                .commit(.revert([VBucketID(1)]))
            ])
        #expect(run.handle(.commitFailed("cut off"), now: .zero) == [.wait(until: .seconds(1))])
        #expect(run.handle(.tick, now: .seconds(1)) == [.commit(.revert([VBucketID(1)]))])
        #expect(run.handle(.commitFailed("cut off"), now: .seconds(1)) == [.wait(until: .seconds(2))])
        #expect(run.handle(.tick, now: .seconds(2)) == [.commit(.revert([VBucketID(1)]))])
        #expect(
            run.handle(.commitFailed("cut off"), now: .seconds(2)) == [
                .failed("a reported no seqnos for vb:1 (its revert was not published: cut off)")
            ])
    }

    // Proves the edits do what the steps say to a placement: forward chains, takeover and dual, the switch clearing
    // them with the new chains, and a revert clearing them with the old chains kept.
    @Test func editsApplyToThePlacement() {
        var p = BucketPlacement(chains: [[Self.a, Self.b], [Self.a, Self.b]])
        RebalanceRun.Edit.forward([VBucketID(0): [Self.c, Self.b]]).apply(to: &p)
        RebalanceRun.Edit.handOver(takeover: [VBucketID(0)], dual: [VBucketID(1)]).apply(to: &p)
        #expect(p.forward == [0: [Self.c, Self.b]] && p.takeover == [0] && p.dual == [1])
        var reverted = p
        RebalanceRun.Edit.revert([VBucketID(0), VBucketID(1)]).apply(to: &reverted)
        #expect(reverted == BucketPlacement(chains: [[Self.a, Self.b], [Self.a, Self.b]]))
        RebalanceRun.Edit.switchChains([VBucketID(0): [Self.c, Self.b], VBucketID(9): [Self.c]]).apply(to: &p)
        #expect(p == BucketPlacement(chains: [[Self.c, Self.b], [Self.a, Self.b]], dual: [1]))
    }

    // Proves the brain owns the run: it starts it, routes its events and drops it once over; and a batch starts only
    // while the node reaches a majority of the active members.
    @Test func theBrainOwnsTheRunAndStartsBatchesOnlyWithQuorum() {
        let alone = ClusterBrain.Config(
            stamp: ConfigStamp(epoch: 1, rev: 1, publisher: Self.a), active: [Self.a],
            placements: ["b": BucketPlacement(chains: [[Self.a, Self.b]])])
        var brain = ClusterBrain(
            me: Self.a, config: alone, promise: nil, timing: ClusterBrain.Timing(), autoFailover: false, now: .zero)
        let run = RebalanceRun(bucket: "b", moves: Array(Self.moves.prefix(1)), batchSize: 1)
        #expect(
            brain.handle(.rebalanceStarted(run), now: .zero) == [
                .rebalance(.commit(.forward([VBucketID(0): [Self.c, Self.b]])))
            ])
        #expect(brain.rebalance != nil)
        _ = brain.handle(.rebalance(.stopRequested), now: .zero)
        #expect(
            brain.handle(.rebalance(.commitFailed("x")), now: .zero) == [.rebalance(.commit(.revert([VBucketID(0)])))])
        #expect(brain.handle(.rebalance(.committed), now: .zero) == [.rebalance(.failed("x"))])
        #expect(brain.rebalance == nil)

        let three = ClusterBrain.Config(
            stamp: ConfigStamp(epoch: 1, rev: 1, publisher: Self.a), active: [Self.a, Self.b, Self.c],
            placements: ["b": BucketPlacement(chains: [[Self.a, Self.b]])])
        var cutOff = ClusterBrain(
            me: Self.a, config: three, promise: nil, timing: ClusterBrain.Timing(), autoFailover: false, now: .zero)
        let out = cutOff.handle(.rebalanceStarted(run), now: .seconds(10))
        #expect(
            out == [
                .rebalance(
                    .failed(
                        "No quorum: a reaches 1 of 3 active cluster members, not a majority; it makes no cluster "
                            + "changes until it does."))
            ])
        #expect(cutOff.rebalance == nil)
    }
}
