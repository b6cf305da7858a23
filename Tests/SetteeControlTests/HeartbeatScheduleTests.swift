import SetteeClusterMap
import SetteeControl
import SetteeCore
import Testing

/// `HeartbeatSchedule`: each peer has its own heartbeat cadence, so a peer whose call hangs until its timeout
/// delays no other peer's (ADR 0039).
@Suite struct HeartbeatScheduleTests {
    let a = NodeID("n_a@127.0.0.1")
    let b = NodeID("n_b@127.0.0.1")
    let c = NodeID("n_c@127.0.0.1")

    /// Proves, with c paused (its call ends only at a 2 s timeout) and b answering at once, over 10 s of 50 ms
    /// polls: b is called every second (10 or 11 calls, never two at once), c at most once per 2 s call plus the
    /// interval; before, one round held b's next call until c's ended, so b was called every 3 s.
    @Test func pausedPeerDelaysNobodyElse() {
        var s = HeartbeatSchedule(interval: .seconds(1))
        let peers = [b, c]
        var cEndsAt: Duration? = nil
        var calls: [NodeID: [Duration]] = [:]
        var now = Duration.zero
        while now <= .seconds(10) {
            if let end = cEndsAt, now >= end {
                s.ended(c)
                cEndsAt = nil
            }
            for p in s.due(peers: peers, now: now) {
                #expect(!calls[p, default: []].contains(now))
                calls[p, default: []].append(now)
                if p == b {
                    s.ended(b)  // answers at once
                } else {
                    cEndsAt = now + .seconds(2)
                }
            }
            let again = s.due(peers: peers, now: now)
            #expect(again.isEmpty, "a peer was named twice at \(now)")
            now += .milliseconds(50)
        }
        let bCalls = calls[b, default: []]
        #expect((10...11).contains(bCalls.count), "\(bCalls)")
        for (x, y) in zip(bCalls, bCalls.dropFirst()) { #expect(y - x == .seconds(1)) }
        let cCalls = calls[c, default: []]
        #expect((5...6).contains(cCalls.count), "\(cCalls)")
        for (x, y) in zip(cCalls, cCalls.dropFirst()) { #expect(y - x >= .seconds(2)) }
    }

    /// Proves the bookkeeping rules: a peer in flight is never due and is not counted by `nextDue`; `nextDue` is
    /// the wait until the earliest idle peer falls due (zero for a peer never called, nil when all are in flight);
    /// a peer removed from the members is forgotten, so it is called at once when it comes back; one pull at a time.
    @Test func bookkeeping() {
        var s = HeartbeatSchedule(interval: .seconds(1))
        #expect(s.nextDue(peers: [a, b], now: .zero) == .zero)
        let d0 = s.due(peers: [a, b], now: .zero)
        #expect(d0 == [a, b])
        #expect(s.isInFlight(a) && s.isInFlight(b))
        #expect(s.nextDue(peers: [a, b], now: .milliseconds(10)) == nil)
        s.ended(a)
        #expect(s.nextDue(peers: [a, b], now: .milliseconds(300)) == .milliseconds(700))
        let d1 = s.due(peers: [a, b], now: .milliseconds(300))
        #expect(d1.isEmpty)
        let d2 = s.due(peers: [a, b], now: .seconds(1))
        #expect(d2 == [a])
        // b leaves the members while its call hangs, then comes back: called at once.
        let d3 = s.due(peers: [a], now: .milliseconds(1100))
        #expect(d3.isEmpty)
        #expect(!s.isInFlight(b))
        let d4 = s.due(peers: [a, b], now: .milliseconds(1200))
        #expect(d4 == [b])
        let first = s.startPull()
        let second = s.startPull()
        s.pullEnded()
        let third = s.startPull()
        #expect(first && !second && third)
    }
}
