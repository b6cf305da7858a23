import SetteeClusterMap
import SetteeControl
import SetteeCore
import Testing

/// The epoch rules and the brain's single-node decisions, without a network.
@Suite struct ClusterBrainTests {
    static let names = (0..<3).map { NodeID("ns_1@n\($0)") }

    static func config(epoch: Int64 = 1, rev: Int64 = 1, publisher: Int = 0, active: [NodeID] = names)
        -> ClusterBrain.Config
    {
        ClusterBrain.Config(
            stamp: ConfigStamp(epoch: epoch, rev: rev, publisher: names[publisher]), active: active,
            placements: ["b": .initial(numVBuckets: 8, numReplicas: 1, nodes: active)])
    }

    /// Proves the adoption rule: a lower epoch never wins whatever its rev; a config from below the promised
    /// epoch is refused even when newer than the held one; equal revisions converge on the lower publisher.
    @Test func adoptionRuleOrdersByEpochThenRevAndHonoursPromises() {
        let a = Self.names[0]
        let b = Self.names[1]
        let held = ConfigStamp(epoch: 3, rev: 10, publisher: b)
        #expect(!EpochRules.adopts(incoming: .init(epoch: 2, rev: 99, publisher: a), current: held, promise: nil))
        #expect(EpochRules.adopts(incoming: .init(epoch: 4, rev: 5, publisher: a), current: held, promise: nil))
        #expect(EpochRules.adopts(incoming: .init(epoch: 3, rev: 11, publisher: b), current: held, promise: nil))
        let promised = EpochPromise(epoch: 4, candidate: a)
        #expect(!EpochRules.adopts(incoming: .init(epoch: 3, rev: 11, publisher: b), current: held, promise: promised))
        #expect(EpochRules.adopts(incoming: .init(epoch: 4, rev: 11, publisher: a), current: held, promise: promised))
        #expect(EpochRules.adopts(incoming: .init(epoch: 3, rev: 10, publisher: a), current: held, promise: nil))
        #expect(!EpochRules.adopts(incoming: held, current: .init(epoch: 3, rev: 10, publisher: a), promise: nil))
    }

    /// Proves the promise rule: one candidate per epoch, never a lower epoch, never an epoch the voter's config
    /// already has, never to a candidate whose config is older than the voter's.
    @Test func promiseRuleGrantsOneCandidatePerEpoch() {
        let a = Self.names[0]
        let b = Self.names[1]
        let held = ConfigStamp(epoch: 3, rev: 10, publisher: b)
        #expect(EpochRules.grants(epoch: 4, candidate: a, candidateStamp: held, current: held, promise: nil))
        let p = EpochPromise(epoch: 4, candidate: a)
        #expect(EpochRules.grants(epoch: 4, candidate: a, candidateStamp: held, current: held, promise: p))
        #expect(!EpochRules.grants(epoch: 4, candidate: b, candidateStamp: held, current: held, promise: p))
        #expect(EpochRules.grants(epoch: 5, candidate: b, candidateStamp: held, current: held, promise: p))
        #expect(!EpochRules.grants(epoch: 3, candidate: a, candidateStamp: held, current: held, promise: nil))
        let older = ConfigStamp(epoch: 3, rev: 9, publisher: b)
        #expect(!EpochRules.grants(epoch: 4, candidate: a, candidateStamp: older, current: held, promise: nil))
    }

    /// Proves the timing rule holds for the defaults at every failover timeout Couchbase allows (5 s to 1 h), and
    /// that it fails when the margin is too thin for a slow tick.
    @Test func fenceLeadsFailoverForEveryAllowedTimeout() {
        var t = ClusterBrain.Timing()
        for seconds in [5, 6, 10, 30, 120, 3600] {
            t.failoverTimeout = .seconds(seconds)
            #expect(t.fenceLeadsFailover, "timeout \(seconds) s")
            #expect(t.fenceAfter > .zero)
        }
        t.failoverTimeout = .seconds(5)
        t.tickInterval = .seconds(2)
        #expect(!t.fenceLeadsFailover)
    }

