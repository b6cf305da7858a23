import SetteeJSON
import Testing

/// The exact integer case: how numbers parse, compare, collate and print.
@Suite struct JSONNumberTests {
    // Proves integers written without fraction or exponent parse exactly across Int64 and UInt64 (CAS
    // values, seqnos and vBucket UUIDs), where a double would round 2^53 + 1 to 2^53.
    @Test(arguments: [
        ("9007199254740993", "9007199254740993"),  // 2^53 + 1
        ("18446744073709551615", "18446744073709551615"),  // UInt64.max
        ("9223372036854775807", "9223372036854775807"),  // Int64.max
        ("-9223372036854775808", "-9223372036854775808"),  // Int64.min
        ("0", "0"),
        ("-17", "-17"),
    ])
    func integersRoundTripExactly(text: String, printed: String) throws {
        let v = try JSON.parse(text)
        guard case .integer = v else {
            Issue.record("\(text) parsed as \(v), not .integer")
            return
        }
        #expect(v.text == printed)
    }

    // Proves a 64-bit CAS above 2^53 survives parse → value → serialise → parse unchanged, as a peer's
    // reply carries it, and reads back through `uint64Value`.
    @Test func casAboveTwoToTheFiftyThreeRoundTrips() throws {
        let cas: UInt64 = 1_700_000_000_123_456_789
        #expect(UInt64(exactly: Double(cas)) != cas)  // a double would lose it
        let reply: JSON = .object([("cas", .int(cas)), ("seqno", .int(UInt64.max - 1))])
        let back = try JSON.parse(reply.serialized())
        #expect(back["cas"]?.uint64Value == cas)
        #expect(back["seqno"]?.uint64Value == UInt64.max - 1)
        #expect(back.text == #"{"cas":1700000000123456789,"seqno":18446744073709551614}"#)
    }

    // Proves integers just outside Int64.min ... UInt64.max fall back to doubles instead of trapping.
    @Test func integersOutsideSixtyFourBitsAreDoubles() throws {
        let below = try JSON.parse("-9223372036854775809")  // Int64.min - 1
        #expect(below.numberValue == -9_223_372_036_854_775_809.0)
        if case .integer = below { Issue.record("Int64.min - 1 parsed as an integer") }
        let above = try JSON.parse("18446744073709551616")  // UInt64.max + 1
        #expect(above.numberValue == 18_446_744_073_709_551_616.0)
        #expect(above.uint64Value == nil)
        #expect(JSON.int(Int128(UInt64.max) + 1).numberValue == 18_446_744_073_709_551_616.0)
    }

    // Proves equality is numeric whatever the case: 1 == 1.0, -0 == 0, 2^53+1 != 2^53.
    @Test func equalityIsNumeric() throws {
        #expect(try JSON.parse("1") == JSON.parse("1.0"))
        #expect(try JSON.parse("1") == JSON.number(1))
        #expect(try JSON.parse("[1,{\"a\":2}]") == JSON.parse("[1.0,{\"a\":2e0}]"))
        #expect(try JSON.parse("-0") == JSON.parse("0"))
        #expect(try JSON.parse("9007199254740993") != JSON.parse("9007199254740992"))
        #expect(try JSON.parse("9007199254740992") == JSON.number(9_007_199_254_740_992))
        #expect(JSON.integer(1) != JSON.number(1.5))
        #expect(JSON.integer(1) != JSON.string("1"))
    }

    // Proves both cases collate as one number (CouchDB: 1 and 1.0 are the same key) and in numeric order.
    @Test func collationIgnoresTheCase() throws {
        #expect(Collation.compare(.integer(1), .number(1.0)) == 0)
        #expect(Collation.compare(.integer(-1), .number(-0.5)) < 0)
        #expect(Collation.compare(.number(2.5), .integer(3)) < 0)
        #expect(Collation.compare(.integer(Int128(UInt64.max)), .integer(Int128(Int64.min))) > 0)
        #expect(Collation.compare(try JSON.parse("[1,\"a\"]"), .array([.number(1), .string("a")])) == 0)
    }

    // Proves integers print without ".0" and doubles as before, and that the accessors read both cases.
    @Test func printingAndAccessors() throws {
        #expect(JSON.integer(42).text == "42")
        #expect(JSON.number(42).text == "42")
        #expect(JSON.number(2.5).text == "2.5")
        #expect(try JSON.parse("-0").text == "0")
        #expect(try JSON.parse("1E2").text == "100")
        #expect(JSON.number(.infinity).text == "null")
        let three: JSON = 3
        #expect(three == .integer(3))
        #expect(three.intValue == 3 && three.int64Value == 3 && three.uint64Value == 3 && three.numberValue == 3)
        #expect(JSON.number(3.0).intValue == 3)
        #expect(JSON.number(3.5).intValue == nil)
        #expect(JSON.integer(-1).uint64Value == nil)
        #expect(JSON.int(UInt64.max).int64Value == nil)
        #expect(JSON.number(1e300).intValue == nil)
    }
}
