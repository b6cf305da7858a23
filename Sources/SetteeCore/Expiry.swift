/// memcached's expiry rule: 0 never expires; up to 30 days is relative seconds; above that, an
/// absolute Unix time. Returns the absolute Unix time to store (0 = never).
public enum Expiry {
    @inlinable
    public static func absolute(_ wire: UInt32, nowSeconds: UInt32) -> UInt32 {
        if wire == 0 { return 0 }
        if wire <= Limits.relativeExpiryLimitSeconds { return nowSeconds &+ wire }
        return wire
    }

    /// Whether an item stored with absolute expiry `exp` has expired at `nowSeconds`.
    @inlinable
    public static func isExpired(_ exp: UInt32, nowSeconds: UInt32) -> Bool {
        exp != 0 && exp <= nowSeconds
    }
}
