import SetteeCore
import Testing

@Suite struct BackoffTests {
    @Test func doublesFromTheFirstDelayUpToTheCap() {
        #expect((0..<6).map { Backoff.doubling(10, attempt: $0, cap: 100) } == [10, 20, 40, 80, 100, 100])
        #expect(Backoff.doubling(10, attempt: -3, cap: 100) == 10)
        #expect(Backoff.doubling(200, attempt: 0, cap: 100) == 100)
    }

    @Test func neverTrapsAtTheEdgesOfTheType() {
        #expect(Backoff.doubling(1, attempt: Int.max, cap: Int.max) == 1 << 62)
        #expect(Backoff.doubling(UInt64(1_000_000), attempt: 1_000, cap: UInt64.max) == UInt64.max)
        #expect(Backoff.doubling(Int64(5), attempt: 61, cap: Int64.max) == Int64.max)
        #expect(Backoff.doubling(Int64(3), attempt: 61, cap: Int64.max) == Int64(3) << 61)
    }

    /// The delays the loops that doubled by hand produced, now from `Backoff` (issue 69): the replica consumer's
    /// reconnects (50 ms doubling to 1 s), the flusher's failed commits (100 ms to 2 s), the gateway's restart
    /// rechecks (100 ms to 10 s), change-stream reopens (at once, then 10 ms to 1 s).
    @Test func theLoopsThatDoubledByHandWaitAsBefore() {
        #expect(
            (0..<7).map {
                Backoff.doubling(Limits.replicationFirstBackoffMs, attempt: $0, cap: Limits.replicationMaxBackoffMs)
            }
                == [50, 100, 200, 400, 800, 1_000, 1_000])
        #expect(
            (0..<7).map {
                Backoff.doubling(
                    Limits.flusherRetryInitialMilliseconds, attempt: $0, cap: Limits.flusherRetryMaxMilliseconds)
            } == [100, 200, 400, 800, 1_600, 2_000, 2_000])
        #expect(
            (0..<9).map {
                Backoff.doubling(
                    Limits.gatewayRestartRecheckDelayMilliseconds, attempt: $0,
                    cap: Limits.gatewayRestartRecheckMaxDelayMilliseconds)
            } == [100, 200, 400, 800, 1_600, 3_200, 6_400, 10_000, 10_000])
        #expect(
            (0..<9).map {
                Backoff.doubling(
                    ClientLimits.changeStreamBackoffInitialMs, attempt: $0, cap: ClientLimits.changeStreamBackoffMaxMs)
            } == [10, 20, 40, 80, 160, 320, 640, 1_000, 1_000])
    }
}
