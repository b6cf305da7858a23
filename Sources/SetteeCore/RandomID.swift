/// Random identifiers: 128 bits as 32 lowercase hex digits (Couchbase's bucket and node uuid shape, Sync
/// Gateway's generated document ids, multipart boundaries, secrets). The generator is a parameter so a
/// seeded run can replay; the default is the system's secure one.
public enum RandomID {
    /// 32 lowercase hex digits of 128 random bits.
    public static func hex128() -> String {
        var rng = SystemRandomNumberGenerator()
        return hex128(using: &rng)
    }

    /// 32 lowercase hex digits of 128 bits from `rng`.
    public static func hex128<G: RandomNumberGenerator>(using rng: inout G) -> String {
        hex16(rng.next()) + hex16(rng.next())
    }

    /// `v` as exactly 16 lowercase hex digits.
    private static func hex16(_ v: UInt64) -> String {
        let digits = String(v, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }
}
