/// Standard base64 (RFC 4648 §4, with padding), as `_attachments.data`, SCRAM and HTTP Basic use: the project's one
/// base64, no Foundation. Encoding always pads; decoding takes one of three `Decoding` rules, chosen by the caller
/// for what its peers send.
public enum Base64 {
    /// How `decode` treats what is not canonical base64.
    public enum Decoding: Sendable {
        /// Whitespace (space, tab, CR, LF) and `=` anywhere are skipped, padding may be missing, and base64url's
        /// `-` and `_` count as `+` and `/`; any other character fails. What BLIP, `_bulk_get` replies and Basic
        /// credentials are read with.
        case lenient
        /// RFC 4648 §4 exactly: the standard alphabet only, a length that is a multiple of 4, and `=` only as the
        /// last one or two characters; anything else (whitespace included) fails. What SCRAM (RFC 5802) and
        /// stored keys are read with.
        case strict
        /// Every character outside the standard alphabet and `=` (whitespace, base64url's `-` and `_`, any other
        /// byte) is skipped, then the rest is read `strict`ly; a non-empty text with no digit at all fails.
        /// Foundation's `.ignoreUnknownCharacters`, which an inline attachment's `data` was read with.
        case skippingUnknown
    }

    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    private static let decodeTable: [UInt8] = {
        var t = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in alphabet.enumerated() { t[Int(c)] = UInt8(i) }
        t[Int(UInt8(ascii: "-"))] = 62  // base64url accepted too
        t[Int(UInt8(ascii: "_"))] = 63
        return t
    }()

    /// `data` as padded standard base64 (4 characters per 3 bytes, rounded up).
    public static func encode(_ data: [UInt8]) -> String {
        var out = [UInt8]()
        out.reserveCapacity((data.count + 2) / 3 * 4)
        var i = 0
        while i + 3 <= data.count {
            let n = UInt32(data[i]) << 16 | UInt32(data[i + 1]) << 8 | UInt32(data[i + 2])
            out.append(alphabet[Int(n >> 18 & 63)])
            out.append(alphabet[Int(n >> 12 & 63)])
            out.append(alphabet[Int(n >> 6 & 63)])
            out.append(alphabet[Int(n & 63)])
            i += 3
        }
        let rest = data.count - i
        if rest > 0 {
            var n = UInt32(data[i]) << 16
            if rest == 2 { n |= UInt32(data[i + 1]) << 8 }
            out.append(alphabet[Int(n >> 18 & 63)])
            out.append(alphabet[Int(n >> 12 & 63)])
            out.append(rest == 2 ? alphabet[Int(n >> 6 & 63)] : UInt8(ascii: "="))
            out.append(UInt8(ascii: "="))
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes `text` encodes under `rule` (`.lenient` by default), or nil when the rule refuses it; a single
    /// dangling digit (a length of 4n+1 digits) is refused by every rule. Bits below the last whole byte are not
    /// checked (`QR==` is `A`, as Foundation reads it). Never traps, whatever the input.
    public static func decode(_ text: String, _ rule: Decoding = .lenient) -> [UInt8]? {
        var out = [UInt8]()
        out.reserveCapacity(text.utf8.count / 4 * 3)
        var acc: UInt32 = 0
        var bits = 0
        var digits = 0
        var padding = 0
        let lenient = rule == .lenient
        for c in text.utf8 {
            if c == UInt8(ascii: "=") {
                padding += 1
                if !lenient && padding > 2 { return nil }
                continue
            }
            let v = decodeTable[Int(c)]
            // base64url's two digits are the lenient rule's only.
            if v == 0xFF || (!lenient && (c == UInt8(ascii: "-") || c == UInt8(ascii: "_"))) {
                if rule == .skippingUnknown || (lenient && (c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09)) {
                    continue
                }
                return nil
            }
            // A digit after padding: the padding was not at the end.
            if !lenient && padding > 0 { return nil }
            digits += 1
            acc = acc << 6 | UInt32(v)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: acc >> UInt32(bits)))
                acc &= (1 << UInt32(bits)) - 1
            }
        }
        let last = digits % 4
        if lenient { return last == 1 ? nil : out }
        // Only skipped characters is not an empty value (Foundation refused `!!!` too).
        if digits == 0 && !text.utf8.isEmpty { return nil }
        // The last group: 4 digits and no padding, 3 and `=`, 2 and `==`; never a single digit.
        guard last != 1, padding == (last == 0 ? 0 : 4 - last) else { return nil }
        return out
    }
}
