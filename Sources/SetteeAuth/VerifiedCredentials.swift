/// Passwords a process has verified against a slow stored hash (PBKDF2 for the node's users, bcrypt for a
/// gateway's), remembered so the next HTTP Basic or PLAIN login with the same ones costs one HMAC. ns_server and
/// Sync Gateway keep such a cache too. Memory only; one per registry and one per gateway database.
///
/// An entry is an HMAC-SHA256, under a key drawn when the cache is made, of the parts the caller names: what
/// identifies the stored credential (its salt and key, or its hash), the user name and the password. It is kept
/// under the principal it was verified for. A password change gives the credential another stored form, so an
/// old entry stops matching even before anyone clears it. Comparison is constant-time.
public struct VerifiedCredentials<Principal: Hashable & Sendable>: Sendable {
    private var digests: [Principal: [UInt8]] = [:]
    private let capacity: Int
    /// Makes this cache's digests. A copy costs one reference, so a caller that keeps the cache under a lock takes
    /// it there and computes the HMAC after the lock.
    public let digester: Digester

    /// At most `capacity` principals are remembered (a `Limits` value); one more drops another's entry.
    public init(capacity: Int) {
        self.capacity = max(1, capacity)
        var rng = SystemRandomNumberGenerator()
        self.digester = Digester(key: (0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) })
    }

    public var count: Int { digests.count }

    /// The HMAC key of one cache, drawn when the cache is made.
    public struct Digester: Sendable {
        fileprivate let key: [UInt8]

        /// The digest of `parts` under the cache's key. Each part is preceded by its length, so no two different
        /// lists give the same input (a separator would: "a\0b" + "c" against "a" + "b\0c").
        public func digest(_ parts: String...) -> [UInt8] {
            var input: [UInt8] = []
            for part in parts {
                let bytes = Array(part.utf8)
                withUnsafeBytes(of: UInt64(bytes.count).bigEndian) { input += $0 }
                input += bytes
            }
            return ScramHash.sha256.hmac(key: key, data: input)
        }
    }

    public func matches(_ principal: Principal, _ digest: [UInt8]) -> Bool {
        guard let known = digests[principal] else { return false }
        return constantTimeEqual(known, digest)
    }

    /// Remembers `digest` for `principal`; at capacity, another principal's entry is dropped first.
    public mutating func insert(_ principal: Principal, _ digest: [UInt8]) {
        if digests[principal] == nil, digests.count >= capacity, let other = digests.keys.first {
            digests.removeValue(forKey: other)
        }
        digests[principal] = digest
    }

    public mutating func removeAll() { digests.removeAll(keepingCapacity: false) }
}
