import SetteeCore
import SetteeJSON
import Testing

/// `JSON.isWellFormed`, the check behind the KV port's JSON datatype bit: RFC 8259's grammar and well-formed UTF-8,
/// at any depth, without a trap on any bytes.
@Suite struct JSONWellFormedTests {
    static func check(_ bytes: [UInt8]) -> Bool { bytes.withUnsafeBytes { JSON.isWellFormed($0) } }
    static func check(_ text: String) -> Bool { check(Array(text.utf8)) }

    static let accepted: [String] = [
        "{}", "[]", #"{"a":1}"#, " \t\r\n[ 1 , -0 , 0.5 , -1.5e+10 , 2E-3 , 1e999 ] \n", "0", "-0", "42", "3.25",
        #""""#, #""a\"b\\c\/d\b\f\n\r\t\u00e9\uD83D\uDE00\ud800""#, "true", "false", "null",
        #"{"a":{"b":[{"c":[]},{}]},"d":"e","a":2}"#, "{\"\u{e9}\u{20AC}\u{1F600}\":\"\u{10FFFF}\"}",
        #"[[[[[[[[[[["deep"]]]]]]]]]]]"#,
    ]

    static let refused: [String] = [
        "", " ", "{", "}", "[", "]", "[1,]", "[,1]", "{,}", #"{"a"}"#, #"{"a":}"#, #"{"a" 1}"#, #"{"a":1,}"#,
        "{1:2}", "{'a':1}", "[1 2]", "1 2", "01", "-", "-a", "1.", ".5", "1e", "1e+", "+1", "0x10", "NaN",
        "Infinity", "tru", "truex", "nul", "True", #""abc"#, #""\x""#, #""\u12G4""#, #""\u123""#, "\"a\tb\"",
        "\"a\u{1}b\"", "[1]]", "[1}", #"{"a":1]"#, "[{]}", "hello", #"{"a":1}x"#, "\u{FEFF}{}",
    ]

