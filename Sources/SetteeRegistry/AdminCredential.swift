import SetteeAuth
import SetteeCore

/// The admin user as the metadata file stores it: never the password, only per-mechanism SCRAM keys
/// (the same shape Couchbase's cbsasl keeps), one random salt per mechanism.
struct StoredAdminCredential: Codable, Sendable, Equatable {
    /// PBKDF2 rounds. SCRAM clients (Couchbase's included) accept 4096 and above.
    static let iterations = 4096
    static let saltLength = 16

    var username: String
    var mechanisms: [String: StoredScramKeys]

    struct StoredScramKeys: Codable, Sendable, Equatable {
        var salt: String  // base64
        var iterations: Int
        var storedKey: String  // base64
        var serverKey: String  // base64
    }

    static func make(username: String, password: String) -> StoredAdminCredential {
        var rng = SystemRandomNumberGenerator()
        var mechanisms: [String: StoredScramKeys] = [:]
        for algorithm in ScramHash.allCases {
            let salt = (0..<saltLength).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let c = ScramKeys.derive(password: password, salt: salt, iterations: iterations, hash: algorithm)
            mechanisms[algorithm.rawValue] = StoredScramKeys(
                salt: Base64.encode(c.salt), iterations: c.iterations,
                storedKey: Base64.encode(c.storedKey), serverKey: Base64.encode(c.serverKey))
        }
        return StoredAdminCredential(username: username, mechanisms: mechanisms)
    }

    func scram(_ algorithm: ScramHash) -> ScramKeys? {
        guard let m = mechanisms[algorithm.rawValue], let salt = Base64.decode(m.salt, .strict),
            let stored = Base64.decode(m.storedKey, .strict), let server = Base64.decode(m.serverKey, .strict),
            m.iterations >= 1
        else { return nil }
        return ScramKeys(
            salt: salt, iterations: m.iterations, storedKey: stored, serverKey: server)
    }

    /// Recomputes the SHA-512 StoredKey from `password` and compares in constant time; the username is
    /// compared through its hash so its length does not leak through timing either.
    func verify(username: String, password: String) -> Bool {
        guard let c = scram(.sha512) else { return false }
        let userOK = constantTimeEqual(
            ScramHash.sha256.hash(Array(username.utf8)), ScramHash.sha256.hash(Array(self.username.utf8)))
        let candidate = ScramKeys.derive(password: password, salt: c.salt, iterations: c.iterations, hash: .sha512)
        let passOK = constantTimeEqual(candidate.storedKey, c.storedKey)
        return userOK && passOK
    }
}
