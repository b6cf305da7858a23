import SetteeCore

/// CRC-32 (IEEE 802.3, the same function as `SetteeCore.CRC32`, zlib's `crc32`) computed
/// slicing-by-8: eight bytes per step through eight 256-entry tables. The byte-at-a-time version
/// was 28 % of warmup CPU in a profile (every value is checksummed on write and on every read);
/// this one is several times faster. Equality with `SetteeCore.CRC32` is tested.
enum Checksum {
    /// tables[k * 256 + i]: CRC of byte i followed by k zero bytes.
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

    static func crc32(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        guard let base = bytes.baseAddress else { return 0 }
        return tables.withUnsafeBufferPointer { tb in
            let t = tb.baseAddress!
            var c = ~UInt32(0)
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

    static func crc32(_ bytes: [UInt8]) -> UInt32 { bytes.withUnsafeBytes { crc32($0) } }
}
