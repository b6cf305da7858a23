import SetteeCore
import Testing

/// The one Basic-auth builder and parser. The four parsers it replaced differed at the edges (one needed
/// exactly `Basic ` with a capital B, one decoded invalid UTF-8 into replacement characters); these pin
/// the shared behaviour, including the cases a hostile client sends.
@Suite struct BasicAuthTests {
    @Test func headerIsBasicBase64OfUserColonPassword() {
        #expect(BasicAuth.header(user: "Aladdin", password: "open sesame") == "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==")
    }

    @Test(arguments: [("jane", "pa:ss"), ("", ""), ("é", "😀"), ("admin", "")])
    func roundTrips(_ user: String, _ password: String) {
        let parsed = BasicAuth.parse(BasicAuth.header(user: user, password: password))
        #expect(parsed?.user == user)
        #expect(parsed?.password == password)
    }

    @Test func schemeIsCaseInsensitive() {
        #expect(BasicAuth.parse("basic amFuZTpwYTpzcw==")?.password == "pa:ss")
        #expect(BasicAuth.parse("BASIC amFuZTpwYTpzcw==")?.user == "jane")
    }

    @Test(arguments: [
        nil, "", "Basic", "Basic ", "Bearer amFuZTpwYTpzcw==", "Basic !!!!", "Basic amFuZQ==",  // no colon
        "Basic /w==",  // 0xFF: not UTF-8
    ])
    func refuses(_ header: String?) {
        #expect(BasicAuth.parse(header) == nil)
    }
}
