import SetteeClusterMap
import SetteeControl
import SetteeCore
import Testing

/// Epochs and revisions from peers are bounded (`Limits.maxClusterEpoch` / `maxConfigRevision`), and every `+ 1` the
/// brain takes on them refuses at the bound instead of overflowing.
@Suite struct EpochLimitTests {
    static let names = (0..<3).map { NodeID("ns_1@n\($0)") }
    static let top = Limits.maxClusterEpoch

    static func config(epoch: Int64 = 1, rev: Int64 = 1) -> ClusterBrain.Config {
        ClusterBrain.Config(
            stamp: ConfigStamp(epoch: epoch, rev: rev, publisher: names[0]), active: names,
            placements: ["b": .initial(numVBuckets: 8, numReplicas: 1, nodes: names)])
    }

    /// Proves a voter never promises an epoch past the bound (`POST /settee/internal/promise` with epoch
    /// 9223372036854775807 was granted and persisted: the node then refused every config for good), nor to a
    /// candidate whose stamp is past it; the bound itself is still granted.
    @Test func promisePastTheBoundIsRefused() {
        let a = Self.names[0]
        let held = ConfigStamp(epoch: 3, rev: 10, publisher: a)
        #expect(!EpochRules.grants(epoch: .max, candidate: a, candidateStamp: held, current: held, promise: nil))
        #expect(
            !EpochRules.grants(epoch: Self.top + 1, candidate: a, candidateStamp: held, current: held, promise: nil))
        let wild = ConfigStamp(epoch: .max, rev: .max, publisher: a)
        #expect(!EpochRules.grants(epoch: 4, candidate: a, candidateStamp: wild, current: held, promise: nil))
        #expect(EpochRules.grants(epoch: Self.top, candidate: a, candidateStamp: held, current: held, promise: nil))
    }

    /// Proves a config stamped past the bounds is never adopted (a heartbeat's or a push's), whatever its order.
    @Test func configPastTheBoundIsNotAdopted() {
        let held = ConfigStamp(epoch: 3, rev: 10, publisher: Self.names[1])
        for wild in [
            ConfigStamp(epoch: .max, rev: 1, publisher: Self.names[0]),
            ConfigStamp(epoch: 3, rev: Limits.maxConfigRevision + 1, publisher: Self.names[0]),
            ConfigStamp(epoch: -1, rev: 11, publisher: Self.names[0]),
        ] {
            #expect(!EpochRules.adopts(incoming: wild, current: held, promise: nil), "\(wild)")
        }
        #expect(EpochRules.nextEpoch(current: held, promise: nil) == 4)
        #expect(
            EpochRules.nextEpoch(current: held, promise: EpochPromise(epoch: Self.top, candidate: Self.names[0])) == nil
        )
        #expect(EpochRules.nextRevision(after: Limits.maxConfigRevision) == nil)
        #expect(EpochRules.nextRevision(after: 7) == 8)
    }

    /// Proves a change at the top epoch is refused (`limitReached`) instead of claiming `max(…) + 1`, which
    /// trapped at Int64.max and is past the bound here; no promise is made.
    @Test func changeAtTheTopEpochIsRefused() {
        let c = Self.config(epoch: Self.top)
        var b = ClusterBrain(
            me: Self.names[0], config: c, promise: nil, timing: ClusterBrain.Timing(), autoFailover: false, now: .zero)
        for p in [1, 2] {
            _ = b.handle(
                .heartbeatAnswered(
                    from: Self.names[p], sent: .seconds(1), stamp: c.stamp, promised: 0, sees: Set(Self.names)),
                now: .seconds(1))
        }
        let out = b.handle(.changeRequested(id: 1), now: .seconds(2))
        #expect(out.count == 1)
        if case .changeRefused(1, .limitReached) = out.first {} else { Issue.record("\(out)") }
        #expect(b.promise == nil)
    }

    /// Proves a failover is refused (`limitReached`) at the top epoch before it claims, and at the top revision
    /// before it publishes (`config.stamp.rev + 1`).
    @Test func failoverAtTheTopIsRefused() {
        let (a, b, c) = (Self.names[0], Self.names[1], Self.names[2])
        func brain(_ config: ClusterBrain.Config) -> ClusterBrain {
            var brain = ClusterBrain(
                me: a, config: config, promise: nil, timing: ClusterBrain.Timing(), autoFailover: false, now: .zero)
            _ = brain.handle(
                .heartbeatAnswered(from: b, sent: .seconds(1), stamp: config.stamp, promised: 0, sees: [a]),
                now: .seconds(1))
            _ = brain.handle(.heartbeatFailed(from: c, refused: true), now: .seconds(1))
            return brain
        }
        var epochs = brain(Self.config(epoch: Self.top))
        let refused = epochs.handle(.failoverRequested(c, allowUnsafe: false, automatic: false), now: .seconds(1))
        #expect(refused.count == 1)
        if case .failoverRefused(c, .limitReached) = refused.first {} else { Issue.record("\(refused)") }

        var revs = brain(Self.config(rev: Limits.maxConfigRevision))
        _ = revs.handle(.failoverRequested(c, allowUnsafe: false, automatic: false), now: .seconds(1))
        _ = revs.handle(.promiseAnswered(from: b, epoch: 2, granted: true), now: .seconds(1))
        // c's port refused the fence request: its process is gone, so the survivors are sampled.
        _ = revs.handle(.fenceAnswered(from: c, epoch: 2, .gone), now: .seconds(1))
        let rows: [String: [UInt64]] = ["b": Array(repeating: 1, count: 8)]
        _ = revs.handle(.seqnosAnswered(from: a, rows), now: .seconds(1))
        let decided = revs.handle(.seqnosAnswered(from: b, rows), now: .seconds(1))
        #expect(decided.count == 1)
        if case .failoverRefused(c, .limitReached) = decided.first {} else { Issue.record("\(decided)") }
    }
}
