import NIOCore
import SetteeCore
import Testing

@testable import SetteeNode

/// The spread of a KV stranger's handshake deadline (ADR 0042): pure values, no sockets.
struct HandshakeDeadlineTests {
    /// Proves a deadline is never earlier than promised and at most the spread later: the ends of the random
    /// range give exactly the deadline and the deadline plus `kvHandshakeDeadlineSpreadPercent`.
    @Test func delayStaysBetweenTheDeadlineAndItsSpread() {
        let base = TimeAmount.seconds(10)
        let most = TimeAmount.milliseconds(10_000 + 10_000 * Int64(Limits.kvHandshakeDeadlineSpreadPercent) / 100)
        #expect(HandshakeDeadline.delay(base: base, unit: 0) == base)
        #expect(HandshakeDeadline.delay(base: base, unit: 1) == most)
        #expect(
            HandshakeDeadline.delay(base: base, unit: 0.5)
                == .milliseconds(10_000 + (most - base).nanoseconds / 2_000_000))
        for unit in stride(from: 0.0, to: 1.0, by: 0.01) {
            let d = HandshakeDeadline.delay(base: base, unit: unit)
            #expect(d >= base && d <= most, "unit \(unit): \(d)")
        }
    }

    /// Proves strangers that arrive together are closed over the whole spread, not in one tick: 1,000 seeded
    /// random units put their deadlines in every tenth of the spread window, none holding more than 15 %.
    @Test func aBurstOfStrangersIsClosedAtASteadyRate() {
        var rng = SplitMix64(seed: 0x5e77_ee16)
        let base = TimeAmount.seconds(10)
        let window = Double(base.nanoseconds) * Double(Limits.kvHandshakeDeadlineSpreadPercent) / 100
        var buckets = [Int](repeating: 0, count: 10)
        for _ in 0..<1_000 {
            let unit = Double.random(in: 0..<1, using: &rng)
            let extra = Double((HandshakeDeadline.delay(base: base, unit: unit) - base).nanoseconds)
            buckets[min(9, Int(extra / window * 10))] += 1
        }
        #expect(buckets.allSatisfy { $0 > 0 && $0 <= 150 }, "\(buckets)")
    }

    /// Proves odd inputs neither trap nor shorten the deadline: a zero deadline (never) stays zero, a unit out of
    /// range or not finite is clamped, and a deadline near the largest time amount is kept as is.
    @Test func oddInputsAreSafe() {
        #expect(HandshakeDeadline.delay(base: .zero, unit: 0.7) == .zero)
        #expect(HandshakeDeadline.delay(base: .seconds(1), unit: -3) == .seconds(1))
        #expect(HandshakeDeadline.delay(base: .seconds(1), unit: .nan) == .seconds(1))
        #expect(HandshakeDeadline.delay(base: .seconds(1), unit: .infinity) == .seconds(1))
        #expect(HandshakeDeadline.delay(base: .seconds(1), unit: 7) <= .milliseconds(2_000))
        let huge = TimeAmount.nanoseconds(Int64.max - 1)
        #expect(HandshakeDeadline.delay(base: huge, unit: 0.9) == huge)
    }
}
