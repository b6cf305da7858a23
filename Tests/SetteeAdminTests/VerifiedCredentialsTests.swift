import SetteeAuth
import SetteeCore
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeRegistry

/// The cache of verified credentials: a repeated Basic/PLAIN login of the admin or of a local user skips PBKDF2,
/// and nothing a cached entry remembers outlives a change of the password, the roles or the user.
@Suite struct VerifiedCredentialsTests {
    /// A registry in `dir`, initialised with the admin `admin` / `password`.
    static func registry(_ dir: TemporaryDirectory) throws -> NodeRegistry {
        let r = try makeRegistry(dir)
        try r.initialize(username: "admin", password: "password")
        return r
    }

    /// Proves a local user's second login is answered from the cache without PBKDF2 (it used to run on every
    /// request; counted by `slowChecks`), that a wrong password runs it once, as an unknown name does (it ran twice,
    /// the user's check and then the admin's, so timing told which names exist), that the principal carries the roles
    /// of the moment, and that a password change or a deletion is honoured at once.
    @Test func aLocalUserIsVerifiedOnceAndChangesAreHonoured() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let r = try Self.registry(dir)
        defer { r.shutdown() }
        let reader = try #require(Role(parsing: "data_reader[b]"))
        let ro = try #require(Role(parsing: "ro_admin"))
        try r.upsertUser(name: "ann", fullName: "", password: "secret-1", roles: [reader])
        #expect(r.credentials.verified.withLock { $0.count } == 0)
        let slow = { r.credentials.slowChecks.load(ordering: .relaxed) }
        let start = slow()

        #expect(r.authenticate(username: "ann", password: "secret-1") == .user("ann", roles: [reader]))
        #expect(slow() == start + 1)
        #expect(r.credentials.verified.withLock { $0.count } == 1)
        #expect(r.authenticate(username: "ann", password: "secret-2") == nil)
        #expect(slow() == start + 2, "a wrong password is checked the slow way, once")
        #expect(r.authenticate(username: "zed", password: "secret-2") == nil)
        #expect(slow() == start + 3, "an unknown name costs one slow check too")
        for _ in 0..<5 {
            #expect(r.authenticate(username: "ann", password: "secret-1") == .user("ann", roles: [reader]))
        }
        #expect(slow() == start + 3, "repeated logins come from the cache")
        #expect(r.credentials.verified.withLock { $0.count } == 1)
        #expect(r.authenticate(username: "admin", password: "password") == .admin)
        #expect(r.authenticate(username: "admin", password: "password") == .admin)
        #expect(slow() == start + 4)
        #expect(r.credentials.verified.withLock { $0.count } == 2)

        // Roles come from the metadata of the moment, not from the login that filled the cache.
        try r.upsertUser(name: "ann", fullName: "", password: nil, roles: [ro])
        #expect(r.authenticate(username: "ann", password: "secret-1") == .user("ann", roles: [ro]))

        try r.upsertUser(name: "ann", fullName: "", password: "secret-2", roles: [reader])
        #expect(r.authenticate(username: "ann", password: "secret-1") == nil)
        #expect(r.authenticate(username: "ann", password: "secret-2") == .user("ann", roles: [reader]))

        try r.deleteUser(name: "ann")
        #expect(r.authenticate(username: "ann", password: "secret-2") == nil)
    }

    /// Proves an entry remembered for the old password does not match once the password changed, even if the cache
    /// were not cleared: the registry's digest covers the stored credential's salt and StoredKey.
    @Test func anEntryDoesNotOutliveItsCredential() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let r = try Self.registry(dir)
        defer { r.shutdown() }
        let old = StoredAdminCredential.make(username: "admin", password: "password")
        let new = StoredAdminCredential.make(username: "admin", password: "password")
        #expect(r.verifyCached(.admin, old, username: "admin", password: "password") { _ in true })
        #expect(r.credentials.verified.withLock { $0.count } == 1)
        #expect(!r.verifyCached(.admin, old, username: "admin", password: "passwore") { _ in true })
        // Same password, another stored form: PBKDF2 runs again (no match), and the entry is replaced.
        let before = r.credentials.verified.withLock { $0.digester }.digest(
            old.mechanisms["SHA512"]?.salt ?? "", old.mechanisms["SHA512"]?.storedKey ?? "", "admin", "password")
        #expect(r.verifyCached(.admin, new, username: "admin", password: "password") { _ in true })
        #expect(!r.credentials.verified.withLock { $0.matches(.admin, before) })
        // A check whose credential changed during the PBKDF2 is not remembered.
        r.credentials.forgetVerified()
        #expect(r.verifyCached(.user("x"), old, username: "admin", password: "password") { _ in false })
        #expect(r.credentials.verified.withLock { $0.count } == 0)
    }

    /// Proves the digest tells apart lists that a separator would confuse ("a\0b" + "c" against "a" + "b\0c"), so a
    /// remembered login cannot be replayed under another split of the same bytes, and that two caches have two keys.
    @Test func theDigestSeparatesItsParts() {
        let cache = VerifiedCredentials<String>(capacity: 4)
        #expect(cache.digester.digest("s", "a\0b", "c") != cache.digester.digest("s", "a", "b\0c"))
        #expect(cache.digester.digest("s", "a", "c") == cache.digester.digest("s", "a", "c"))
        #expect(
            cache.digester.digest("s", "a", "c")
                != VerifiedCredentials<String>(capacity: 4).digester.digest("s", "a", "c"))
    }

    /// Proves the cache holds at most its capacity, dropping another principal's entry for a new one, and matches only
    /// under the principal an entry was remembered for.
    @Test func theCacheIsBounded() {
        var cache = VerifiedCredentials<String>(capacity: 3)
        for i in 0..<10 {
            cache.insert("u\(i)", cache.digester.digest("u\(i)", "p"))
            #expect(cache.count <= 3)
        }
        #expect(cache.count == 3)
        #expect(cache.matches("u9", cache.digester.digest("u9", "p")))
        #expect(!cache.matches("u8", cache.digester.digest("u9", "p")))
        #expect(!cache.matches("u9", cache.digester.digest("u9", "q")))
    }
}
