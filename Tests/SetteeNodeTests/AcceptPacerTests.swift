import SetteeCore
import Testing

@testable import SetteeNode

/// The KV listener's accept pacing as a pure value (ADR 0062): a token bucket that lets a quiet listener take a
/// burst, then directs pauses so accepts average its rate, never traps on odd inputs, and is driven here by a
/// manual clock and seeded batches, without sockets.
@Suite struct AcceptPacerTests {

    /// Proves a full bucket takes exactly `burst` accepts without a pause, and the next accept is told to wait one
    /// accept's worth of time (1 s / rate).
    @Test func aQuietListenerTakesItsBurstThenPausesForOneAcceptsCost() {
        var pacer = AcceptPacer(ratePerSecond: 1_000, burst: 8, now: 0)
        for i in 0..<8 {
            #expect(pacer.accepted(1, now: 0) == .keepAccepting, "accept \(i) of the burst")
        }
        #expect(pacer.accepted(1, now: 0) == .pause(nanoseconds: 1_000_000))
        // Time refills it: after the pause it may accept again, and owes nothing.
        #expect(pacer.accepted(1, now: 2_000_000) == .keepAccepting)
    }

    /// Proves a read that overshoots (a batch accepted before the shell could stop) is repaid by a longer pause.
    @Test func anOvershootingBatchIsRepaidByItsPause() {
        var pacer = AcceptPacer(ratePerSecond: 2_000, burst: 1, now: 10)
        #expect(pacer.accepted(4, now: 10) == .pause(nanoseconds: 3 * 500_000))
    }

    /// Proves rate 0 is unpaced, and that extreme inputs (huge counts, clocks running backwards, huge gaps) give
    /// bounded pauses instead of trapping.
    @Test func unpacedAndExtremeInputsNeverTrap() {
        var off = AcceptPacer(ratePerSecond: 0, burst: 0, now: 0)
        #expect(off.accepted(Int.max, now: Int64.max) == .keepAccepting)
        // Clamped to a 1 ns cost and a 2^20 burst: a huge read spends the whole bucket, the next accept waits.
        var pacer = AcceptPacer(ratePerSecond: Int.max, burst: Int.max, now: Int64.max)
        #expect(pacer.accepted(Int.max, now: Int64.min) == .keepAccepting)
        #expect(pacer.accepted(1, now: Int64.min) == .pause(nanoseconds: 1))
        var slow = AcceptPacer(ratePerSecond: 1, burst: 1, now: Int64.min)
        _ = slow.accepted(Int.max, now: Int64.min)
        if case .pause(let ns) = slow.accepted(Int.max, now: Int64.min) {
            // At most a full bucket plus this read: (1 + 2^20) s.
            #expect(ns > 0 && ns <= (1 + (1 << 20)) * 1_000_000_000)
        } else {
            Issue.record("an over-spent pacer must pause")
        }
        // However much it overspent, a long enough quiet spell refills it to a full bucket.
        #expect(slow.accepted(1, now: Int64.max) == .keepAccepting)
        #expect(slow.accepted(1, now: Int64.max) == .pause(nanoseconds: 1_000_000_000))
    }

    /// Proves, over seeded histories of a shell that obeys the directives (reads of 1-4 accepts whenever not
    /// paused, at random gaps), that accepts in any window never exceed burst + rate × window + one batch, that
    /// the shell is never told to pause longer than what brings its credit back, and that a listener under
    /// constant pressure still accepts at (nearly) its rate.
    @Test(arguments: [1, 7, 42, 2026, 99_991])
    func seededHistoriesKeepTheRate(seed: UInt64) {
        var rng = SplitMix64(seed: seed)
        let rate = 1 + Int.random(in: 0..<5_000, using: &rng)
        let burst = 1 + Int.random(in: 0..<300, using: &rng)
        let batch = 4
        var pacer = AcceptPacer(ratePerSecond: rate, burst: burst, now: 0)
        var now: Int64 = 0
        var accepts: [(at: Int64, count: Int)] = []
        let horizon: Int64 = 5_000_000_000
        while now < horizon {
            let count = 1 + Int.random(in: 0..<batch, using: &rng)
            accepts.append((now, count))
            switch pacer.accepted(count, now: now) {
            case .keepAccepting:
                // Connects arrive within 0.2 ms: constant pressure.
                now += Int64(Int.random(in: 0..<200_000, using: &rng))
            case .pause(let ns):
                #expect(ns > 0 && ns <= Int64(burst + count) * (1_000_000_000 / Int64(rate)) + 1, "seed \(seed)")
                now += ns
            }
        }
        // Any window [a, b]: accepts ≤ burst + rate × (b − a) + batch.
        var total = 0
        var start = 0
        var inWindow = 0
        for (i, a) in accepts.enumerated() {
            inWindow += a.count
            total += a.count
            while accepts[start].at < a.at - 1_000_000_000 {
                inWindow -= accepts[start].count
                start += 1
            }
            let window = Double(a.at - accepts[start].at) / 1e9
            #expect(
                Double(inWindow) <= Double(burst + batch) + Double(rate) * window + 1,
                "seed \(seed) rate \(rate) burst \(burst): \(inWindow) accepts in \(window) s at event \(i)")
        }
        let seconds = Double(now) / 1e9
        #expect(
            Double(total) >= Double(rate) * seconds * 0.95,
            "seed \(seed): \(total) accepts in \(seconds) s at \(rate)/s")
    }
}
