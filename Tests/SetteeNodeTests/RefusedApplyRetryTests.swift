import SetteeCore
import Testing

@testable import SetteeNode

/// The bound on retries of a replica snapshot the engine refused with TMPFAIL (RefusedApplyRetry, ADR 0074).
@Suite struct RefusedApplyRetryTests {
    @Test func retriesBackOffDoublingUpToTheCap() {
        // Proves: delays double from the first one and stop growing at the cap.
        var r = RefusedApplyRetry(maxAttempts: 100, maxMs: 1_000_000, firstDelayMs: 10, maxDelayMs: 100)
        let delays = (0..<6).map { _ in r.refused(nowNanos: 5) }
        #expect(delays == [10, 20, 40, 80, 100, 100].map { .retry(afterMs: $0) })
        #expect(r.attempts == 6)
    }

    @Test func theCountBoundEndsTheRetries() {
        // Proves: after maxAttempts refusals in a row the next one gives up, and the count starts afresh.
        var r = RefusedApplyRetry(maxAttempts: 3, maxMs: 1_000_000, firstDelayMs: 10, maxDelayMs: 100)
        for _ in 0..<3 {
            let d = r.refused(nowNanos: 1)
            #expect(d != .giveUp)
        }
        #expect(r.refused(nowNanos: 1) == .giveUp)
        #expect(r.attempts == 0)
        #expect(r.refused(nowNanos: 2) == .retry(afterMs: 10))
    }

    @Test func theTimeBoundEndsTheRetries() {
        // Proves: a refusal at or after maxMs since the first one of the run gives up, whatever the count.
        var r = RefusedApplyRetry(maxAttempts: 1_000, maxMs: 50, firstDelayMs: 10, maxDelayMs: 100)
        let start: UInt64 = 7_000_000_000
        #expect(r.refused(nowNanos: start) == .retry(afterMs: 10))
        #expect(r.refused(nowNanos: start + 49_000_000) == .retry(afterMs: 20))
        #expect(r.refused(nowNanos: start + 50_000_000) == .giveUp)
        // A clock read earlier than the first refusal (it does not go back, but the value must not trap).
        #expect(r.refused(nowNanos: start) == .retry(afterMs: 10))
        #expect(r.refused(nowNanos: 0) == .retry(afterMs: 20))
    }

    @Test func anApplyThatWentThroughStartsAfresh() {
        // Proves: a success between refusals resets both the count and the time of the first refusal.
        var r = RefusedApplyRetry(maxAttempts: 2, maxMs: 50, firstDelayMs: 10, maxDelayMs: 100)
        #expect(r.refused(nowNanos: 0) == .retry(afterMs: 10))
        #expect(r.refused(nowNanos: 1_000_000) == .retry(afterMs: 20))
        r.applied()
        #expect(r.refused(nowNanos: 100_000_000) == .retry(afterMs: 10))
        #expect(r.refused(nowNanos: 140_000_000) == .retry(afterMs: 20))
        #expect(r.refused(nowNanos: 141_000_000) == .giveUp)
    }

    @Test func theDefaultsAreTheNamedLimits() {
        // Proves: the connection's bound is the one Limits names, and it is finite in both count and time.
        let r = RefusedApplyRetry()
        #expect(r.maxAttempts == Limits.replicaApplyRetryMaxAttempts && r.maxAttempts > 0)
        #expect(r.maxNanos == UInt64(Limits.replicaApplyRetryMaxMs) * 1_000_000 && r.maxNanos > 0)
        #expect(Limits.replicaApplyRetryFirstDelayMs <= Limits.replicaApplyRetryMaxDelayMs)
    }
}
