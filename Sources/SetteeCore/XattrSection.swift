/// The extended-attribute (XATTR) section at the front of a stored value whose datatype has the XATTR bit
/// (0x04), at the byte level (kv_engine `docs/BinaryProtocol.md`, "Data Types"):
///
/// ```
/// total length u32 (the bytes that follow, up to the body)
/// { pair length u32, key, 0x00, value, 0x00 }…
/// body
/// ```
///
/// Storage and the KV shell use it to find the body and to keep the system attributes (names starting with
/// `_`) on a tombstone; `XattrBlob` (SetteeSubdoc) validates and edits the attributes themselves. Values are
/// validated before they are stored, so these functions only refuse to read past the end: a section that
/// does not fit reads as no section.
public enum XattrSection {
    /// The section's length in bytes (its 4-byte total included): where the body starts. Nil when the
    /// value is shorter than the length it declares.
    public static func length<C: RandomAccessCollection>(of value: C) -> Int? where C.Element == UInt8 {
        guard value.count >= 4 else { return nil }
        let total = Int(readUInt32(value, at: 0))
        guard total <= value.count - 4 else { return nil }
        return 4 + total
    }

    /// The body of a stored value: what follows the section when `hasXattrs`, else the whole value.
    public static func body(of value: [UInt8], hasXattrs: Bool) -> [UInt8] {
        guard hasXattrs, let n = length(of: value) else { return value }
        return Array(value[n...])
    }

    /// The section of `value` (nothing when it has none).
    public static func section(of value: [UInt8]) -> ArraySlice<UInt8> {
        value[..<(length(of: value) ?? 0)]
    }

    /// A section holding only the system attributes of `value`'s section, in their order: what a tombstone
    /// keeps when its document is deleted. Empty when there are none.
    public static func systemOnly(_ value: [UInt8]) -> [UInt8] {
        guard let end = length(of: value) else { return [] }
        var pairs: [UInt8] = []
        var i = 4
        while end - i >= 4 {
            let n = Int(readUInt32(value, at: i))
            guard n <= end - i - 4 else { break }
            if n > 0 && value[i + 4] == UInt8(ascii: "_") { pairs += value[i..<(i + 4 + n)] }
            i += 4 + n
        }
        guard !pairs.isEmpty else { return [] }
        return bigEndian(UInt32(truncatingIfNeeded: pairs.count)) + pairs
    }

    /// `value` (a section, then a body) with the system attributes of `old`'s section put in front of its own:
    /// what a SET carrying its own section (datatype 0x04) from a user without SystemXattrWrite stores. Such a
    /// user may not touch system attributes (kv_engine `docs/ExtendedAttributes.md`), so replacing the section
    /// must not remove them either. `value`'s section holds no system attribute (that write needs the privilege,
    /// checked before); `value` comes back unchanged when `old` has none or `value` has no readable section.
    public static func keepingSystem(of old: [UInt8], in value: [UInt8]) -> [UInt8] {
        let system = systemOnly(old)
        guard system.count > 4, let n = length(of: value) else { return value }
        let pairs = Array(system[4...]) + value[4..<n]
        return bigEndian(UInt32(truncatingIfNeeded: pairs.count)) + pairs + value[n...]
    }

    private static func readUInt32<C: RandomAccessCollection>(_ bytes: C, at offset: Int) -> UInt32
    where C.Element == UInt8 {
        var v: UInt32 = 0
        var i = bytes.index(bytes.startIndex, offsetBy: offset)
        for _ in 0..<4 {
            v = v << 8 | UInt32(bytes[i])
            i = bytes.index(after: i)
        }
        return v
    }

    private static func bigEndian(_ v: UInt32) -> [UInt8] {
        [
            UInt8(truncatingIfNeeded: v >> 24), UInt8(truncatingIfNeeded: v >> 16), UInt8(truncatingIfNeeded: v >> 8),
            UInt8(truncatingIfNeeded: v),
        ]
    }
}

/// A placeholder in a stored XATTR value that the engine fills in while it stores the value, once the
/// mutation's CAS and seqno are known (sub-document macro expansion, `${Mutation.CAS}` / `${Mutation.seqno}`).
///
/// At `offset` the value holds `"0x` followed by 16 hex digits and `"`; the engine overwrites the digits.
/// The CAS is written in little-endian byte order, as kv_engine expands it (Sync Gateway decodes it that
/// way), the seqno in its natural order.
public struct MutationMacro: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        case cas, seqno
    }
    public var offset: Int
    public var kind: Kind
    public init(offset: Int, kind: Kind) {
        self.offset = offset
        self.kind = kind
    }

    /// The placeholder's length: `"0x` + 16 digits + `"`.
    public static let length = 20

    /// The 16 hex digits for `kind` of a mutation that got `cas` and `seqno`.
    public static func digits(_ kind: Kind, cas: UInt64, seqno: UInt64) -> [UInt8] {
        let v = kind == .cas ? cas.byteSwapped : seqno
        let hex = Array("0123456789abcdef".utf8)
        return (0..<16).map { hex[Int(truncatingIfNeeded: (v >> UInt64(60 - 4 * $0)) & 0xf)] }
    }

    /// Writes the digits of every macro into `value` (placeholders that do not fit are left alone).
    public static func fill(_ macros: [MutationMacro], in value: inout [UInt8], cas: UInt64, seqno: UInt64) {
        for m in macros where m.offset >= 0 && m.offset <= value.count - length {
            value.replaceSubrange((m.offset + 3)..<(m.offset + 19), with: digits(m.kind, cas: cas, seqno: seqno))
        }
    }
}
