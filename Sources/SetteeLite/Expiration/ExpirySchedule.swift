import SetteeCore

/// When a Lite database purges its expired documents next (ADR 0153): a pure value, events in, directives out; the
/// database (`Database+Expiration.swift`) reads the earliest stored expiration and the clock, asks, and performs.
///
/// States: idle (no timer) or armed at one instant. Invariants:
/// 1. At most one timer is armed, for the earliest expiration the database holds when it was last asked, or earlier
///    when that expiration lies beyond `Limits.liteExpiryTimerMaxDelaySeconds` (re-asked when it fires).
/// 2. An expiration at or before now is purged before any timer is armed (`purgeDue`), so a document never outlives
///    its expiration by more than the timer's own lateness.
/// 3. A failed purge arms a retry `Limits.liteExpiryRetrySeconds` later instead of asking again at once (no loop).
///
///     idle ──next(earliest > now)──▶ armed(min(earliest, now + max delay))
///      ▲  ◀──next(nil): cancel──────  │  timerFired ▶ idle, then next(...)
///      └──── next(earliest ≤ now): purgeDue, then next(...) ◀───┘
struct ExpirySchedule: Sendable, Equatable {
    /// What the database does next.
    enum Directive: Sendable, Equatable {
        /// Purge every document whose expiration is at or before now, then ask again.
        case purgeDue
        /// Cancel any armed timer and arm one for this instant (milliseconds since 1970).
        case arm(atMilliseconds: Int64)
        /// Cancel the armed timer: nothing expires.
        case cancel
        /// The armed timer (or none) is already right.
        case nothing
    }

    /// The instant the armed timer fires at (milliseconds since 1970), nil when none is armed.
    private(set) var armedAt: Int64?

    /// The directive for the earliest stored expiration (`earliest`, nil when none) at `now` (both in ms since 1970).
    mutating func next(earliest: Int64?, now: Int64) -> Directive {
        guard let earliest else {
            guard armedAt != nil else { return .nothing }
            armedAt = nil
            return .cancel
        }
        if earliest <= now { return .purgeDue }
        // `now` is at most the clock's milliseconds, far below `Int64.max - maxDelay`.
        let at = min(earliest, now + Int64(Limits.liteExpiryTimerMaxDelaySeconds) * 1_000)
        if armedAt == at { return .nothing }
        armedAt = at
        return .arm(atMilliseconds: at)
    }

    /// The armed timer ran: none is armed any more.
    mutating func timerFired() { armedAt = nil }

    /// A purge failed at `now`: try again `Limits.liteExpiryRetrySeconds` later.
    mutating func purgeFailed(now: Int64) -> Directive {
        let at = now + Int64(Limits.liteExpiryRetrySeconds) * 1_000
        armedAt = at
        return .arm(atMilliseconds: at)
    }
}
