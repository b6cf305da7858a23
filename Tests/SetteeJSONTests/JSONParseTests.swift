import SetteeCore
import SetteeJSON
import Testing

/// `JSON.parse` at the edges: the grammar, strings, limits, repeated names.
@Suite struct JSONParseTests {
    // Proves numbers outside RFC 8259's grammar are refused (a lax reader accepted "01", "+1", ".5" and
    // "1."), and a number too large for a double is refused rather than turned into `null` on output.
    @Test(arguments: ["01", "-01", "+1", ".5", "1.", "1.e5", "1e", "1e+", "-", "--1", "0x10", "1e309", "-1e309", "NaN"])
    func refusesMalformedNumbers(text: String) {
        #expect(throws: JSONError.self) { try JSON.parse(text) }
        #expect(throws: JSONError.self) { try JSON.parse("[\(text)]") }
    }

    // Proves edge numbers that are valid parse to the value JavaScript reads.
    @Test func acceptsEdgeNumbers() throws {
        #expect(try JSON.parse("1e-400").numberValue == 0)
        #expect(try JSON.parse("1.7976931348623157e308").numberValue == Double.greatestFiniteMagnitude)
        #expect(try JSON.parse("-0.0").numberValue == 0)
        #expect(try JSON.parse("0e0").intValue == 0)
        #expect(try JSON.parse("[0,-0,10]") == [0, 0, 10])
    }

    // Proves surrogate pairs decode to one scalar, and an unpaired surrogate becomes U+FFFD without
    // swallowing the escape after it (it did: "\ud800\u0041" lost the "A").
    @Test func surrogates() throws {
        #expect(try JSON.parse(#""\ud83d\ude00""#) == .string("\u{1F600}"))
        #expect(try JSON.parse(#""\uD83D\uDE00x""#) == .string("\u{1F600}x"))
        #expect(try JSON.parse(#""\ud800\u0041""#) == .string("\u{FFFD}A"))
        #expect(try JSON.parse(#""\ud800""#) == .string("\u{FFFD}"))
        #expect(try JSON.parse(#""\ude00\ud83d""#) == .string("\u{FFFD}\u{FFFD}"))
        #expect(try JSON.parse(#""a\udc00b""#) == .string("a\u{FFFD}b"))
        #expect(try JSON.parse(#""\ud800\ud83d\ude00""#) == .string("\u{FFFD}\u{1F600}"))
        #expect(throws: JSONError.self) { try JSON.parse(#""\ud83d\u12""#) }
        #expect(throws: JSONError.self) { try JSON.parse(#""\uzzzz""#) }
    }

