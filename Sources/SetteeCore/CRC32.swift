/// CRC-32 as zlib and Couchbase clients compute it: IEEE 802.3, reflected polynomial 0xEDB88320,
/// initial value 0xFFFFFFFF, final complement. Table-driven; the table is built once.
public enum CRC32 {
    @usableFromInline
    static let table: [UInt32] = (0..<256).map { index -> UInt32 in
        var c = UInt32(index)
        for _ in 0..<8 { c = (c & 1) != 0 ? (0xEDB8_8320 ^ (c >> 1)) : (c >> 1) }
        return c
    }

    /// Continues a running CRC (start with 0) over `bytes`.
    @inlinable
    public static func update(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
        var c = ~crc
        table.withUnsafeBufferPointer { t in
            for byte in bytes { c = t[Int((c ^ UInt32(byte)) & 0xFF)] ^ (c >> 8) }
        }
        return ~c
    }

    @inlinable
    public static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt32 { update(0, bytes) }

    @inlinable
    public static func checksum<C: Collection>(_ bytes: C) -> UInt32 where C.Element == UInt8 {
        if let r = bytes.withContiguousStorageIfAvailable({ checksum(UnsafeRawBufferPointer($0)) }) { return r }
        return Array(bytes).withUnsafeBytes { checksum($0) }
    }
}
