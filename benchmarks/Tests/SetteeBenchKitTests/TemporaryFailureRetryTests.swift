import NIOCore
import SetteeProtocol
import Testing

import SetteeBenchKit

/// The preload's retry of writes a server refused for now (TemporaryFailureRetry, ADR 0074).
@Suite struct TemporaryFailureRetryTests {
    let policy = TemporaryFailureRetry(firstDelayNanos: 1_000, maxDelayNanos: 10_000, totalNanos: 100_000)

    @Test func backOffDoublesPerKeyUpToTheCap() {
        // Proves: each further retry of a key waits twice as long as the last, never more than the cap.
        let delays = (0..<6).map { policy.decide(retries: $0, phaseStart: 0, now: 0) }
        #expect(delays == [1_000, 2_000, 4_000, 8_000, 10_000, 10_000].map { .retry(afterNanos: $0) })
        // A huge retry count (or a negative one) neither overflows nor shortens the wait.
        #expect(policy.decide(retries: Int.max, phaseStart: 0, now: 0) == .retry(afterNanos: 10_000))
        #expect(policy.decide(retries: -3, phaseStart: 0, now: 0) == .retry(afterNanos: 1_000))
        let wide = TemporaryFailureRetry(firstDelayNanos: 3, maxDelayNanos: UInt64.max, totalNanos: UInt64.max)
        // Without a cap in reach the doubling stops after 40 (days of waiting), where a shift by 63 would overflow.
        #expect(wide.decide(retries: 40, phaseStart: 0, now: 0) == .retry(afterNanos: 3 << 40))
        #expect(wide.decide(retries: 63, phaseStart: 0, now: 0) == .retry(afterNanos: 3 << 40))
    }

    @Test func theTotalTimeBoundsEveryRetry() {
        // Proves: no retry is due after the phase's total retry time; a key refused then is given up.
        #expect(policy.decide(retries: 0, phaseStart: 50, now: 50 + 98_999) == .retry(afterNanos: 1_000))
        #expect(policy.decide(retries: 0, phaseStart: 50, now: 50 + 99_001) == .giveUp)
        #expect(policy.decide(retries: 4, phaseStart: 50, now: 50 + 95_000) == .giveUp)  // the wait would pass it
        #expect(policy.decide(retries: 0, phaseStart: 50, now: 50 + 100_000) == .giveUp)
        // A time before the phase start (clock read on another thread) counts as no time spent.
        #expect(policy.decide(retries: 0, phaseStart: 500, now: 10) == .retry(afterNanos: 1_000))
    }

    @Test func thePreloadPolicyIsBoundedWithinThePhase() {
        // Proves: the preload's policy backs off, is capped, and ends before the preload phase's hard limit.
        let p = TemporaryFailureRetry.preload
        #expect(p.firstDelayNanos > 0 && p.firstDelayNanos <= p.maxDelayNanos)
        #expect(p.totalNanos < 300_000_000_000)
        #expect(p.decide(retries: 0, phaseStart: 0, now: p.totalNanos) == .giveUp)
    }

    @Test func memcachedTemporaryStatusesAreRetriedOthersAreErrors() throws {
        // Proves: ETMPFAIL (0x86) and ENOMEM (0x82) decode as temporary; another error status does not.
        var codec = MemcachedBinaryCodec(shared: KeySpace(Workload(getPercent: 0, valueSize: 8, keys: 4)))
        func outcome(_ status: Status) throws -> ResponseOutcome? {
            var b = ByteBuffer()
            b.writeResponse(opcode: .set, status: status, opaque: 7)
            return try codec.decode(&b)?.outcome
        }
        #expect(try outcome(.temporaryFailure) == .temporary("status \(Status.temporaryFailure) ETMPFAIL"))
        #expect(try outcome(.outOfMemory) == .temporary("status \(Status.outOfMemory) ENOMEM"))
        #expect(try outcome(.keyExists) == .error("status \(Status.keyExists) KEY_EEXISTS"))
        #expect(try outcome(.success) == .ok)
    }
}
