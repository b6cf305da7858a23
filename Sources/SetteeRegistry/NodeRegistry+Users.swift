import Foundation
import Logging
import SetteeAuth
import SetteeClusterMap
import SetteeControl
import SetteeCore
import SetteeStorage
import Synchronization

/// A local RBAC user as the metadata file stores it: roles as Couchbase spells them and, like the
/// admin, only salted per-mechanism SCRAM keys (never the password).
struct StoredLocalUser: Codable, Sendable, Equatable {
    var name: String
    var fullName: String
    var roles: [String]
    var credential: StoredAdminCredential
    /// `YYYY-MM-DD` of the last password change (Couchbase's `password_change_date`).
    var passwordChangeDate: String

    var parsedRoles: [Role] { roles.compactMap { Role(parsing: Substring($0)) } }
}

extension NodeRegistry {
    /// A local user as the RBAC API shows it.
    public struct LocalUser: Sendable, Equatable {
        public var name: String
        public var fullName: String
        public var roles: [Role]
        public var passwordChangeDate: String
    }

    /// Why a user change was refused.
    public enum UserError: Error, Equatable, Sendable {
        /// Field name → message, as Couchbase's `{"errors":{...}}` body has them.
        case invalid([String: String])
        case notFound
    }

    /// Every local user, sorted by name.
    public var localUsers: [LocalUser] {
        snapshots.read { $0.users ?? [] }.map(Self.publicUser).sorted { $0.name < $1.name }
    }

    public func localUser(named name: String) -> LocalUser? {
        snapshots.read { $0.users?.first { $0.name == name } }.map(Self.publicUser)
    }

    private static func publicUser(_ u: StoredLocalUser) -> LocalUser {
        LocalUser(name: u.name, fullName: u.fullName, roles: u.parsedRoles, passwordChangeDate: u.passwordChangeDate)
    }

    /// Creates or replaces a local user. `password` nil keeps an existing user's password (a new user
    /// needs one). `claim`: the epoch the new config is committed in (`takeRevision`). Slow (PBKDF2 for three
    /// mechanisms) and blocking: call it off event loops.
    public func upsertUser(
        name: String, fullName: String, password: String?, roles: [Role], claim: EpochClaim? = nil
    ) throws {
        if let problem = Self.invalidUsername(name) { throw UserError.invalid(["name": problem]) }
        if name == adminUsername || name == Self.internalUsername {
            throw UserError.invalid(["name": "Username already used by the administrator."])
        }
        if let password, password.count < 6 {
            throw UserError.invalid(["password": "The password must be at least 6 characters long."])
        }
        let credential = password.map { StoredAdminCredential.make(username: name, password: $0) }
        try mutations.withLock { _ in
            var metadata = snapshots.metadata
            var users = metadata.users ?? []
            let roleNames = roles.map(\.description)
            if let i = users.firstIndex(where: { $0.name == name }) {
                users[i].fullName = fullName
                users[i].roles = roleNames
                if let credential {
                    users[i].credential = credential
                    users[i].passwordChangeDate = Self.today()
                }
            } else {
                guard let credential else { throw UserError.invalid(["password": "Password is required."]) }
                users.append(
                    StoredLocalUser(
                        name: name, fullName: fullName, roles: roleNames, credential: credential,
                        passwordChangeDate: Self.today()))
            }
            metadata.users = users
            // Users travel in the cluster document: a new revision makes the other nodes adopt it.
            try takeRevision(&metadata, claim: claim)
            try commit(metadata)
        }
        logger.notice(
            "local user saved",
            metadata: ["user": "\(LogText.userData(name))", "roles": "\(roles.map(\.description))"])
    }

    /// Removes a local user; throws `UserError.notFound` if there is none by that name. `claim`: the epoch the new
    /// config is committed in (`takeRevision`). Blocking.
    public func deleteUser(name: String, claim: EpochClaim? = nil) throws {
        try mutations.withLock { _ in
            var metadata = snapshots.metadata
            guard let i = metadata.users?.firstIndex(where: { $0.name == name }) else { throw UserError.notFound }
            metadata.users?.remove(at: i)
            try takeRevision(&metadata, claim: claim)
            try commit(metadata)
        }
        logger.notice("local user deleted", metadata: ["user": "\(LogText.userData(name))"])
    }

    /// PLAIN / HTTP Basic check of a local user as `authenticate` found it in the metadata (PBKDF2 on the first
    /// success for given credentials: call it off event loops; one HMAC after, `VerifiedCredentials`).
    func authenticateLocalUser(_ user: StoredLocalUser, password: String) -> Principal? {
        let ok = verifyCached(.user(user.name), user.credential, username: user.name, password: password) { m in
            m.users?.first { $0.name == user.name }?.credential == user.credential
        }
        guard ok else { return nil }
        return .user(user.name, roles: user.parsedRoles)
    }

    /// SCRAM keys and the principal a successful SCRAM login as `username` becomes: the admin, a local user,
    /// or the internal user (whose keys derive from the cluster's secret; `alsoAccept` holds the previous
    /// secret's during a rotation's grace period); nil for unknown users.
    public func scramLogin(
        username: String, hash: ScramHash
    ) -> (keys: ScramKeys, alsoAccept: [ScramKeys], principal: Principal)? {
        if username == Self.internalUsername {
            return internalScramKeys(hash: hash).map { ($0.keys, $0.alsoAccept, .admin) }
        }
        let (admin, user) = snapshots.read { m in (m.admin, m.users?.first { $0.name == username }) }
        let found: (StoredAdminCredential, Principal)
        if let admin, admin.username == username {
            found = (admin, .admin)
        } else if let user {
            found = (user.credential, .user(user.name, roles: user.parsedRoles))
        } else {
            return nil
        }
        guard let keys = found.0.scram(hash) else { return nil }
        return (keys, [], found.1)
    }

    /// The roles local user `name` holds now, as a login would resolve them; nil when a login by that name would not
    /// make this user (deleted, or the name is now the admin's or the internal user's). One short hold of the state
    /// lock and no password check: KV connections call it on their event loop when `usersGeneration` moved.
    public func currentRoles(ofUser name: String) -> [Role]? {
        let names = snapshots.read { m -> [String]? in
            guard name != Self.internalUsername, m.admin?.username != name else { return nil }
            return m.users?.first { $0.name == name }?.roles
        }
        return names?.compactMap { Role(parsing: Substring($0)) }
    }

    /// Couchbase's username rule: 1-128 characters, none of `()<>@,;:\"/[]?={}`, no control characters.
    static func invalidUsername(_ name: String) -> String? {
        let forbidden = Set("()<>@,;:\\\"/[]?={}")
        guard !name.isEmpty, name.count <= 128,
            !name.contains(where: {
                forbidden.contains($0) || $0.isWhitespace && $0 != " " || $0.asciiValue.map { $0 < 32 } == true
            })
        else {
            return "The username must not be empty, longer than 128 characters or contain any of ()<>@,;:\\\"/[]?={}"
        }
        return nil
    }

    private static func today() -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyy-MM-dd"
        return f.string(from: Date())
    }
}