    /// Proves the grammar's cases: every value kind at the top, whitespace around it, escapes, numbers of any
    /// magnitude, repeated member names; and refusals for every way a text is cut short, mismatched, or not JSON.
    @Test func grammar() {
        for text in Self.accepted { #expect(Self.check(text), "\(text.debugDescription)") }
        for text in Self.refused { #expect(!Self.check(text), "\(text.debugDescription)") }
    }

    /// Proves UTF-8 is checked inside strings (Unicode's table 3-7: overlong forms, surrogates, code points above
    /// U+10FFFF, stray continuation bytes and cut sequences are refused) and that bytes above 0x7F anywhere outside a
    /// string are refused, in every position of the word-at-a-time scan.
    @Test func utf8() {
        let good: [[UInt8]] = [
            [0xC2, 0x80], [0xDF, 0xBF], [0xE0, 0xA0, 0x80], [0xED, 0x9F, 0xBF], [0xEF, 0xBF, 0xBF],
            [0xF0, 0x90, 0x80, 0x80], [0xF4, 0x8F, 0xBF, 0xBF],
        ]
        let bad: [[UInt8]] = [
            [0x80], [0xBF], [0xC0, 0x80], [0xC1, 0xBF], [0xC2], [0xC2, 0x41], [0xE0, 0x80, 0x80],
            [0xED, 0xA0, 0x80], [0xE1, 0x80], [0xF0, 0x80, 0x80, 0x80], [0xF4, 0x90, 0x80, 0x80],
            [0xF5, 0x80, 0x80, 0x80],
            [0xFF], [0xFE],
        ]
        for pad in 0..<10 {
            let before = [UInt8](repeating: UInt8(ascii: "x"), count: pad)
            let after = [UInt8](repeating: UInt8(ascii: "y"), count: 9 - pad)
            for seq in good {
                #expect(Self.check([0x22] + before + seq + after + [0x22]), "\(seq) at \(pad)")
            }
            for seq in bad {
                #expect(!Self.check([0x22] + before + seq + after + [0x22]), "\(seq) at \(pad)")
            }
        }
        #expect(!Self.check([UInt8(ascii: "[")] + [0xC3, 0xA9] + [UInt8(ascii: "]")]))
    }

    /// Proves nesting is checked at any depth without recursion: 100,000 levels of arrays, objects and arrays
    /// alternating past the 64 levels kept in one word, and a closer that does not match its opener at level 130
    /// (the kinds past 64 are kept right), and a text cut short at every one of its bytes.
    @Test func nesting() {
        let n = 100_000
        #expect(
            Self.check(
                [UInt8](repeating: UInt8(ascii: "["), count: n) + [UInt8](repeating: UInt8(ascii: "]"), count: n)))
        #expect(
            !Self.check(
                [UInt8](repeating: UInt8(ascii: "["), count: n) + [UInt8](repeating: UInt8(ascii: "]"), count: n - 1)))
        func alternating(_ depth: Int, wrongAt: Int? = nil) -> String {
            var open = "", close = ""
            for level in 0..<depth {
                if level % 2 == 0 {
                    open += #"{"k":"#
                    close = (level == wrongAt ? "]" : "}") + close
                } else {
                    open += "["
                    close = (level == wrongAt ? "}" : "]") + close
                }
            }
            return open + "1" + close
        }
        #expect(Self.check(alternating(300)))
        #expect(!Self.check(alternating(300, wrongAt: 130)))
        #expect(!Self.check(alternating(300, wrongAt: 131)))
        #expect(!Self.check(alternating(300, wrongAt: 3)))
        let whole = Array(alternating(150).utf8)
        for cut in 0..<whole.count { #expect(!Self.check(Array(whole[..<cut]))) }
    }

    /// Proves, on seeded random documents and single-byte corruptions of them, that the check agrees with the
    /// parser where the parser's own bounds do not apply (depth within `Limits.maxJSONDepth`, finite numbers): a
    /// text is well-formed exactly when `JSON.parse` reads it and it is valid UTF-8. Prints its seed.
    @Test func agreesWithTheParser() throws {
        let seed = UInt64.random(in: 1...UInt64.max)
        print("JSONWellFormedTests.agreesWithTheParser seed \(seed)")
        var rng = SplitMix64(seed: seed)
        let pieces = ["a", "\u{e9}", "\u{1F600}", "\"", "\\", "\n", " ", "\u{1}"]
        func value(_ depth: Int) -> JSON {
            switch rng.next() % (depth > 6 ? 4 : 6) {
            // At most two digits either side of the point, so no corruption makes an exponent the parser refuses
            // as out of range (a digit turned `e` leaves at most two exponent digits).
            case 0: return .integer(Int128(Int64(truncatingIfNeeded: rng.next()) % 100))
            case 1: return .number(Double(rng.next() % 100) / 4)
            case 2:
                return .string((0..<Int(rng.next() % 12)).map { _ in pieces[Int(rng.next() % 8)] }.joined())
            case 3: return [.null, .bool(true), .bool(false)][Int(rng.next() % 3)]
            case 4: return .array((0..<Int(rng.next() % 4)).map { _ in value(depth + 1) })
            default:
                return .object(
                    (0..<Int(rng.next() % 4)).map { i in ("k\(i)\(pieces[Int(rng.next() % 8)])", value(depth + 1)) })
            }
        }
        let corruptions: [UInt8] =
            Array("{}[]\",:\\ 0-.eE+tfnu".utf8) + [0x00, 0x1F, 0x7F, 0x80, 0xC3, 0xE2, 0xF0, 0xFF]
        for _ in 0..<2_000 {
            let text = value(0).serialized()
            #expect(Self.check(text), "seed \(seed): \(String(decoding: text, as: UTF8.self))")
            guard !text.isEmpty else { continue }
            var bad = text
            bad[Int(rng.next() % UInt64(text.count))] = corruptions[Int(rng.next() % UInt64(corruptions.count))]
            let parses = (try? JSON.parse(bad)) != nil
            let utf8 = String(validating: bad, as: UTF8.self) != nil
            #expect(Self.check(bad) == (parses && utf8), "seed \(seed): \(bad)")
        }
    }
}
