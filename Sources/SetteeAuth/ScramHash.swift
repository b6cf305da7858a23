import Crypto

/// The hash functions behind the SCRAM mechanisms Couchbase speaks (`SCRAM-SHA512`, `SCRAM-SHA256`,
/// `SCRAM-SHA1`). The primitives are swift-crypto's; only the PBKDF2 loop (RFC 8018 §5.2, SCRAM's `Hi`)
/// is written here. The server runs it when credentials are set and when a PLAIN password is checked;
/// a SCRAM login against stored keys never does.
public enum ScramHash: String, Sendable, CaseIterable, Codable {
    case sha512 = "SHA512"
    case sha256 = "SHA256"
    case sha1 = "SHA1"

    /// The SASL mechanism name, as Couchbase spells it.
    public var mechanism: String { "SCRAM-" + rawValue }

    /// The hash of a SASL mechanism name (`SCRAM-SHA512` …); nil for any other mechanism.
    public init?(mechanism: String) {
        guard mechanism.hasPrefix("SCRAM-"), let h = ScramHash(rawValue: String(mechanism.dropFirst(6))) else {
            return nil
        }
        self = h
    }

    /// Digest length in bytes.
    public var digestLength: Int {
        switch self {
        case .sha1: 20
        case .sha256: 32
        case .sha512: 64
        }
    }

    public func hash(_ data: [UInt8]) -> [UInt8] {
        switch self {
        case .sha1: Array(Insecure.SHA1.hash(data: data))
        case .sha256: Array(SHA256.hash(data: data))
        case .sha512: Array(SHA512.hash(data: data))
        }
    }

    public func hmac(key: [UInt8], data: [UInt8]) -> [UInt8] {
        let k = SymmetricKey(data: key)
        switch self {
        case .sha1: return Array(HMAC<Insecure.SHA1>.authenticationCode(for: data, using: k))
        case .sha256: return Array(HMAC<SHA256>.authenticationCode(for: data, using: k))
        case .sha512: return Array(HMAC<SHA512>.authenticationCode(for: data, using: k))
        }
    }

    /// `Hi(password, salt, i)`: PBKDF2-HMAC over this hash, one block (dkLen = digest length).
    /// CPU-heavy by design: call it off event loops.
    public func saltedPassword(_ password: [UInt8], salt: [UInt8], iterations: Int) -> [UInt8] {
        pbkdf2(password: password, salt: salt, iterations: iterations)
    }

    /// PBKDF2 with HMAC over this hash (RFC 8018 §5.2), `length` bytes (default: one digest, SCRAM's `Hi`).
    /// CPU-heavy by design: call it off event loops.
    public func pbkdf2(password: [UInt8], salt: [UInt8], iterations: Int, length: Int? = nil) -> [UInt8] {
        precondition(iterations >= 1, "PBKDF2 iterations \(iterations) < 1")
        let dkLen = length ?? digestLength
        precondition(dkLen >= 1, "PBKDF2 length \(dkLen) < 1")
        switch self {
        case .sha1: return Self.derive(Insecure.SHA1.self, password, salt, iterations, dkLen)
        case .sha256: return Self.derive(SHA256.self, password, salt, iterations, dkLen)
        case .sha512: return Self.derive(SHA512.self, password, salt, iterations, dkLen)
        }
    }

    private static func derive<H: HashFunction>(
        _: H.Type, _ password: [UInt8], _ salt: [UInt8], _ iterations: Int, _ dkLen: Int
    ) -> [UInt8] {
        // One key object for all iterations: HMAC<H>(key:) pads/hashes the key once.
        let key = SymmetricKey(data: password)
        var output: [UInt8] = []
        output.reserveCapacity(dkLen)
        var block: UInt32 = 1
        while output.count < dkLen {
            var first = HMAC<H>(key: key)
            first.update(data: salt)
            first.update(data: [
                UInt8(block >> 24), UInt8((block >> 16) & 0xFF), UInt8((block >> 8) & 0xFF), UInt8(block & 0xFF),
            ])
            var u = Array(first.finalize())
            var t = u
            if iterations > 1 {
                for _ in 2...iterations {
                    u = Array(HMAC<H>.authenticationCode(for: u, using: key))
                    for j in 0..<t.count { t[j] ^= u[j] }
                }
            }
            output.append(contentsOf: t.prefix(dkLen - output.count))
            block += 1
        }
        return output
    }
}

/// What a SCRAM server keeps per user and mechanism instead of the password (RFC 5802 §3, as
/// kv_engine's cbsasl stores it): salt, iteration count, `StoredKey = H(ClientKey)` and `ServerKey`.
public struct ScramKeys: Sendable, Equatable {
    public var salt: [UInt8]
    public var iterations: Int
    public var storedKey: [UInt8]
    public var serverKey: [UInt8]

    public init(salt: [UInt8], iterations: Int, storedKey: [UInt8], serverKey: [UInt8]) {
        self.salt = salt
        self.iterations = iterations
        self.storedKey = storedKey
        self.serverKey = serverKey
    }

    /// Derives the keys from a password (slow: PBKDF2).
    public static func derive(password: String, salt: [UInt8], iterations: Int, hash: ScramHash) -> ScramKeys {
        let salted = hash.saltedPassword(Array(password.utf8), salt: salt, iterations: iterations)
        let clientKey = hash.hmac(key: salted, data: Array("Client Key".utf8))
        return ScramKeys(
            salt: salt, iterations: iterations, storedKey: hash.hash(clientKey),
            serverKey: hash.hmac(key: salted, data: Array("Server Key".utf8)))
    }
}

/// Compares two byte strings in time that depends only on their lengths (public here: digests).
@inline(never)
public func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    var diff: UInt8 = 0
    for i in 0..<a.count { diff |= a[i] ^ b[i] }
    return diff == 0
}
