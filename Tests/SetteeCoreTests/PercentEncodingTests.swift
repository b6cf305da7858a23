import SetteeCore
import Testing

/// The one percent-encoding: RFC 3986's unreserved set and nothing else. The copies it replaced disagreed
/// (some kept `~`, some did not; Foundation's `.alphanumerics` let non-ASCII letters such as `é` through
/// unencoded into peer URLs); these pin the shared behaviour.
@Suite struct PercentEncodingTests {
    @Test func unreservedStayEverythingElseIsEscaped() {
        #expect(PercentEncoding.encode("AZaz09-._~") == "AZaz09-._~")
        #expect(PercentEncoding.encode("a b/c?d&e=f+g%") == "a%20b%2Fc%3Fd%26e%3Df%2Bg%25")
        #expect(PercentEncoding.encode("café") == "caf%C3%A9")
        #expect(PercentEncoding.encode("\u{0}\u{7F}") == "%00%7F")
        #expect(PercentEncoding.encode("") == "")
    }

    @Test(arguments: ["doc:1", "a b/c", "café 😀", "%41", "~user+x", ""])
    func roundTrips(_ s: String) {
        #expect(PercentEncoding.decode(PercentEncoding.encode(s)) == s)
    }

    @Test func decodeIsStrict() {
        #expect(PercentEncoding.decode("a%2fb%2F") == "a/b/")
        #expect(PercentEncoding.decode("a+b") == "a+b")  // `+` is a space only in form bodies
        #expect(PercentEncoding.decode("no escapes") == "no escapes")
        #expect(PercentEncoding.decode("%") == nil)
        #expect(PercentEncoding.decode("%4") == nil)
        #expect(PercentEncoding.decode("%zz") == nil)
        #expect(PercentEncoding.decode("%FF") == nil)  // not UTF-8
        #expect(PercentEncoding.decodeOrKeep("100%") == "100%")
        #expect(PercentEncoding.decodeOrKeep("a%20b") == "a b")
        // The views port's own decoder (Foundation's `removingPercentEncoding`, until issue 69) made an escape
        // that is not UTF-8 a U+FFFD; like the admin port's it now keeps the text as written.
        #expect(PercentEncoding.decodeOrKeep("b%A9") == "b%A9")
    }
}
