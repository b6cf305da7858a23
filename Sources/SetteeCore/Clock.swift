import Synchronization

/// Wall-clock time source, injected so tests can run with a manual clock.
public protocol WallClock: Sendable {
    /// Nanoseconds since the Unix epoch.
    func nowNanoseconds() -> UInt64
}

extension WallClock {
    /// Whole seconds since the Unix epoch.
    public func nowSeconds() -> UInt32 { UInt32(truncatingIfNeeded: nowNanoseconds() / 1_000_000_000) }
}

/// The real clock.
public struct SystemWallClock: WallClock {
    @inlinable public init() {}
    @inlinable public func nowNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    /// Whole seconds from the kernel's coarse clock (advanced every scheduler tick, a few milliseconds behind at most;
    /// no hardware clock read): enough for expiry checks, whose resolution is a second. A GET reads it (ADR 0087).
    @inlinable public func nowSecondsCoarse() -> UInt32 {
        var ts = timespec()
        #if os(Linux)
            clock_gettime(CLOCK_REALTIME_COARSE, &ts)
        #else
            clock_gettime(CLOCK_REALTIME, &ts)
        #endif
        return UInt32(truncatingIfNeeded: ts.tv_sec)
    }
}

/// A clock tests move by hand.
public final class ManualWallClock: WallClock {
    private let now: Mutex<UInt64>
    public init(nanoseconds: UInt64 = 1_700_000_000_000_000_000) { self.now = Mutex(nanoseconds) }
    public func nowNanoseconds() -> UInt64 { now.withLock { $0 } }
    public func advance(seconds: Double) { now.withLock { $0 &+= UInt64(seconds * 1e9) } }
    public func set(nanoseconds: UInt64) { now.withLock { $0 = nanoseconds } }
}

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
