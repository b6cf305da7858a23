import SetteeCore

/// Macro expansion in XATTR mutations (the EXPAND_MACROS path flag, kv_engine `docs/SubDocument.md`): a JSON
/// string that is exactly `"${Mutation.CAS}"`, `"${Mutation.seqno}"` or `"${Mutation.value_crc32c}"` becomes the
/// mutation's new CAS (`"0x"` + 16 hex digits, little-endian as kv_engine writes it), its seqno, or the CRC-32C
/// of the document's new body (`"0x"` + 8 hex digits). Any other `"${…}"` is XATTR_UNKNOWN_MACRO (0xd0).
enum SubdocMacros {
    static let cas = Array(#""${Mutation.CAS}""#.utf8)
    static let seqno = Array(#""${Mutation.seqno}""#.utf8)
    static let crc32c = Array(#""${Mutation.value_crc32c}""#.utf8)
    private static let opening = Array(#""${"#.utf8)
    private static let closing = Array(#"}""#.utf8)

    /// Refuses a value naming a macro the server does not have.
    static func check(_ value: [UInt8]) throws(SubdocError) {
        var i = 0
        while let start = find(opening, in: value, from: i) {
            guard let close = find(closing, in: value, from: start + opening.count) else { return }
            let token = Array(value[start..<(close + closing.count)])
            guard token == cas || token == seqno || token == crc32c else { throw .xattrUnknownMacro }
            i = close + closing.count
        }
    }

    /// `value` with its macros expanded: the CRC at once, CAS and seqno as `MutationMacro.length`-byte
    /// placeholders, whose offsets (in the returned bytes) come back for the engine to fill.
    static func expand(_ value: [UInt8], crc32c checksum: UInt32) -> (
        [UInt8], [(offset: Int, kind: MutationMacro.Kind)]
    ) {
        var out: [UInt8] = []
        out.reserveCapacity(value.count)
        var slots: [(offset: Int, kind: MutationMacro.Kind)] = []
        var i = 0
        while i < value.count {
            if value[i] == UInt8(ascii: "\"") {
                if starts(value, with: cas, at: i) || starts(value, with: seqno, at: i) {
                    let kind: MutationMacro.Kind = starts(value, with: cas, at: i) ? .cas : .seqno
                    slots.append((out.count, kind))
                    out += Array("\"0x".utf8) + [UInt8](repeating: UInt8(ascii: "0"), count: 16) + [UInt8(ascii: "\"")]
                    i += kind == .cas ? cas.count : seqno.count
                    continue
                }
                if starts(value, with: crc32c, at: i) {
                    let digits = String(checksum, radix: 16)
                    out += Array(("\"0x" + String(repeating: "0", count: 8 - digits.count) + digits + "\"").utf8)
                    i += crc32c.count
                    continue
                }
            }
            out.append(value[i])
            i += 1
        }
        return (out, slots)
    }

    private static func starts(_ value: [UInt8], with token: [UInt8], at i: Int) -> Bool {
        value.count - i >= token.count && value[i..<(i + token.count)].elementsEqual(token)
    }

    private static func find(_ token: [UInt8], in value: [UInt8], from: Int) -> Int? {
        var i = from
        while i <= value.count - token.count {
            if value[i..<(i + token.count)].elementsEqual(token) { return i }
            i += 1
        }
        return nil
    }
}
