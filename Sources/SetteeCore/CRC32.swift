/// CRC-32 as zlib and Couchbase clients compute it: IEEE 802.3, reflected polynomial 0xEDB88320,
/// initial value 0xFFFFFFFF, final complement. The one CRC-32 of the code base: vBucket hashing of keys,
/// the disk path's value checksums (every value on write and on every read), node metadata, view files.
/// Slicing-by-8: eight bytes per step through eight 256-entry tables (the byte-at-a-time loop was 28% of
/// warmup CPU in a profile), then the tail a byte at a time.
public enum CRC32 {
    /// tables[k * 256 + i]: the CRC of byte i followed by k zero bytes; tables[0..<256] is the classic table.
    static let tables: [UInt32] = {
        var t = [UInt32](repeating: 0, count: 8 * 256)
        for i in 0..<256 {
            var c = UInt32(i)
            for _ in 0..<8 { c = (c & 1) != 0 ? (0xEDB8_8320 ^ (c >> 1)) : (c >> 1) }
            t[i] = c
        }
        for k in 1..<8 {
            for i in 0..<256 {
                let prev = t[(k - 1) * 256 + i]
                t[k * 256 + i] = (prev >> 8) ^ t[Int(prev & 0xFF)]
            }
        }
        return t
    }()

    /// Continues a running CRC (start with 0) over `bytes`.
    public static func update(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
        guard let base = bytes.baseAddress else { return crc }
        return tables.withUnsafeBufferPointer { t in
            var c = ~crc
            var p = 0
            let n = bytes.count
            while n - p >= 8 {
                let lo = UInt32(littleEndian: base.loadUnaligned(fromByteOffset: p, as: UInt32.self)) ^ c
                let hi = UInt32(littleEndian: base.loadUnaligned(fromByteOffset: p + 4, as: UInt32.self))
                c =
                    t[7 * 256 + Int(lo & 0xFF)] ^ t[6 * 256 + Int((lo >> 8) & 0xFF)]
                    ^ t[5 * 256 + Int((lo >> 16) & 0xFF)] ^ t[4 * 256 + Int(lo >> 24)]
                    ^ t[3 * 256 + Int(hi & 0xFF)] ^ t[2 * 256 + Int((hi >> 8) & 0xFF)]
                    ^ t[1 * 256 + Int((hi >> 16) & 0xFF)] ^ t[Int(hi >> 24)]
                p += 8
            }
            while p < n {
                c = t[Int((c ^ UInt32(base.load(fromByteOffset: p, as: UInt8.self))) & 0xFF)] ^ (c >> 8)
                p += 1
            }
            return ~c
        }
    }

    public static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt32 { update(0, bytes) }

    @inlinable
    public static func checksum<C: Collection>(_ bytes: C) -> UInt32 where C.Element == UInt8 {
        if let r = bytes.withContiguousStorageIfAvailable({ checksum(UnsafeRawBufferPointer($0)) }) { return r }
        return Array(bytes).withUnsafeBytes { checksum($0) }
    }
}
