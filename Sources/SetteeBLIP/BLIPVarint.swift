/// Unsigned LEB128 varints as BLIP writes message numbers, frame flags, property lengths and ACK byte counts
/// (BLIP Protocol 3.0, §3.4 and §3.5; the same encoding as Go's `binary.PutUvarint`): seven bits a byte, least
/// significant group first, the high bit set on every byte but the last. A `UInt64` takes 1 to 10 bytes.
public enum BLIPVarint {
    /// Why bytes are not a varint. Every shape of input maps to one of these; nothing traps.
    public enum DecodeError: Error, Sendable, Equatable {
        /// The bytes end inside the varint (the last byte read still had its high bit set).
        case truncated
        /// More than 10 bytes, or a 10th byte above 1: the value does not fit 64 bits.
        case overflow
    }

    /// The longest encoding of a `UInt64`.
    public static let maxLength = 10

    /// Appends `value`'s encoding to `bytes`.
    public static func encode(_ value: UInt64, into bytes: inout [UInt8]) {
        var v = value
        while v >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        bytes.append(UInt8(truncatingIfNeeded: v))
    }

    /// `value`'s encoding.
    public static func encoded(_ value: UInt64) -> [UInt8] {
        var out: [UInt8] = []
        encode(value, into: &out)
        return out
    }

    /// The number of bytes `value` encodes to.
    public static func length(of value: UInt64) -> Int {
        var n = 1
        var v = value
        while v >= 0x80 {
            v >>= 7
            n += 1
        }
        return n
    }

    /// Reads a varint starting at `index` in `bytes` and moves `index` past it.
    /// - Throws: `DecodeError`; `index` is then left where it was.
    public static func decode<C: RandomAccessCollection<UInt8>>(
        _ bytes: C, at index: inout C.Index
    ) throws(DecodeError) -> UInt64 {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        var i = index
        for count in 0..<maxLength {
            guard i < bytes.endIndex else { throw .truncated }
            let byte = bytes[i]
            i = bytes.index(after: i)
            // The 10th byte holds bit 63 only.
            if count == maxLength - 1 && byte > 1 { throw .overflow }
            value |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 {
                index = i
                return value
            }
            shift += 7
        }
        throw .overflow
    }
}
