import SetteeCore
import SetteeJSON
import SetteeStorage
import Testing

@testable import SetteeAdmin

/// The admin API's JSON reads and writes that went through Foundation before: console documents and form bodies.
@Suite struct AdminJSONReadsTests {
    // Proves a console document carries a CAS above 2^53 exactly (as a string, as Couchbase's console does)
    // and passes a JSON body's 64-bit integers through unchanged.
    @Test func consoleDocumentKeepsSixtyFourBitNumbers() throws {
        let cas: UInt64 = 1_700_000_000_123_456_789
        let body = Array(#"{"seq":18446744073709551615,"n":9007199254740993}"#.utf8)
        let meta = ItemMetadata(
            cas: CAS(cas), revSeqno: RevSeqNo(1), bySeqno: SeqNo(2), flags: 0x0200_0000, expiry: 0,
            datatype: .json, deleted: false)
        let rendered = try JSON.parse(DocumentRoutes.render(id: "k", Document(value: body, meta: meta)))
        #expect(rendered["meta"]?["cas"]?.stringValue == "1700000000123456789")
        #expect(rendered["meta"]?["datatype"]?.stringValue == "json")
        #expect(rendered["json"]?["seq"]?.uint64Value == UInt64.max)
        #expect(rendered["json"]?["n"]?.uint64Value == 9_007_199_254_740_993)
        let binary = Document(value: [0xFF, 0x00], meta: meta)
        #expect(try JSON.parse(DocumentRoutes.render(id: "b", binary))["base64"]?.stringValue == "/wA=")
    }

    // Proves a JSON form body keeps integers exact (JSONDecoder read UInt64.max as a double and wrote it
    // back as 1.8446744073709552e+19) and refuses anything but a flat object of scalars.
    @Test func jsonFormBodies() throws {
        let form = try FormBody.parseJSON(
            Array(#"{"a":"x","b":true,"c":false,"n":100,"big":18446744073709551615,"f":1.5,"a":"y"}"#.utf8))
        #expect(form.fields == ["a": "y", "b": "1", "c": "0", "n": "100", "big": "18446744073709551615", "f": "1.5"])
        for bad in ["[1]", #"{"a":[1]}"#, #"{"a":{}}"#, #"{"a":null}"#, "{", ""] {
            #expect(throws: FormBody.ParseError.self) { try FormBody.parseJSON(Array(bad.utf8)) }
        }
    }

    // Proves a JSON-quoted start key is unquoted with its escapes, and anything else is kept as it is.
    @Test func consoleKeysAreUnquoted() {
        #expect(DocumentRoutes.unquote(#""a\"b""#) == "a\"b")
        #expect(DocumentRoutes.unquote(#""\u00e9""#) == "é")
        #expect(DocumentRoutes.unquote("plain") == "plain")
        #expect(DocumentRoutes.unquote(#""unterminated"#) == #""unterminated"#)
    }
}
