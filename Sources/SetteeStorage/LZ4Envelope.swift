import CLZ4
import SetteeCore

/// How a value is stored on disk (`items.codec`).
@_spi(Benchmarks) public enum ValueCodec: UInt8, Sendable {
    /// The bytes as given.
    case raw = 0
    /// One LZ4 block (`LZ4_compress_default`), no frame header: `items.vlen` carries the
    /// decompressed length, which LZ4's block format needs and which we verify.
    case lz4 = 1
}

/// Encodes values for the disk (LZ4 when it saves space) and decodes + verifies them on the way back.
///
/// Every stored value carries the CRC-32 of its *uncompressed* bytes and their length, so a read
/// catches a flipped bit in the blob, a wrong decompression, or a truncated row.
/// (SPI `Benchmarks`: the micro-benchmarks time the round trip; nothing else outside this module uses it.)
@_spi(Benchmarks) public struct LZ4Envelope {
    /// Below this LZ4 cannot win enough to pay for the decompression on read.
    static let minCompressLength = 64
    /// Reused compression output buffer (flusher thread only).
    private var scratch: [UInt8] = []

    public init() {}

    /// Calls `body` with (codec, stored bytes, crc32 of `value`). The stored bytes are valid only
    /// inside `body`, which is where the flusher binds them without a copy.
    public mutating func withEncoded<R, E: Error>(
        _ value: [UInt8], _ body: (ValueCodec, UnsafeRawBufferPointer, UInt32) throws(E) -> R
    ) throws(E) -> R {
        let r = value.withUnsafeBytes { v in Result { () throws(E) -> R in try withEncoded(raw: v, body) } }
        return try r.get()
    }

    /// `withEncoded` for bytes borrowed in place (the flusher reads a value inside its item's box, ADR 0048).
    public mutating func withEncoded<R, E: Error>(
        raw value: UnsafeRawBufferPointer, _ body: (ValueCodec, UnsafeRawBufferPointer, UInt32) throws(E) -> R
    ) throws(E) -> R {
        let crc = CRC32.checksum(value)
        if value.count >= Self.minCompressLength && value.count <= Int(LZ4_MAX_INPUT_SIZE),
            let src = value.baseAddress?.assumingMemoryBound(to: CChar.self)
        {
            let bound = Int(LZ4_compressBound(Int32(value.count)))
            if scratch.count < bound { scratch = [UInt8](repeating: 0, count: bound) }
            let n = scratch.withUnsafeMutableBytes { dst in
                LZ4_compress_default(
                    src, dst.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(value.count), Int32(dst.count))
            }
            if n > 0 && Int(n) < value.count {
                let r = scratch.withUnsafeBytes { s in
                    Result { () throws(E) -> R in try body(.lz4, UnsafeRawBufferPointer(rebasing: s[0..<Int(n)]), crc) }
                }
                return try r.get()
            }
        }
        return try body(.raw, value, crc)
    }

    /// Decodes a stored value and verifies its length and checksum. `describe` names the record
    /// for the error (vBucket, key length) without touching the body.
    public static func decode(
        codec: Int64, stored: UnsafeRawBufferPointer, length: Int64, crc: Int64,
        vb: UInt16, keyLength: Int
    ) throws(StorageCorruptionError) -> [UInt8] {
        func fail(_ why: String) -> StorageCorruptionError {
            StorageCorruptionError(vbucket: VBucketID(vb), keyLength: keyLength, reason: why)
        }
        guard length >= 0 && length <= Int64(Limits.maxValueSize) else {
            throw fail("stored length \(length) out of range")
        }
        let n = Int(length)
        let value: [UInt8]
        switch ValueCodec(rawValue: UInt8(truncatingIfNeeded: codec)) {
        case .raw?:
            guard stored.count == n, codec == 0 else { throw fail("raw length \(stored.count) != \(n)") }
            value = Array(stored)
        case .lz4?:
            guard codec == 1, stored.count > 0 else { throw fail("empty lz4 block") }
            var produced: Int32 = -1
            let out = [UInt8](unsafeUninitializedCapacity: n) { buf, count in
                if n == 0 {
                    count = 0
                    return
                }
                produced = LZ4_decompress_safe(
                    stored.baseAddress!.assumingMemoryBound(to: CChar.self),
                    UnsafeMutableRawPointer(buf.baseAddress!).assumingMemoryBound(to: CChar.self),
                    Int32(stored.count), Int32(n))
                count = produced > 0 ? Int(produced) : 0
            }
            guard Int(produced) == n else { throw fail("lz4 decompressed \(produced) bytes, expected \(n)") }
            value = out
        case nil:
            throw fail("unknown codec \(codec)")
        }
        let actual = CRC32.checksum(value)
        guard Int64(actual) == crc else { throw fail("crc32 mismatch") }
        return value
    }
}
