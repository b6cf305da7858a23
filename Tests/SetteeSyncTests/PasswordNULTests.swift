import SetteeJSON
import SetteeSync
import Testing

@Suite struct PasswordNULTests {
    @Test func aPasswordWithNULIsNeverHashedAndNeverMatches() throws {
        // Proves bcrypt is never handed a password holding NUL (C would cut it there; before, `hash`
        // reached a precondition): hashing answers nil, checking answers false, and an admin body with
        // one is a 400 `CouchError`.
        #expect(PasswordHash.hash("ab\u{0}cdef") == nil)
        let h = try #require(PasswordHash.hash("abcdef"))
        #expect(PasswordHash.check("abcdef", against: h))
        #expect(!PasswordHash.check("abcdef\u{0}", against: h))
        #expect(throws: CouchError.self) {
            try Principal.fromAdmin(
                restName: "bob", isRole: false, body: JSON.parse(#"{"password":"ab\u0000cdef"}"#), existing: nil,
                sequence: 1)
        }
    }
}
