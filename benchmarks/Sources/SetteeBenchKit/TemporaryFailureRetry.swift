import SetteeCore

/// How the preload retries a write the server refused for now (memcached-binary ETMPFAIL 0x86, ENOMEM 0x82 as a
/// settee node answers it while memory is full, the smart client's `temporaryFailure` / `outOfMemory`): capped
/// exponential back-off per key, within a bounded total time from the phase's start. A pure value: the load
/// handlers ask it with the key's attempt count and the time, and keep the counts it leads to.
///
/// A preload that gave up on keys measures a partial key set (GETs of the missing keys miss), so the caller
/// fails the workload when `failed` is not zero (benchmarks/README.md, ADR 0074).
public struct TemporaryFailureRetry: Sendable, Equatable {
    public enum Decision: Sendable, Equatable {
        /// Send the same request again after this many nanoseconds.
        case retry(afterNanos: UInt64)
        /// The total time is spent: the key stays unwritten.
        case giveUp
    }

    /// Wait before the first retry of a key; doubles with each further retry of it.
    public var firstDelayNanos: UInt64
    /// Longest wait between two tries of one key.
    public var maxDelayNanos: UInt64
    /// No retry is started later than this after the phase began.
    public var totalNanos: UInt64

    public init(firstDelayNanos: UInt64, maxDelayNanos: UInt64, totalNanos: UInt64) {
        self.firstDelayNanos = firstDelayNanos
        self.maxDelayNanos = max(firstDelayNanos, maxDelayNanos)
        self.totalNanos = totalNanos
    }

    /// The preload's: 1 ms doubling to 500 ms, for at most 120 s (well inside the preload phase's 300 s limit).
    public static let preload = TemporaryFailureRetry(
        firstDelayNanos: 1_000_000, maxDelayNanos: 500_000_000, totalNanos: 120_000_000_000)

    /// A key refused for the `retries + 1`-th time (`retries` already made) at `now`, in a phase started at
    /// `phaseStart` (monotonic nanoseconds).
    public func decide(retries: Int, phaseStart: UInt64, now: UInt64) -> Decision {
        let delay = Backoff.doubling(firstDelayNanos, attempt: min(retries, 40), cap: maxDelayNanos)
        let elapsed = now >= phaseStart ? now - phaseStart : 0
        guard elapsed < totalNanos, delay <= totalNanos - elapsed else { return .giveUp }
        return .retry(afterNanos: delay)
    }
}
