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
}
