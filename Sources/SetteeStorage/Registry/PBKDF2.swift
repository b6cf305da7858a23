import Crypto

/// The hash functions SCRAM mechanisms use, behind one non-generic face so callers (the KV server's
/// SCRAM, tests) need not import Crypto. The primitives are swift-crypto's; only the PBKDF2 loop
/// (RFC 8018 §5.2, which SCRAM calls `Hi`) is written here.
public enum ScramAlgorithm: String, Sendable, CaseIterable, Codable {
    case sha1 = "SHA1"
    case sha256 = "SHA256"
    case sha512 = "SHA512"

    /// Digest length in bytes.
    public var digestLength: Int {
        switch self {
        case .sha1: 20
        case .sha256: 32
        case .sha512: 64
        }
    }

    /// The SASL mechanism name (`SCRAM-SHA512` as Couchbase spells it).
    public var mechanism: String { "SCRAM-\(rawValue)" }

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

    /// PBKDF2 with HMAC over this hash (RFC 8018 §5.2); SCRAM's `Hi(password, salt, i)` is the first
    /// `digestLength` bytes. CPU-heavy by design: call it off event loops.
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