    // Proves raw control characters inside strings are refused, escaped ones accepted and re-escaped.
    @Test func controlCharacters() throws {
        #expect(throws: JSONError.self) { try JSON.parse("\"a\u{01}b\"") }
        #expect(throws: JSONError.self) { try JSON.parse("\"a\nb\"") }
        #expect(throws: JSONError.self) { try JSON.parse("\"a\\\nb\"") }
        let v = try JSON.parse(#""\u0001\b\f\n\r\t\/""#)
        #expect(v == .string("\u{01}\u{08}\u{0C}\n\r\t/"))
        #expect(v.text == #""\u0001\u0008\u000c\n\r\t/""#)
        #expect(try JSON.parse(" \t\r\n[ 1 ]\n ") == [1])
        #expect(throws: JSONError.self) { try JSON.parse("\u{0C}1") }  // form feed is not JSON whitespace
    }

    // Proves a leading UTF-8 byte order mark is refused (Couchbase's JSON check and Sync Gateway refuse it).
    @Test func byteOrderMark() {
        #expect(throws: JSONError.self) { try JSON.parse([0xEF, 0xBB, 0xBF] + Array("{}".utf8)) }
        #expect(throws: JSONError.self) { try JSON.parse("\u{FEFF}{}") }
    }

    // Proves invalid UTF-8 inside a string becomes U+FFFD instead of failing or trapping.
    @Test func invalidUTF8IsRepaired() throws {
        #expect(try JSON.parse([0x22, 0x61, 0xFF, 0x62, 0x22]) == .string("a\u{FFFD}b"))
        #expect(try JSON.parse([0x22, 0x5C, 0x6E, 0xC3, 0x22]) == .string("\n\u{FFFD}"))
    }

    // Proves a repeated member name keeps its first position and its last value (JavaScript's
    // JSON.parse), so lookups and re-serialisation agree, in small objects and past the dictionary switch.
    @Test func repeatedNamesLastWins() throws {
        let v = try JSON.parse(#"{"a":1,"b":2,"a":3}"#)
        #expect(v.text == #"{"a":3,"b":2}"#)
        #expect(v["a"] == 3)
        let many = (0..<40).map { "\"k\($0)\":\($0)" }.joined(separator: ",")
        let big = try JSON.parse("{\(many),\"k5\":\"again\",\"k39\":null,\"new\":true}")
        #expect(big.objectValue?.count == 41)
        #expect(big["k5"] == "again")
        #expect(big["k39"] == .null)
        #expect(big.objectValue?[5].0 == "k5")
        #expect(big.objectValue?.last?.0 == "new")
    }

    // Proves nesting at the limit parses and one level past it is refused, for arrays and objects, and
    // that a hostile depth (a million brackets) is refused without overflowing the stack.
    @Test func depthLimit() throws {
        let limit = Limits.maxJSONDepth
        let atLimit = String(repeating: "[", count: limit) + String(repeating: "]", count: limit)
        #expect(try JSON.parse(atLimit).arrayValue != nil)
        let past = String(repeating: "[", count: limit + 1) + String(repeating: "]", count: limit + 1)
        #expect(throws: JSONError.self) { try JSON.parse(past) }
        let objects = String(repeating: "{\"a\":", count: limit) + "1" + String(repeating: "}", count: limit)
        #expect(try JSON.parse(objects)["a"] != nil)
        let objectsPast =
            String(repeating: "{\"a\":", count: limit + 1) + "1" + String(repeating: "}", count: limit + 1)
        #expect(throws: JSONError.self) { try JSON.parse(objectsPast) }
        #expect(throws: JSONError.self) { try JSON.parse(String(repeating: "[", count: 1_000_000)) }
        #expect(throws: JSONError.self) { try JSON.parse("[[[1]]]", maxDepth: 2) }
        #expect(try JSON.parse("[[1]]", maxDepth: 2) == [[1]])
    }

    // Proves the size limit refuses longer input before reading it, and that a caller can set a tighter one.
    @Test func sizeLimit() throws {
        #expect(Limits.maxJSONBytes >= ReplicationLimits.maxResponseBody)
        #expect(try JSON.parse("[1,2]", maxBytes: 5) == [1, 2])
        do {
            _ = try JSON.parse("[1,2] ", maxBytes: 5)
            Issue.record("parsed input over maxBytes")
        } catch { #expect(error.reason.contains("longer than 5")) }
        #expect(throws: JSONError.self) { try JSON.parse(ArraySlice(Array("[1, 2]".utf8)), maxBytes: 5) }
    }

    // Proves a text holding more than `maxValues` values is refused, counting every scalar, array, object and object
    // member (a repeated name too), through every entry point, and that exactly `maxValues` parse. Without the bound
    // 64 MiB of `[0,0,…]`, the gateway's largest body, parsed into over a gigabyte of values (ADR 0113).
    @Test func valueLimit() throws {
        #expect(Limits.maxJSONValues > Limits.maxValueSize / 2 + 1)  // the densest stored document parses
        #expect(try JSON.parse("[0,0,0]", maxValues: 4) == [0, 0, 0])
        #expect(try JSON.parse(#"{"a":[1],"b":{}}"#, maxValues: 6)["a"] == [1])
        #expect(try JSON.parse(#"{"a":1,"a":2}"#, maxValues: 5)["a"] == 2)
        #expect(try JSON.parse("7", maxValues: 1) == 7)
        let refused: [(String, Int)] = [
            ("[0,0,0]", 3), (#"{"a":[1],"b":{}}"#, 5), (#"{"a":1,"a":2}"#, 4), ("[[[]]]", 2), ("7", 0), ("[]", -1),
        ]
        for (text, max) in refused {
            do {
                _ = try JSON.parse(text, maxValues: max)
                Issue.record("parsed \(text) with maxValues \(max)")
            } catch { #expect(error.reason == "more than \(max) values") }
            #expect(throws: JSONError.self) { try JSON.parse(Array(text.utf8), maxValues: max) }
            #expect(throws: JSONError.self) { try JSON.parse(Array(text.utf8)[...], maxValues: max) }
        }
        // Refused where the first value past the bound starts, before the rest is read.
        let zeros = "[" + Array(repeating: "0", count: 1_000).joined(separator: ",") + "]"
        do {
            _ = try JSON.parse(zeros, maxValues: 10)
            Issue.record("parsed 1,001 values with maxValues 10")
        } catch { #expect(error.offset == 19) }
    }

    // Proves the generic entry point reads slices and non-contiguous collections like arrays.
    @Test func parsesAnyByteCollection() throws {
        let bytes = Array("xx{\"a\":[1,2]}yy".utf8)
        #expect(try JSON.parse(bytes[2..<(bytes.count - 2)])["a"] == [1, 2])
        #expect(try JSON.parse(Array("[true]".utf8).lazy.map { $0 }) == [true])
    }

    // Proves truncated and malformed structure is refused.
    @Test(arguments: [
        "", " ", "[", "[1,", "[1,]", "{\"a\"}", "{\"a\":1,}", "{a:1}", "[1 2]", "\"abc", "tru", "nul", "[]]", "{}{}",
    ])
    func refusesMalformedStructure(text: String) {
        #expect(throws: JSONError.self) { try JSON.parse(text) }
    }

    // Proves the streaming parse hands a member's array elements to its callback in order, equal to what a whole
    // parse reads, returns the other members with that member emptied, and bounds each element by its own
    // `maxElementValues()` (asked before each) and the rest by `maxValues`; a text that is not an object, or breaks
    // after some elements, is refused like a whole parse.
    @Test func streamingHandsEachElementOnAndBoundsItAlone() throws {
        let text = #"{"total":3, "rows" : [ {"a":[1,2]}, "x", null ], "tail":{"b":true}}"#
        var seen: [JSON] = []
        var asked = 0
        let top = try JSON.parse(
            Array(text.utf8), streaming: "rows", maxValues: 9,
            maxElementValues: {
                asked += 1
                return 5
            }
        ) { seen.append($0) }
        #expect(seen == (try JSON.parse(text))["rows"]?.arrayValue)
        #expect(asked == 3)
        #expect(top == (try JSON.parse(#"{"total":3,"rows":[],"tail":{"b":true}}"#)))

        // `{"a":[1,2]}` is 5 values (object, member, array, two numbers): 4 per element refuses it.
        do {
            _ = try JSON.parse(Array(text.utf8), streaming: "rows", maxValues: 9, maxElementValues: { 4 }) { _ in }
            Issue.record("an element past its bound was read")
        } catch let error as JSONError {
            #expect(error.bound == .values)
        }
        // Outside the elements: the object, three names, `3`, the array, `{"b":true}` as 3 = 9 values.
        #expect(throws: JSONError.self) {
            try JSON.parse(Array(text.utf8), streaming: "rows", maxValues: 8, maxElementValues: { 99 }) { _ in }
        }

        for bad in [#"[1,2]"#, #"{"rows":[1,2}"#, #"{"rows":[1,2]"#, #"{"rows":[1,2]} x"#, #"{"rows":[1,,2]}"#] {
            #expect(throws: JSONError.self) {
                try JSON.parse(Array(bad.utf8), streaming: "rows", maxValues: 99, maxElementValues: { 99 }) { _ in }
            }
        }
        // A `rows` that is not an array is kept as it is.
        let other = try JSON.parse(Array(#"{"rows":7}"#.utf8), streaming: "rows", maxValues: 9, maxElementValues: { 9 })
        {
            _ in Issue.record("no element to hand on")
        }
        #expect(other["rows"] == .integer(7))
    }
}
