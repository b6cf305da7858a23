import CCrypt
import SetteeCore

/// bcrypt (`$2b$`, cost `Limits.bcryptCost`) through libxcrypt's reentrant `crypt_r`. Hashing and
/// checking take tens of milliseconds by design: call them off event loops.
public enum PasswordHash {
    /// A new salted bcrypt hash of `password` (salt from the OS's random source); nil when the password
    /// contains NUL, which C would silently cut it at (callers answer 400).
    public static func hash(_ password: String, cost: Int = Limits.bcryptCost) -> String? {
        guard !password.utf8.contains(0) else { return nil }
        var setting = [CChar](repeating: 0, count: Int(CRYPT_GENSALT_OUTPUT_SIZE))
        let made = crypt_gensalt_rn("$2b$", UInt(cost), nil, 0, &setting, Int32(setting.count))
        precondition(made != nil, "crypt_gensalt_rn failed for $2b$ cost \(cost)")
        let prefix = String(decoding: setting.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard let hashed = crypt(password, setting: prefix) else {
            preconditionFailure("crypt_r refused a setting it generated: \(prefix)")
        }
        return hashed
    }

    /// Whether `password` matches `hash` (any bcrypt variant libxcrypt knows: `$2a$`, `$2b$`, `$2y$`).
    /// Compares in constant time; a malformed hash never matches.
    public static func check(_ password: String, against hash: String) -> Bool {
        guard hash.hasPrefix("$2"), let computed = crypt(password, setting: hash) else { return false }
        let a = Array(computed.utf8)
        let b = Array(hash.utf8)
        guard a.count == b.count else { return false }
        var diff: UInt8 = 0
        for i in 0..<a.count { diff |= a[i] ^ b[i] }
        return diff == 0
    }

    private static func crypt(_ password: String, setting: String) -> String? {
        // A NUL inside the password would silently truncate it in C: refuse it instead.
        guard !password.utf8.contains(0) else { return nil }
        let data = UnsafeMutablePointer<crypt_data>.allocate(capacity: 1)
        defer { data.deallocate() }
        // crypt_r requires the `initialized` field (and the buffer) zeroed before first use.
        UnsafeMutableRawPointer(data).initializeMemory(
            as: UInt8.self, repeating: 0, count: MemoryLayout<crypt_data>.size)
        guard let out = crypt_r(password, setting, data) else { return nil }
        let result = String(cString: out)
        // libxcrypt signals failure with a string starting with "*".
        return result.hasPrefix("*") ? nil : result
    }
}
