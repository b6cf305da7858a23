import SetteeAuth
import SetteeCore

/// The router's own SASL server for its clients, one user (`-u`/`-p`): SCRAM-SHA512/256/1 against keys derived
/// once at start (the Couchbase SDKs log in with SCRAM and have no PLAIN fallback on a clear connection), and
/// PLAIN for memcached clients, compared in constant time. Without `-u` the user is empty with an empty password.
struct RouterLogin: Sendable {
    /// What SASL_LIST_MECHS answers, strongest first (as a node does).
    static let mechanisms = "SCRAM-SHA512 SCRAM-SHA256 SCRAM-SHA1 PLAIN"

    let username: String
    private let keys: [ScramHash: ScramKeys]
    private let plainDigest: [UInt8]
    /// Process-local key for decoy salts of other user names, so the challenge does not tell who exists.
    private let decoySecret: [UInt8]

    /// Derives the SCRAM keys (PBKDF2 per hash: call it once, at start).
    init(username: String?, password: String?) {
        var rng = SystemRandomNumberGenerator()
        let salt = (0..<16).map { _ in UInt8.random(in: 0...255, using: &rng) }
        self.username = username ?? ""
        let password = password ?? ""
        var keys: [ScramHash: ScramKeys] = [:]
        for hash in ScramHash.allCases {
            keys[hash] = ScramKeys.derive(password: password, salt: salt, iterations: 4096, hash: hash)
        }
        self.keys = keys
        self.plainDigest = Self.digest(user: self.username, password: password)
        self.decoySecret = (0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }

    private static func digest(user: String, password: String) -> [UInt8] {
        ScramHash.sha256.hash(Array(user.utf8) + [0] + Array(password.utf8))
    }

    /// Whether a SASL PLAIN payload (`[authzid] NUL user NUL password`) names the router's user and password.
    func checkPlain(_ payload: [UInt8]) -> Bool {
        let parts = payload.split(separator: 0, omittingEmptySubsequences: false)
        guard parts.count == 3 else { return false }
        let candidate = Self.digest(
            user: String(decoding: parts[1], as: UTF8.self), password: String(decoding: parts[2], as: UTF8.self))
        return constantTimeEqual(candidate, plainDigest)
    }

    /// The keys of `user` for `hash`, nil for any other user.
    func keys(user: String, hash: ScramHash) -> ScramKeys? {
        user == username ? keys[hash] : nil
    }

    /// Keys for a user that does not exist: a salt derived from the name, keys no proof can match.
    func decoy(user: String, hash: ScramHash) -> ScramKeys {
        let seed = ScramHash.sha512.hmac(key: decoySecret, data: Array(user.utf8))
        return ScramKeys(salt: Array(seed.prefix(16)), iterations: 4096, storedKey: [], serverKey: [])
    }
}
