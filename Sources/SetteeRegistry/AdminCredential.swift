import Foundation
import SetteeAuth

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
                salt: Data(c.salt).base64EncodedString(), iterations: c.iterations,
                storedKey: Data(c.storedKey).base64EncodedString(), serverKey: Data(c.serverKey).base64EncodedString())
        }
        return StoredAdminCredential(username: username, mechanisms: mechanisms)
    }

    func scram(_ algorithm: ScramHash) -> ScramKeys? {
        guard let m = mechanisms[algorithm.rawValue], let salt = Data(base64Encoded: m.salt),
            let stored = Data(base64Encoded: m.storedKey), let server = Data(base64Encoded: m.serverKey),
            m.iterations >= 1
        else { return nil }
        return ScramKeys(
            salt: Array(salt), iterations: m.iterations, storedKey: Array(stored), serverKey: Array(server))
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
