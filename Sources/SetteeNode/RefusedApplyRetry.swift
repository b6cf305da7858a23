import SetteeCore

/// When a replica consumer retries a snapshot the engine refused to apply with TMPFAIL (memory full, a flusher
/// behind), and when it stops (a pure value: the connection feeds it refusals with the time, and interprets
/// its decisions).
///
/// While an apply is refused the connection stops reading (ConsumerConnection invariant 3), so one refusal
/// retried for ever would hold every vBucket of the connection. Invariants: (1) retries back off, doubling from
/// `Limits.replicaApplyRetryFirstDelayMs` up to `Limits.replicaApplyRetryMaxDelayMs`; (2) after
/// `Limits.replicaApplyRetryMaxAttempts` refusals in a row, or once `Limits.replicaApplyRetryMaxMs` passed since
/// the first of them, the decision is `.giveUp`: the connection closes the stream and reopens it from what
/// storage holds, as after any failure (ADR 0074); (3) an apply that went through, or a give-up, starts afresh.
///
///     applied ──refused──▶ retrying(n, since) ──refused, within bounds──▶ retrying(n+1, since)
///        ▲                        │ applied                     │ refused, over a bound
///        └────────────────────────┴─────────────── giveUp ◀─────┘
struct RefusedApplyRetry: Sendable, Equatable {
    enum Decision: Sendable, Equatable {
        /// Try the apply again after this many milliseconds.
        case retry(afterMs: Int64)
        /// Stop retrying: close the stream (it is reopened from storage's position).
        case giveUp
    }

    /// Refusals in a row so far.
    private(set) var attempts = 0
    /// When the first refusal in a row came (nanoseconds of a monotonic clock).
    private var since: UInt64 = 0

    let maxAttempts: Int
    let maxNanos: UInt64
    let firstDelayMs: Int64
    let maxDelayMs: Int64

    init(
        maxAttempts: Int = Limits.replicaApplyRetryMaxAttempts, maxMs: Int64 = Limits.replicaApplyRetryMaxMs,
        firstDelayMs: Int64 = Limits.replicaApplyRetryFirstDelayMs,
        maxDelayMs: Int64 = Limits.replicaApplyRetryMaxDelayMs
    ) {
        self.maxAttempts = maxAttempts
        self.maxNanos = UInt64(max(0, maxMs)) * 1_000_000
        self.firstDelayMs = firstDelayMs
        self.maxDelayMs = maxDelayMs
    }

    /// The engine refused the apply at `nowNanos`.
    mutating func refused(nowNanos: UInt64) -> Decision {
        if attempts == 0 { since = nowNanos }
        attempts += 1
        let elapsed = nowNanos >= since ? nowNanos - since : 0
        if attempts > maxAttempts || elapsed >= maxNanos {
            self.applied()
            return .giveUp
        }
        return .retry(afterMs: Backoff.doubling(firstDelayMs, attempt: min(attempts - 1, 30), cap: maxDelayMs))
    }

    /// The apply went through (or the stream is gone): the next refusal starts a new count.
    mutating func applied() {
        attempts = 0
        since = 0
    }
}
