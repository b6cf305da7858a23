/// URL percent-encoding with one character set: RFC 3986's unreserved characters (`A-Z a-z 0-9 - . _ ~`)
/// stay, every other UTF-8 byte becomes `%XX`. The result is safe as a path segment, a query name or value,
/// and an `application/x-www-form-urlencoded` value. (Foundation's `.alphanumerics` is not ASCII: it let
/// `é` through unencoded.)
public enum PercentEncoding {
    /// Percent-encodes everything but the unreserved characters.
    public static func encode(_ s: String) -> String {
        var out = ""
        out.unicodeScalars.reserveCapacity(s.utf8.count)
        for b in s.utf8 {
            if isUnreserved(b) {
                out.unicodeScalars.append(Unicode.Scalar(b))
            } else {
                out.unicodeScalars.append("%")
                out.unicodeScalars.append(Unicode.Scalar(hexDigits[Int(b >> 4)]))
                out.unicodeScalars.append(Unicode.Scalar(hexDigits[Int(b & 15)]))
            }
        }
        return out
    }

    /// Decodes `%XX` escapes (`+` stays `+`); nil for a malformed escape or bytes that are not UTF-8.
    public static func decode(_ s: String) -> String? {
        guard s.utf8.contains(UInt8(ascii: "%")) else { return s }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(s.utf8.count)
        var it = s.utf8[...]
        while let b = it.popFirst() {
            if b == UInt8(ascii: "%") {
                guard let h = it.popFirst(), let l = it.popFirst(), let hi = hexValue(h), let lo = hexValue(l) else {
                    return nil
                }
                bytes.append(hi << 4 | lo)
            } else {
                bytes.append(b)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    /// `decode(s)`, or `s` as written when it does not decode (a path parameter from a peer: an id that is
    /// not valid percent-encoding is taken literally rather than refused).
    public static func decodeOrKeep(_ s: String) -> String { decode(s) ?? s }

    /// Whether `b` is one of RFC 3986's unreserved characters.
    public static func isUnreserved(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
            UInt8(ascii: "~"):
            return true
        default:
            return false
        }
    }

    /// The value of one hex digit, either case.
    public static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    private static let hexDigits: [UInt8] = Array("0123456789ABCDEF".utf8)
}
