import Dispatch
import SetteeCore
import Synchronization

/// A timer a `TimerClock` armed; `cancel()` makes sure its body does not run from then on (idempotent).
public protocol ScheduledTimer: Sendable {
    func cancel()
}

/// A wall clock that can also run work at one of its instants: what a Lite database's document expiration
/// (ADR 0153) reads the time from and arms its next purge with, injected through `DatabaseOptions.clock` so tests
/// move time by hand (`ManualTimerClock`) instead of sleeping.
public protocol TimerClock: WallClock {
    /// Runs `body` once, on `queue`, when the clock reaches `deadline` (nanoseconds since the Unix epoch; a deadline
    /// already past runs as soon as possible). Never runs `body` before returning.
    func schedule(
        atNanoseconds deadline: UInt64, on queue: DispatchQueue, _ body: @escaping @Sendable () -> Void
    ) -> any ScheduledTimer
}

/// The real clock: `SystemWallClock`'s time, and a dispatch timer armed for the time left until the deadline (a
/// monotonic wait: a wall clock that jumps meanwhile makes it fire early or late, and the caller re-arms).
public struct SystemTimerClock: TimerClock {
    public init() {}

    public func nowNanoseconds() -> UInt64 { SystemWallClock().nowNanoseconds() }

    public func schedule(
        atNanoseconds deadline: UInt64, on queue: DispatchQueue, _ body: @escaping @Sendable () -> Void
    ) -> any ScheduledTimer {
        let now = nowNanoseconds()
        // Bounded by the caller (`Limits.liteExpiryTimerMaxDelaySeconds`); `Int` holds any `UInt64` below it.
        let wait = deadline > now ? deadline - now : 0
        let source = DispatchSource.makeTimerSource(queue: queue)
        source.schedule(deadline: .now() + .nanoseconds(Int(clamping: wait)))
        source.setEventHandler(handler: body)
        source.resume()
        return DispatchTimer(source: source)
    }

    private struct DispatchTimer: ScheduledTimer, @unchecked Sendable {
        // `DispatchSourceTimer` is thread-safe; it is not marked `Sendable`.
        let source: any DispatchSourceTimer
        func cancel() { source.cancel() }
    }
}

/// A clock tests move by hand: `advance(seconds:)` moves the time and runs, on the caller's thread and in deadline
/// order, every armed body whose deadline it reached (the queue is not used), so a test that advances past an
/// expiration finds the purge done when `advance` returns.
public final class ManualTimerClock: TimerClock {
    private struct Armed {
        var deadline: UInt64
        var serial: Int
        var body: @Sendable () -> Void
    }

    private struct State {
        var now: UInt64
        var armed: [Int: Armed] = [:]
        var nextSerial = 0
    }

    private let state: Mutex<State>

    public init(nanoseconds: UInt64 = 1_700_000_000_000_000_000) { state = Mutex(State(now: nanoseconds)) }

    public func nowNanoseconds() -> UInt64 { state.withLock { $0.now } }

    /// Deadlines of the timers armed and not yet run or cancelled, earliest first (nanoseconds since 1970).
    public var armedDeadlines: [UInt64] { state.withLock { $0.armed.values.map(\.deadline).sorted() } }

    public func schedule(
        atNanoseconds deadline: UInt64, on queue: DispatchQueue, _ body: @escaping @Sendable () -> Void
    ) -> any ScheduledTimer {
        let serial = state.withLock { s in
            s.nextSerial += 1
            s.armed[s.nextSerial] = Armed(deadline: deadline, serial: s.nextSerial, body: body)
            return s.nextSerial
        }
        return Handle(clock: self, serial: serial)
    }

    /// Moves the time forward and runs the bodies now due (one at a time, without the clock's lock held, so a body
    /// may arm another timer; one armed due is run too).
    public func advance(seconds: Double) {
        state.withLock { $0.now &+= UInt64(max(0, seconds) * 1e9) }
        while let next = takeDue() { next() }
    }

    private func takeDue() -> (@Sendable () -> Void)? {
        state.withLock { s in
            guard
                let due = s.armed.values.filter({ $0.deadline <= s.now }).min(by: {
                    ($0.deadline, $0.serial) < ($1.deadline, $1.serial)
                })
            else { return nil }
            s.armed[due.serial] = nil
            return due.body
        }
    }

    fileprivate func cancel(_ serial: Int) { state.withLock { _ = $0.armed.removeValue(forKey: serial) } }

    private struct Handle: ScheduledTimer {
        let clock: ManualTimerClock
        let serial: Int
        func cancel() { clock.cancel(serial) }
    }
}
