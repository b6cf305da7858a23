import SetteeJSON
import Testing

@Suite struct JSONTests {
    // Proves parse → serialize keeps member order, escapes and numbers, and that `set` edits objects in place.
    @Test func roundTripAndEdit() throws {
        var v = try JSON.parse(#"{"b":1,"a":[true,null,"x\n\u00e9"],"c":{"d":-2.5}}"#)
        #expect(v.text == #"{"b":1,"a":[true,null,"x\n"# + "\u{e9}" + #""],"c":{"d":-2.5}}"#)
        #expect(v["b"]?.intValue == 1)
        #expect(v["c"]?["d"]?.numberValue == -2.5)
        #expect(v["a"]?.arrayValue?.count == 3)
        v.set("b", .string("two"))
        v.set("a", nil)
        v.set("z", .bool(false))
        #expect(v.text == #"{"b":"two","c":{"d":-2.5},"z":false}"#)
    }

    // Proves a value is stored inline, not boxed: `indirect` made every case a pointer to a heap box of its own, so
    // each number of `[0,0,…]` cost a box besides its slot (55 bytes a value instead of 32, ADR 0113).
    @Test func valuesAreNotBoxed() {
        #expect(MemoryLayout<JSON>.size > MemoryLayout<Int128>.size)
        #expect(MemoryLayout<JSON>.stride == 32)
    }

    // Proves malformed input is rejected with the byte offset of the fault.
    @Test func rejectsGarbage() {
        #expect(throws: JSONError.self) { try JSON.parse("{\"a\":}") }
        #expect(throws: JSONError.self) { try JSON.parse("[1,2] x") }
        do {
            _ = try JSON.parse("[1,")
            Issue.record("parsed truncated input")
        } catch { #expect(error.offset == 3) }
    }
}
