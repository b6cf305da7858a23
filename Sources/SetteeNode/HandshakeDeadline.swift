import NIOCore
import SetteeCore

/// When a KV stranger's handshake deadline fires (ADR 0042). Connections that arrive in a burst (an attacker
/// opening thousands at once, or every client reconnecting after a restart) would otherwise all expire in the same
/// event-loop tick, and a loop closing a few thousand sockets in one tick delays every other connection on it by
/// tens of milliseconds. Each deadline is spread uniformly over `[deadline, deadline × (1 + spread)]`, with the
/// spread `Limits.kvHandshakeDeadlineSpreadPercent`, so the closes come at a steady rate. Never earlier than the
/// deadline: no client is closed before the time it was promised.
enum HandshakeDeadline {
    /// The delay of one connection's deadline. `unit`: a uniform random number in `[0, 1)` (clamped; not finite: 0).
    static func delay(base: TimeAmount, unit: Double) -> TimeAmount {
        // A zero deadline means "never" (the caller schedules nothing); a huge one gains nothing from a spread.
        guard base > .zero, base.nanoseconds < Int64.max / 4 else { return base }
        let u = unit.isFinite ? min(max(unit, 0), 1) : 0
        let spread = Double(base.nanoseconds) * Double(Limits.kvHandshakeDeadlineSpreadPercent) / 100 * u
        // At most `base` extra (the percent is at most 100), so the sum stays below Int64.max / 2.
        let extra = Int64(min(max(spread, 0), Double(base.nanoseconds)))
        return base + .nanoseconds(extra)
    }
}