    /// Proves a node cut off from everyone fences itself `fenceAfter` after its last contact with a majority (not
    /// after it noticed), and lifts the fence only once it has a majority again.
    @Test func isolatedNodeFencesOnItsLastMajorityContact() {
        var timing = ClusterBrain.Timing()
        timing.failoverTimeout = .seconds(5)
        let me = Self.names[0]
        var brain = ClusterBrain(
            me: me, config: Self.config(), promise: nil, timing: timing, autoFailover: false, now: .zero)
        #expect(brain.fence != nil, "starts fenced until it reaches a majority")
        let stamp = brain.config.stamp
        _ = brain.handle(
            .heartbeatAnswered(from: Self.names[1], sent: .milliseconds(100), stamp: stamp, promised: 0, sees: [me]),
            now: .milliseconds(100))
        #expect(brain.handle(.tick, now: .milliseconds(200)) == [.unfence])
        // Last contact at 0.1 s; fenceAfter = 3 s: still serving at 3.05 s, fenced at the first tick from 3.1 s.
        #expect(brain.handle(.tick, now: .milliseconds(3050)).isEmpty)
        let out = brain.handle(.tick, now: .milliseconds(3100))
        #expect(out.count == 1 && brain.fence != nil)
        // Heard from a peer again, at the same config: the fence lifts.
        _ = brain.handle(
            .heartbeatAnswered(from: Self.names[2], sent: .seconds(9), stamp: stamp, promised: 0, sees: [me]),
            now: .seconds(9))
        #expect(brain.handle(.tick, now: .seconds(9)) == [.unfence])
    }

    /// Proves a fenced node that hears of a newer config stays fenced (and pulls it) instead of serving its old one.
    @Test func fenceStaysUpWhileAPeerHoldsANewerConfig() {
        var timing = ClusterBrain.Timing()
        timing.failoverTimeout = .seconds(5)
        let me = Self.names[0]
        var brain = ClusterBrain(
            me: me, config: Self.config(), promise: nil, timing: timing, autoFailover: false, now: .zero)
        let newer = ConfigStamp(epoch: 2, rev: 2, publisher: Self.names[1])
        let out = brain.handle(
            .heartbeatAnswered(from: Self.names[1], sent: .milliseconds(100), stamp: newer, promised: 2, sees: [me]),
            now: .milliseconds(100))
        #expect(out == [.pull(from: Self.names[1])])
        #expect(brain.handle(.tick, now: .milliseconds(200)).isEmpty)
        #expect(brain.fence != nil)
    }

    /// Proves an operator's failover of a member that is unreachable but not known gone waits for its fence: it is
    /// not decided before the member has been down by a majority of views for the failover timeout, and a member
    /// whose port refuses connections (its process is gone) goes at once.
    @Test func failoverOfAnUnreachableMemberWaitsForItsFence() {
        var timing = ClusterBrain.Timing()
        timing.failoverTimeout = .seconds(5)
        let (a, b, c) = (Self.names[0], Self.names[1], Self.names[2])
        var brain = ClusterBrain(
            me: a, config: Self.config(), promise: nil, timing: timing, autoFailover: false, now: .zero)
        let stamp = brain.config.stamp
        func heartbeats(_ t: Duration, cSeen: Bool) {
            _ = brain.handle(
                .heartbeatAnswered(from: b, sent: t, stamp: stamp, promised: 0, sees: cSeen ? [a, c] : [a]), now: t)
            if cSeen {
                _ = brain.handle(.heartbeatAnswered(from: c, sent: t, stamp: stamp, promised: 0, sees: [a, b]), now: t)
            } else {
                _ = brain.handle(.heartbeatFailed(from: c, refused: false), now: t)
            }
            _ = brain.handle(.tick, now: t)
        }
        heartbeats(.seconds(1), cSeen: true)
        // c cut off after 1 s: down by views from 5 s (4 s of silence), an operator's failover allowed from 6 s
        // (failover timeout less the 4 s of silence already counted).
        var t = Duration.seconds(2)
        while t <= .seconds(5) {
            heartbeats(t, cSeen: false)
            t += .seconds(1)
        }
        let asked = brain.handle(.failoverRequested(c, allowUnsafe: false, automatic: false), now: .milliseconds(5500))
        #expect(asked.isEmpty, "waits: \(asked)")
        #expect(brain.handle(.tick, now: .milliseconds(5900)).isEmpty)
        let due = brain.handle(.tick, now: .seconds(6))
        #expect(due.contains { if case .requestPromises = $0 { return true } else { return false } }, "\(due)")

        // A refused connection: at once.
        var quick = ClusterBrain(
            me: a, config: Self.config(), promise: nil, timing: timing, autoFailover: false, now: .zero)
        _ = quick.handle(
            .heartbeatAnswered(from: b, sent: .seconds(1), stamp: stamp, promised: 0, sees: [a]), now: .seconds(1))
        _ = quick.handle(.heartbeatFailed(from: c, refused: true), now: .seconds(1))
        let now = quick.handle(.failoverRequested(c, allowUnsafe: false, automatic: false), now: .seconds(1))
        #expect(now.contains { if case .requestPromises = $0 { return true } else { return false } }, "\(now)")
    }
}
