/// CAS generator: wall-clock nanoseconds with the low 16 bits masked off; when the clock has not
/// moved past the last value handed out, the last value + 1. Never goes backwards, also across
/// restarts, provided the owner restores `maxCAS` from disk (`init(restoring:)`).
///
/// A plain value: the owner (a vBucket, under its lock) holds it and calls `next(now:)`.
public struct HybridLogicalClock: Sendable {
    public private(set) var maxCAS: CAS

    public init(restoring maxCAS: CAS = .zero) { self.maxCAS = maxCAS }

    /// The next CAS, strictly greater than every earlier one.
    public mutating func next(nowNanoseconds: UInt64) -> CAS {
        let physical = nowNanoseconds & ~UInt64(0xFFFF)
        let value = physical > maxCAS.rawValue ? physical : maxCAS.rawValue &+ 1
        maxCAS = CAS(value)
        return maxCAS
    }

    /// Raises the clock past a CAS seen elsewhere (a replica's incoming mutation, a warmed-up item).
    public mutating func observe(_ cas: CAS) {
        if cas > maxCAS { maxCAS = cas }
    }
}
