import SetteeCore
import SetteeTestSupport
import Testing

@testable import SetteeAuth

/// What an event costs with `Limits.loginMaxWaiters` waiting: printed, never asserted (speed is measured, not
/// tested; this is a debug build on a shared machine). The same two loops, compiled with `-O` against the line
/// before and after it was indexed, give the figures in ADR 0042's amendment "each key has a share of the line".
@Suite struct LoginWaiterCostTests {
    /// 1,000 waiters (32 sources at their allowance, each with a full share) and `events` events: `unrelated`
    /// ends checks of another source, `churn` ends a check of a waiting source (admitting its oldest waiter) and
    /// queues a new waiter there, so 1,000 always wait. Returns the admissions, so nothing is optimised away.
    static func run(events: Int, churn: Bool) -> Int {
        var t = LoginThrottle()
        let share = Limits.loginMaxWaitersPerKey
        let sources = (Limits.loginMaxWaiters + share - 1) / share
        for s in 0..<sources {
            for _ in 0..<Limits.loginFailuresBeforeThrottle {
                _ = t.beginCheck(source: "10.0.1.\(s)", user: nil, now: 1)
            }
        }
        var ticket: UInt64 = 0
        for i in 0..<Limits.loginMaxWaiters {
            ticket += 1
            _ = t.beginCheckOrWait(ticket: ticket, source: "10.0.1.\(i % sources)", user: nil, now: 1)
        }
        var admitted = 0
        for i in 0..<events {
            if churn {
                let source = "10.0.1.\(i % sources)"
                admitted += t.endCheck(source: source, user: nil, succeeded: true, now: 1).count
                ticket += 1
                _ = t.beginCheckOrWait(ticket: ticket, source: source, user: nil, now: 1)
            } else {
                _ = t.beginCheck(source: "10.0.2.1", user: nil, now: 1)
                admitted += t.endCheck(source: "10.0.2.1", user: nil, succeeded: true, now: 1).count
            }
        }
        return admitted
    }

    /// Prints the time of 10,000 events with 1,000 waiting, both kinds; proves only that the churn admits one
    /// waiter per event and the unrelated source's checks admit none.
    @Test func eventsWithAThousandWaiters() async throws {
        for churn in [false, true] {
            // On a thread of its own (`offPool`): the async waiter tests beside it need the cooperative pool's threads.
            let (admitted, elapsed) = try await offPool {
                let clock = ContinuousClock()
                var admitted = 0
                let elapsed = clock.measure { admitted = Self.run(events: 10_000, churn: churn) }
                return (admitted, elapsed)
            }
            print("LoginWaiterCostTests: 1,000 waiters, 10,000 \(churn ? "churn" : "unrelated") events: \(elapsed)")
            #expect(admitted == (churn ? 10_000 : 0))
        }
    }
}
