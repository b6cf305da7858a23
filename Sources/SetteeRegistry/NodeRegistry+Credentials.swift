import Foundation
import Logging
import SetteeAuth
import SetteeClusterMap
import SetteeControl
import SetteeCore
import SetteeStorage
import Synchronization

/// The admin credentials and password checks: the metadata holds the salted keys (`ClusterSnapshotStore`), the
/// credential store (`CredentialStore`) what is remembered of checks already made.
extension NodeRegistry {
    /// Whether admin credentials have been set (`POST /settings/web`, `/clusterInit`).
    public var isInitialized: Bool { snapshots.read { $0.admin != nil } }

    /// Sets (or replaces) the admin credentials. The password is stored only as salted SCRAM keys.
    /// Slow (PBKDF2) and blocking: call it off event loops. Throws `.invalidCredentials` for an empty
    /// username or a password under 6 characters (Couchbase's rule). Replacing existing credentials also rotates
    /// the internal node secret (`rotateInternalSecret`) and takes a new cluster revision, so the change reaches
    /// every member; returns whether it did (the caller publishes the document then). `claim`: the epoch that
    /// revision is committed in (`takeRevision`).
    @discardableResult
    public func initialize(username: String, password: String, claim: EpochClaim? = nil) throws -> Bool {
        guard !username.isEmpty else { throw RegistryError.invalidCredentials("Username must not be empty.") }
        guard password.count >= 6 else {
            throw RegistryError.invalidCredentials("The password must be at least 6 characters long.")
        }
        let credential = StoredAdminCredential.make(username: username, password: password)
        let changed = try mutations.withLock { _ in
            var metadata = snapshots.metadata
            let changed = metadata.admin != nil
            metadata.admin = credential
            if changed {
                rotateSecret(&metadata, graceSeconds: Limits.internalSecretGraceSeconds)
                try takeRevision(&metadata, claim: claim)
            }
            try commit(metadata)
            credentials.forgetVerified()
            return changed
        }
        loginGuard.reset()
        logger.notice(
            "admin credentials set",
            metadata: ["username": "\(LogText.userData(username))", "secretRotated": "\(changed)"])
        return changed
    }

    /// Constant-time check of the admin credentials (false before initialisation). Slow on the first
    /// success for given credentials (PBKDF2), fast after: call it off event loops.
    public func checkAdmin(username: String, password: String) -> Bool {
        guard let admin = snapshots.read({ $0.admin }) else { return false }
        return verifyCached(.admin, admin, username: username, password: password) { $0.admin == admin }
    }

    /// `credential.verify`, through the cache of verified credentials: an entry is added only while
    /// `stillCurrent` holds for the metadata, so credentials that changed during the PBKDF2 are not remembered.
    func verifyCached(
        _ principal: CredentialStore.VerifiedPrincipal, _ credential: StoredAdminCredential, username: String,
        password: String, stillCurrent: (NodeMetadata) -> Bool
    ) -> Bool {
        credentials.verify(principal, credential, username: username, password: password) {
            stillCurrent(snapshots.metadata)
        }
    }

    /// Who these credentials belong to: the admin, a local RBAC user, or nil.
    public func authenticate(username: String, password: String) -> Principal? {
        if username == Self.internalUsername {
            return acceptedInternalSecrets().contains {
                constantTimeEqual(ScramHash.sha256.hash(Array($0.utf8)), ScramHash.sha256.hash(Array(password.utf8)))
            } ? .admin : nil
        }
        // One slow check whoever the name is: a local user's name gets its own check only (a wrong password used to run
        // the admin's check too, so it took twice as long as an unknown name, which tells which names exist); the
        // admin's name and an unknown one get the admin's check.
        if username != adminUsername, let user = snapshots.read({ $0.users?.first { $0.name == username } }) {
            return authenticateLocalUser(user, password: password)
        }
        return checkAdmin(username: username, password: password) ? .admin : nil
    }

    /// SCRAM verification data for `username`, for the KV server's SASL; nil for unknown users.
    public func scramCredential(username: String, hash: ScramHash) -> ScramKeys? {
        guard let admin = snapshots.read({ $0.admin }), admin.username == username else { return nil }
        return admin.scram(hash)
    }

    /// The admin username, if initialised.
    public var adminUsername: String? { snapshots.read { $0.admin?.username } }

}
