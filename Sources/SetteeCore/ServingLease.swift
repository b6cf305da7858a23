import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The serving lease as the request path reads it (ADR 0124): the cluster manager sets the deadline the brain's lease
/// rule gives (`ClusterBrain.lease`), and every request that would be answered by an active vBucket asks `holds()`
/// first. One atomic load and, in a cluster of three or more, one clock read and a compare: a process that was paused
/// past its lease refuses the requests waiting in its sockets, whatever its timers did meanwhile.
///
/// The clock is `CLOCK_BOOTTIME`, read directly (about 35 ns on the shared test machine against about 90 for
/// `ContinuousClock.now`, which wraps the same clock in the runtime's `Duration`): it keeps counting while the machine
/// is suspended, where `CLOCK_MONOTONIC` stops, so a node whose whole machine slept finds its lease gone. A coarse
/// clock would be cheaper still, but Linux has no coarse variant of it.
///
/// Starts unbounded (a node outside any cluster, tests of the KV port alone); the cluster manager sets it before the
/// node serves.
public final class ServingLease: Sendable {
    /// The same instant on both clocks, the raw clock read first: a deadline converted from the manager's
    /// `ContinuousClock` is never later than the one meant (`grant`).
    private let originNanos: Int64
    private let origin: ContinuousClock.Instant
    /// The raw clock's nanoseconds until which the lease holds (exclusive); `Int64.max` unbounded, `Int64.min` none.
    private let deadline: Atomic<Int64>

    public init() {
        originNanos = Self.clockNanos()
        origin = .now
        deadline = Atomic(.max)
    }

    /// Whether the lease holds now.
    @inline(__always)
    public func holds() -> Bool {
        let d = deadline.load(ordering: .acquiring)
        return d == .max || Self.clockNanos() < d
    }

    /// Whether the lease holds at `instant`.
    public func holds(at instant: ContinuousClock.Instant) -> Bool {
        let d = deadline.load(ordering: .acquiring)
        return d == .max || rawNanos(instant) < d
    }

    /// The lease holds until `instant` (exclusive).
    public func grant(until instant: ContinuousClock.Instant) {
        deadline.store(min(rawNanos(instant), .max - 1), ordering: .releasing)
    }

    /// The lease holds without a bound.
    public func grantUnbounded() { deadline.store(.max, ordering: .releasing) }

    /// The lease does not hold.
    public func revoke() { deadline.store(.min, ordering: .releasing) }

    /// Whether the lease is unbounded.
    public var isUnbounded: Bool { deadline.load(ordering: .acquiring) == .max }

    /// `instant` on the raw clock.
    func rawNanos(_ instant: ContinuousClock.Instant) -> Int64 {
        let (s, a) = (instant - origin).components
        let (ns, overflow) = s.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return s < 0 ? .min + 1 : .max - 1 }
        return originNanos &+ ns &+ a / 1_000_000_000
    }

    /// Nanoseconds of the raw clock.
    @inline(__always)
    static func clockNanos() -> Int64 {
        var ts = timespec()
        #if os(Linux)
            clock_gettime(CLOCK_BOOTTIME, &ts)
        #else
            clock_gettime(CLOCK_MONOTONIC, &ts)
        #endif
        return Int64(ts.tv_sec) &* 1_000_000_000 &+ Int64(ts.tv_nsec)
    }
}
