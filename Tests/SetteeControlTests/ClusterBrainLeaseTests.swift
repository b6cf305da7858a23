import SetteeClusterMap
import SetteeControl
import SetteeCore
import Testing

/// The serving lease (ADR 0124) and the fence's log line, on one brain without a network.
@Suite struct ClusterBrainLeaseTests {
    static let names = (0..<5).map { NodeID("ns_1@n\($0)") }

    static func config(epoch: Int64 = 1, rev: Int64 = 1, active: [NodeID]) -> ClusterBrain.Config {
        ClusterBrain.Config(
            stamp: ConfigStamp(epoch: epoch, rev: rev, publisher: active[0]), active: active,
            placements: ["b": .initial(numVBuckets: 8, numReplicas: 1, nodes: active)])
    }

    static func brain(members: Int, timeout: Int64 = 5) -> ClusterBrain {
        var timing = ClusterBrain.Timing()
        timing.failoverTimeout = .seconds(timeout)
        return ClusterBrain(
            me: names[0], config: config(active: Array(names.prefix(members))), promise: nil, timing: timing,
            autoFailover: false, now: .zero)
    }

    static func answer(
        _ b: inout ClusterBrain, from i: Int, sent ms: Int, stamp: ConfigStamp? = nil, promised: Int64 = 0
    )
        -> [ClusterBrain.Directive]
    {
        b.handle(
            .heartbeatAnswered(
                from: names[i], sent: .milliseconds(ms), stamp: stamp ?? b.config.stamp, promised: promised,
                sees: Set(names)),
            now: .milliseconds(ms + 5))
    }

    /// Proves the lease inequality for every failover timeout Couchbase allows (5 s to 1 h) with the default 1 %
    /// drift, that the lease ends before the fence, and that a drift the margin cannot cover breaks it.
    @Test func leaseEndsBeforeFailoverForEveryAllowedTimeout() {
        var t = ClusterBrain.Timing()
        for seconds in [5, 6, 10, 30, 120, 3600] {
            t.failoverTimeout = .seconds(seconds)
            #expect(t.leaseEndsBeforeFailover, "timeout \(seconds) s")
            #expect(t.leaseDuration > .zero && t.leaseDuration <= t.fenceAfter, "timeout \(seconds) s")
        }
        t.failoverTimeout = .seconds(5)
        #expect(t.leaseDuration == .milliseconds(2900))
        // A clock allowed to run 30 % slow: the margin no longer covers it.
        t.maxClockRateDrift = 0.3
        #expect(!t.leaseEndsBeforeFailover)
    }

    /// Proves the lease runs `leaseDuration` from the send time of the heartbeat a majority answered, is checked
    /// against the time asked (a paused process that never ticked still sees it expired), and is renewed by the next
    /// answer.
    @Test func leaseRunsFromTheMajoritysAnsweredHeartbeat() {
        var b = Self.brain(members: 3)
        #expect(b.lease == .none, "a node starting fenced holds no lease")
        _ = Self.answer(&b, from: 1, sent: 100)
        _ = b.handle(.tick, now: .milliseconds(200))
        #expect(b.fence == nil)
        #expect(b.lease == .until(.milliseconds(3000)))
        #expect(b.lease.holds(at: .milliseconds(2999)))
        // No event since: a process paused from 0.2 s to 10 s checks its next request against the clock.
        #expect(!b.lease.holds(at: .seconds(10)))
        _ = Self.answer(&b, from: 2, sent: 1100)
        #expect(b.lease == .until(.milliseconds(4000)))
    }

    /// Proves an answer showing a newer config, or a promise past this node's config (a failover of it under way),
    /// renews nothing: a victim resumed after its failover does not win its lease back from the peers that moved on.
    @Test func answersShowingANewerConfigOrPromiseDoNotRenew() {
        var b = Self.brain(members: 3)
        _ = Self.answer(&b, from: 1, sent: 100)
        _ = b.handle(.tick, now: .milliseconds(200))
        let before = b.lease
        let newer = ConfigStamp(epoch: 2, rev: 2, publisher: Self.names[1])
        let out = Self.answer(&b, from: 1, sent: 20_000, stamp: newer, promised: 2)
        #expect(out == [.pull(from: Self.names[1])])
        _ = Self.answer(&b, from: 2, sent: 20_000, stamp: b.config.stamp, promised: 2)
        #expect(b.lease == before)
        #expect(!b.lease.holds(at: .milliseconds(20_010)))
    }

    /// Proves the lease needs a strict majority: on five members one peer's answers are not enough, two are, and the
    /// older of the two decides.
    @Test func leaseNeedsAStrictMajority() {
        var b = Self.brain(members: 5)
        _ = Self.answer(&b, from: 1, sent: 100)
        _ = b.handle(.tick, now: .milliseconds(150))
        #expect(b.lease == .none)
        _ = Self.answer(&b, from: 2, sent: 300)
        _ = b.handle(.tick, now: .milliseconds(350))
        #expect(b.fence == nil)
        #expect(b.lease == .until(.milliseconds(100) + b.timing.leaseDuration))
    }

    /// Proves the lease is void while fenced, and unbounded with fewer than three members (no self-fencing there).
    @Test func leaseIsVoidWhileFencedAndUnboundedBelowThreeMembers() {
        var b = Self.brain(members: 3)
        _ = Self.answer(&b, from: 1, sent: 100)
        _ = b.handle(.tick, now: .milliseconds(200))
        _ = b.handle(.fenceRequested(from: Self.names[1], epoch: 2), now: .milliseconds(300))
        #expect(b.fence != nil)
        #expect(b.lease == .none)
        #expect(Self.brain(members: 2).lease == .unbounded)
        #expect(Self.brain(members: 1).lease == .unbounded)
    }

    /// Proves the fence's log line counts what the fence counts (answers to this node's heartbeats within
    /// `fenceAfter`), not the 4-second view that heartbeats merely received keep full: a node cut off from its answers
    /// but still receiving every peer's heartbeat logged "reaches 5 of 5 active cluster members, not a majority".
    @Test func fenceReasonCountsAnsweredContactNotTheView() {
        var b = Self.brain(members: 5)
        for i in 1...4 { _ = Self.answer(&b, from: i, sent: 100) }
        _ = b.handle(.tick, now: .milliseconds(200))
        #expect(b.fence == nil)
        // From then on peers' heartbeats reach this node, but none of its own is answered.
        var reason: String?
        var t = 500
        while t <= 4000 {
            for i in 1...4 { _ = b.handle(.heartbeatReceived(from: Self.names[i]), now: .milliseconds(t)) }
            for d in b.handle(.tick, now: .milliseconds(t)) { if case .fence(let r) = d { reason = r } }
            t += 250
        }
        #expect(b.reachable.count == 4)
        let text = reason ?? ""
        #expect(text.contains("heard back from 1 of 5 active cluster members"), "\(text)")
        #expect(!text.contains("5 of 5"))
    }
}
