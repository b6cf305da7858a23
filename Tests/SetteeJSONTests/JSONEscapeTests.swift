import SetteeJSON
import Testing

@Suite struct JSONEscapeTests {
    /// The escaping rule written byte by byte, to hold the word-at-a-time writer to.
    static func reference(_ s: String) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "\"")]
        let hex = Array("0123456789abcdef".utf8)
        for byte in s.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out += Array(#"\""#.utf8)
            case UInt8(ascii: "\\"): out += Array(#"\\"#.utf8)
            case 0x0A: out += Array(#"\n"#.utf8)
            case 0x0D: out += Array(#"\r"#.utf8)
            case 0x09: out += Array(#"\t"#.utf8)
            case 0..<0x20: out += Array(#"\u00"#.utf8) + [hex[Int(byte >> 4)], hex[Int(byte & 0xF)]]
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
        return out
    }

    // Proves the word-at-a-time string writer escapes exactly what the byte-by-byte rule does, wherever
    // in an 8-byte word a quote, backslash, control character or multi-byte UTF-8 falls (seeded, so a
    // failure replays), and that every escaped string parses back to itself.
    @Test func wordAtATimeEscapingMatchesTheByteRule() throws {
        let alphabet: [String] = [
            "a", "Z", " ", "~", "\"", "\\", "\n", "\r", "\t", "\u{0}", "\u{1F}", "\u{7F}", "é", "€", "😀",
        ]
        var state: UInt64 = 0x5EED_0019
        func next() -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int(truncatingIfNeeded: state >> 33)
        }
        for length in 0..<48 {
            for _ in 0..<40 {
                var s = ""
                for _ in 0..<length {
                    // Mostly plain text, so whole clean words occur, with the hard cases at every offset.
                    s += next() % 4 == 0 ? alphabet[next() % alphabet.count] : "x"
                }
                var out: [UInt8] = []
                JSON.writeString(s, into: &out)
                #expect(out == Self.reference(s), "length \(length): \(s.debugDescription)")
                #expect(try JSON.parse(out) == .string(s))
            }
        }
    }
}
