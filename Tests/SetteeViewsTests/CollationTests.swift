import SetteeJSON
import SetteeViews
import Testing

@Suite struct CollationTests {
    /// Couchbase's collation oracle (`couch_set_view/test/01-collation.t`, CouchDB's view_collation
    /// test), ASCII part: each key sorts strictly after the previous one.
    static let ordered: [String] = [
        "null", "false", "true",
        "1", "2", "3.0", "4",
        #""a""#, #""A""#, #""aa""#, #""b""#, #""B""#, #""ba""#, #""bb""#,
        #"["a"]"#, #"["b"]"#, #"["b","c"]"#, #"["b","c","a"]"#, #"["b","d"]"#, #"["b","d","e"]"#,
        "{}", #"{"a":1}"#, #"{"a":2}"#, #"{"b":1}"#, #"{"b":2}"#, #"{"b":2,"a":1}"#, #"{"b":2,"c":2}"#,
    ]

    // Proves the encoded sort keys order the oracle's keys exactly as listed (memcmp order = view order).
    @Test func oracleOrder() throws {
        let keys = try Self.ordered.map { try JSON.parse($0) }
        for i in 1..<keys.count {
            #expect(Collation.compare(keys[i - 1], keys[i]) < 0, "\(Self.ordered[i - 1]) < \(Self.ordered[i])")
        }
    }

    // Proves numbers compare as doubles (1 == 1.0, -0 == 0, negatives and fractions in order).
    @Test func numbers() throws {
        #expect(Collation.compare(.number(1), .number(1.0)) == 0)
        #expect(Collation.compare(.number(-0.0), .number(0)) == 0)
        let ns: [Double] = [-1e300, -2, -1.5, -1e-9, 0, 1e-9, 1, 123, 123.0001, 1e300]
        for i in 1..<ns.count { #expect(Collation.compare(.number(ns[i - 1]), .number(ns[i])) < 0) }
    }

    // Proves an exact integer's sort key is its double's, rounded as `Double(Int128)` rounds (the collation
    // converts through Int64/UInt64 instead), at the edges of both ranges and around 2^53, where rounding starts.
    @Test func integersSortAsTheirDoubles() {
        var values: [Int128] = [0, 1, -1, 1_700_000_000, Int128(Int64.min), Int128(Int64.max), Int128(UInt64.max)]
        for base: Int128 in [1 << 53, 1 << 54, 1 << 63, 1 << 64 - 1024] {
            for d: Int128 in -3...3 { values.append(base + d) }
        }
        values += values.map { -$0 }.filter { $0 >= Int128(Int64.min) }
        for i in values where i >= Int128(Int64.min) && i <= Int128(UInt64.max) {
            #expect(Collation.encode(.integer(i)) == Collation.encode(.number(Double(i))), "\(i)")
        }
    }

    // Proves ICU-like string order: punctuation < digits < letters, case-insensitive first, lowercase
    // before uppercase, accents after the plain letter but before the next letter, prefixes first.
    @Test func strings() {
        let s = ["", " ", "_", "-", ",", "!", "~", "$", "0", "9", "a", "A", "á", "Á", "ab", "b", "é", "f", "z", "Z"]
        for i in 1..<s.count {
            #expect(Collation.compare(.string(s[i - 1]), .string(s[i])) < 0, "\(s[i - 1]) < \(s[i])")
        }
    }

    // Proves arrays compare element-wise with prefixes first, and that string levels do not leak
    // across elements (["a","z"] < ["A","a"]: first elements differ only in case, which is decided
    // before the second element is looked at).
    @Test func arrays() throws {
        let a = try JSON.parse(#"["a","z"]"#)
        let b = try JSON.parse(#"["A","a"]"#)
        #expect(Collation.compare(a, b) < 0)
        #expect(Collation.compare(try JSON.parse("[1,2]"), try JSON.parse("[1,2,0]")) < 0)
        #expect(Collation.compare(try JSON.parse("[]"), try JSON.parse("[null]")) < 0)
    }

    // Proves the JSON parser round-trips values and keeps object member order.
    @Test func jsonRoundTrip() throws {
        let text = #"{"b":[1,2.5,-3e2,"x\"y\u00e9",null,true,false],"a":{}}"#
        let v = try JSON.parse(text)
        #expect(v.text == #"{"b":[1,2.5,-300,"x\"yé",null,true,false],"a":{}}"#)
        #expect(throws: JSONError.self) { try JSON.parse("{bad") }
    }
}
