import SetteeAuth
import SetteeCore
import Synchronization

/// What the registry keeps about credentials beside the metadata's admin, users and internal secret: the cache of
/// passwords already verified by PBKDF2, the internal user's derived SCRAM keys, the failed-login guard, and the users
/// generation KV connections re-resolve roles by: the registry's credential store (issue 69 item 2, ADR 0139).
///
/// Owns its state under its own locks, held briefly (no PBKDF2 under them). The stored credentials themselves (the
/// admin's and local users' salted SCRAM keys, the secret) are in the committed metadata (`ClusterSnapshotStore`),
/// which `NodeRegistry` changes and then tells this store (`committed`, `forgetVerified`). Lock order: `verified` may
/// be held while the snapshot store's lock is taken (`verify`'s `stillCurrent`), never the other way round.
@usableFromInline final class CredentialStore: Sendable {
    /// Whose credentials an entry of the verified cache holds.
    enum VerifiedPrincipal: Hashable, Sendable {
        case admin
        case user(String)
    }

    /// Credentials verified by PBKDF2, so repeated HTTP Basic and PLAIN logins skip it. Cleared when the admin or the
    /// users change.
    let verified = Mutex(VerifiedCredentials<VerifiedPrincipal>(capacity: Limits.verifiedCredentialsMaxEntries))
    /// Password checks that ran PBKDF2 (`verify` found no entry), since start.
    let slowChecks = Atomic<Int>(0)
    /// Failed-login throttling shared by this node's KV port and admin API.
    let loginGuard = LoginGuard()
    /// The internal user's SCRAM keys, derived from the current and previous secret with one process-local salt (so one
    /// challenge serves both during a rotation's grace): secret → hash → keys.
    private let internalKeys = Mutex<[String: [ScramHash: ScramKeys]]>([:])
    let internalSalt: [UInt8]
    /// Bumped whenever a committed metadata change can have changed who the local users are or what roles they hold
    /// (`committed` compares the users and the admin's name), so KV connections logged in as a local user can
    /// re-resolve their roles before their next operation, and only then (ADR 0008, decision 4).
    @usableFromInline let usersGeneration = Atomic<Int>(0)

    init() {
        var rng = SystemRandomNumberGenerator()
        self.internalSalt = (0..<16).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }

    /// `credential.verify`, through the cache of verified credentials: an entry is added only while `stillCurrent`
    /// holds (asked under the cache's lock), so credentials that changed during the PBKDF2 are not remembered.
    func verify(
        _ principal: VerifiedPrincipal, _ credential: StoredAdminCredential, username: String, password: String,
        stillCurrent: () -> Bool
    ) -> Bool {
        let stored = credential.mechanisms["SHA512"]
        // The HMAC is computed between two short holds of the lock, not under it.
        let digest = verified.withLock { $0.digester }.digest(
            stored?.salt ?? "", stored?.storedKey ?? "", username, password)
        if verified.withLock({ $0.matches(principal, digest) }) { return true }
        slowChecks.wrappingAdd(1, ordering: .relaxed)
        guard credential.verify(username: username, password: password) else { return false }
        verified.withLock { v in
            if stillCurrent() { v.insert(principal, digest) }
        }
        return true
    }

    /// Forgets every verified credential (the admin or the users changed).
    func forgetVerified() { verified.withLock { $0.removeAll() } }

    /// After a commit from `old` to `new`: bumps the users generation when the users or the admin's name changed
    /// (every path that changes users ends in a commit: a local put or delete, a stored cluster document, leaving
    /// the cluster, new admin credentials, whose name may now be a user's).
    func committed(old: NodeMetadata, new: NodeMetadata) {
        if old.users != new.users || old.admin?.username != new.admin?.username {
            usersGeneration.wrappingAdd(1, ordering: .relaxed)
        }
    }

    /// SCRAM keys of the internal user for `hash` from the `accepted` secrets (the first is the one a login is
    /// challenged with; the others' keys are accepted too: same salt). Derived once per secret and hash (PBKDF2),
    /// then cached; the cache holds only secrets still accepted. nil when none is.
    func internalScramKeys(accepted: [String], hash: ScramHash) -> (keys: ScramKeys, alsoAccept: [ScramKeys])? {
        guard !accepted.isEmpty else { return nil }
        let keys = accepted.map { secret -> ScramKeys in
            if let cached = internalKeys.withLock({ $0[secret]?[hash] }) { return cached }
            let derived = ScramKeys.derive(
                password: secret, salt: internalSalt, iterations: StoredAdminCredential.iterations, hash: hash)
            internalKeys.withLock { cache in
                cache = cache.filter { accepted.contains($0.key) }
                cache[secret, default: [:]][hash] = derived
            }
            return derived
        }
        return (keys[0], Array(keys.dropFirst()))
    }
}
