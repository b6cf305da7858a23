/// memcached's expiry rule: 0 never expires; up to 30 days is relative seconds; above that, an
/// absolute Unix time. Returns the absolute Unix time to store (0 = never).
public enum Expiry {
    @inlinable
    public static func absolute(_ wire: UInt32, nowSeconds: UInt32) -> UInt32 {
        if wire == 0 { return 0 }
        if wire <= Limits.relativeExpiryLimitSeconds { return nowSeconds &+ wire }
        return wire
    }

    /// The expiry to send for an item that should live `ttlSeconds` from `nowSeconds`: the seconds themselves up to
    /// 30 days (relative), the absolute epoch time past that (clamped to `UInt32`); 0 (never) for a TTL below 1.
    @inlinable
    public static func wire(ttlSeconds: Int, nowSeconds: UInt32) -> UInt32 {
        guard ttlSeconds >= 1 else { return 0 }
        if ttlSeconds <= Int(Limits.relativeExpiryLimitSeconds) { return UInt32(ttlSeconds) }
        let (sum, overflow) = Int(nowSeconds).addingReportingOverflow(ttlSeconds)
        return overflow ? UInt32.max : UInt32(clamping: sum)
    }

    /// Whether an item stored with absolute expiry `exp` has expired at `nowSeconds`.
    @inlinable
    public static func isExpired(_ exp: UInt32, nowSeconds: UInt32) -> Bool {
        exp != 0 && exp <= nowSeconds
    }
}
