import Histogram

/// Latency histograms in nanoseconds: 1 ns to 100 s at 3 significant digits.
func makeLatencyHistogram() -> Histogram<UInt64> {
    Histogram(lowestDiscernibleValue: 1, highestTrackableValue: 100_000_000_000, numberOfSignificantValueDigits: .three)
}

/// What one connection measured; merged into the phase's report.
public struct ConnectionReport: Sendable {
    /// One histogram per `OpKind`, recording only ops that started after the warmup.
    public var latency: [Histogram<UInt64>] = OpKind.allCases.map { _ in makeLatencyHistogram() }
    public var ok = [Int](repeating: 0, count: OpKind.allCases.count)
    public var misses = 0
    /// Errors by kind: server status codes, protocol violations, connection failures.
    public var errors: [String: Int] = [:]
    /// Requests sent again after a temporary failure (a phase with `PhaseOptions.retry`).
    public var retried = 0
    /// Keys still unwritten when the retry time ran out (a phase with `PhaseOptions.retry`); also in `errors`.
    public var failedAfterRetries = 0
    /// Monotonic nanoseconds of the last response counted (0 if none).
    public var lastCompletion: UInt64 = 0

    public init() {}

    mutating func addError(_ kind: String, count: Int = 1) { errors[kind, default: 0] += count }

    public mutating func merge(_ other: ConnectionReport) {
        for i in latency.indices { latency[i].add(other.latency[i]) }
        for i in ok.indices { ok[i] += other.ok[i] }
        misses += other.misses
        retried += other.retried
        failedAfterRetries += other.failedAfterRetries
        errors.merge(other.errors, uniquingKeysWith: +)
        lastCompletion = max(lastCompletion, other.lastCompletion)
    }
}
