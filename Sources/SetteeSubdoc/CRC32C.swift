/// CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial value 0xFFFFFFFF, final complement), the
/// checksum `$document.value_crc32c` shows, as kv_engine computes it over a document's body. Table-driven;
/// the table is built once. (`SetteeCore.CRC32` is the IEEE polynomial, a different function.)
enum CRC32C {
    static let table: [UInt32] = (0..<256).map { index -> UInt32 in
        var c = UInt32(index)
        for _ in 0..<8 { c = (c & 1) != 0 ? (0x82F6_3B78 ^ (c >> 1)) : (c >> 1) }
        return c
    }

    static func checksum(_ bytes: [UInt8]) -> UInt32 {
        var c: UInt32 = 0xFFFF_FFFF
        table.withUnsafeBufferPointer { t in
            for byte in bytes { c = t[Int((c ^ UInt32(byte)) & 0xFF)] ^ (c >> 8) }
        }
        return ~c
    }
}
