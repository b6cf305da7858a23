/// Standard base64 (RFC 4648 §4, with padding), as `_attachments.data` uses; no Foundation.
public enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    private static let decodeTable: [UInt8] = {
        var t = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in alphabet.enumerated() { t[Int(c)] = UInt8(i) }
        t[Int(UInt8(ascii: "-"))] = 62  // base64url accepted too
        t[Int(UInt8(ascii: "_"))] = 63
        return t
    }()

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

    /// Decodes, ignoring whitespace and padding; nil on any other character or a dangling single digit.
    public static func decode(_ text: String) -> [UInt8]? {
        var out = [UInt8]()
        out.reserveCapacity(text.utf8.count / 4 * 3)
        var acc: UInt32 = 0
        var bits = 0
        for c in text.utf8 {
            if c == UInt8(ascii: "=") || c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09 { continue }
            let v = decodeTable[Int(c)]
            if v == 0xFF { return nil }
            acc = acc << 6 | UInt32(v)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: acc >> UInt32(bits)))
                acc &= (1 << UInt32(bits)) - 1
            }
        }
        return bits >= 6 ? nil : out
    }
}
