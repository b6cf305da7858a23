import NIOCore
import SetteeCore

/// When a KV stranger's handshake deadline fires (ADR 0042). Connections that arrive in a burst (an attacker
/// opening thousands at once, or every client reconnecting after a restart) would otherwise all expire in the same
/// event-loop tick, and a loop closing a few thousand sockets in one tick delays every other connection on it by
/// tens of milliseconds. Each deadline is spread uniformly over `[deadline, deadline × (1 + spread)]`, with the
/// spread `Limits.kvHandshakeDeadlineSpreadPercent`, so the closes come at a steady rate. Never earlier than the
/// deadline: no client is closed before the time it was promised.
enum HandshakeDeadline {
    /// The delay of one connection's deadline. `unit`: a number in `[0, 1)`, `unit(sequence:)` (clamped; not finite: 0).
    static func delay(base: TimeAmount, unit: Double) -> TimeAmount {
        // A zero deadline means "never" (the caller schedules nothing); a huge one gains nothing from a spread.
        guard base > .zero, base.nanoseconds < Int64.max / 4 else { return base }
        let u = unit.isFinite ? min(max(unit, 0), 1) : 0
        let spread = Double(base.nanoseconds) * Double(Limits.kvHandshakeDeadlineSpreadPercent) / 100 * u
        // At most `base` extra (the percent is at most 100), so the sum stays below Int64.max / 2.
        let extra = Int64(min(max(spread, 0), Double(base.nanoseconds)))
        return base + .nanoseconds(extra)
    }

    /// The `unit` of the `sequence`-th connection (the node's connection count): the fractional part of
    /// `sequence × (√5 − 1) / 2`, a low-discrepancy sequence, so any run of consecutive connections covers `[0, 1)`
    /// evenly (a burst is spread as well as by random numbers, better for short runs) at the cost of one multiply,
    /// where `Double.random` asked the kernel (`getrandom(2)`) once per connection. Wraps without trapping.
    static func unit(sequence: Int) -> Double {
        // Reduced modulo 2^32 first so the product keeps its fractional digits (a Double has 53 bits).
        let n = Double(UInt32(truncatingIfNeeded: sequence))
        let x = n * 0.618_033_988_749_894_8
        return x - x.rounded(.down)
    }
}
