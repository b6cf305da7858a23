/// How fast a listener accepts connections (ADR 0062): a token bucket over accepts, as a pure value. The listener's
/// shell reports each read of its socket (`accepted(_:now:)`); while the bucket is empty the directive says how long
/// to stop reading the socket, and new connects wait in the kernel's listen backlog meanwhile. A burst of thousands
/// of connects (an attacker's idle connections, every SDK reconnecting after a restart) then costs the node at most
/// `ratePerSecond` connection set-ups a second, spread over time, instead of every set-up as fast as the kernel
/// completes the handshakes, which took the CPU the node's established connections were waiting for.
///
/// Invariants:
/// 1. `credit` never exceeds `burst × cost` (a quiet listener saves up at most `burst` accepts).
/// 2. Credit is spent by every accept reported, including ones past the allowance (a read of the socket accepts
///    up to its batch before the shell can stop), so a pause always repays what was overspent.
/// 3. A pause is directed only while `credit < 0`, for exactly the time that brings it back to zero; time running
///    backwards refills nothing. No arithmetic traps: counts and elapsed times are clamped.
///
/// ```
///   accepted(k, now) ── credit ≥ 0 ──▶ .keepAccepting
///          │
///          └── credit < 0 ──▶ .pause(ns)   (shell: autoRead off; after ns: autoRead on, read)
/// ```
public struct AcceptPacer: Sendable, Equatable {
    /// What the listener's shell does after a read of its socket.
    public enum Directive: Sendable, Equatable {
        /// Keep reading the socket as connects arrive.
        case keepAccepting
        /// Stop reading the socket for this many nanoseconds, then read again.
        case pause(nanoseconds: Int64)
    }

    /// Accepts a second the bucket refills (0: unpaced, every directive is `keepAccepting`).
    public let ratePerSecond: Int
    /// Accepts a quiet listener may take back to back before pacing starts.
    public let burst: Int
    /// Nanoseconds of credit one accept costs (1 s / rate).
    let cost: Int64
    /// Nanoseconds of accepting saved up; negative while over the allowance.
    private(set) var credit: Int64
    private var lastNanos: Int64

    /// A full bucket at `now` (nanoseconds of a monotonic clock).
    public init(ratePerSecond: Int, burst: Int, now: Int64) {
        self.ratePerSecond = max(0, ratePerSecond)
        self.burst = max(1, min(burst, 1 << 20))
        self.cost = self.ratePerSecond > 0 ? max(1, 1_000_000_000 / Int64(min(self.ratePerSecond, 1_000_000_000))) : 0
        self.credit = Int64(self.burst) * cost
        self.lastNanos = now
    }

    /// The listener's read of its socket accepted `count` connections at `now`.
    public mutating func accepted(_ count: Int, now: Int64) -> Directive {
        guard ratePerSecond > 0 else { return .keepAccepting }
        refill(now: now)
        // A read accepts at most its batch (`Limits.kvAcceptsPerRead`); clamped so the product cannot overflow.
        let spent = Int64(max(0, min(count, 1 << 20))) * cost
        credit -= spent
        // Never owe more than a full bucket plus this read: bounds how long one pause lasts.
        credit = max(credit, -(Int64(burst) * cost + spent))
        return credit < 0 ? .pause(nanoseconds: -credit) : .keepAccepting
    }

    /// Adds the credit earned since the last event, up to a full bucket (invariant 1).
    private mutating func refill(now: Int64) {
        guard now > lastNanos else { return }
        let (difference, overflow) = now.subtractingReportingOverflow(lastNanos)
        let elapsed = overflow ? Int64.max : difference
        lastNanos = now
        // `elapsed` may be huge after a long quiet spell: capped at what fills the bucket before the add (credit is
        // at least -(2^21 × cost), so the room cannot overflow).
        let room = Int64(burst) * cost - credit
        credit += min(elapsed, max(0, room))
    }
}
