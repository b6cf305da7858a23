import Testing

@testable import SetteeAdmin

/// URL-encoded form bodies decode through the shared percent-decoding: `+` is a space, `%2B` a plus,
/// non-ASCII escapes decode, and a broken escape or non-UTF-8 is refused rather than guessed at.
@Suite struct FormBodyTests {
    @Test func decodesPlusEscapesAndUTF8() throws {
        let form = try FormBody.parseURLEncoded(Array("name=my+bucket&pw=a%2Bb%26c&u=caf%C3%A9&flag&x=1&x=2".utf8))
        #expect(form["name"] == "my bucket")
        #expect(form["pw"] == "a+b&c")
        #expect(form["u"] == "café")
        #expect(form["flag"] == "")
        #expect(form["x"] == "2")
    }

    @Test(arguments: ["a=%", "a=%4", "a=%zz", "a=%FF", "%=1"])
    func refusesBrokenEscapes(_ body: String) {
        #expect(throws: FormBody.ParseError.self) { try FormBody.parseURLEncoded(Array(body.utf8)) }
    }
}
