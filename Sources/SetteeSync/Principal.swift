import SetteeCore
import SetteeJSON

/// A user or (`isRole`) a role, as the gateway stores it under `_sync:user:NAME` / `_sync:role:NAME`.
///
/// GUEST is the user whose internal `name` is `""` (the REST API calls it `GUEST`). Explicit channels and
/// roles carry the sequence at which the admin granted them (Sync Gateway's TimedSet), so a later grant
/// can backfill a user's `_changes`; `channelGrants`/`roleGrants` are the computed effective sets the
/// gateway fills from its `AccessIndex`.
public struct Principal: Sendable, Equatable {
    /// The REST name of the guest user.
    public static let guestRESTName = "GUEST"

    public var name: String
    public var isRole: Bool
    /// bcrypt hash (`$2b$10$...`); nil: no password (cannot log in with one).
    public var passwordHash: String?
    /// Explicit channels -> sequence at which the admin granted each.
    public var adminChannelSequences: [String: UInt64]
    /// Explicit roles (users only) -> sequence at which the admin granted each.
    public var adminRoleSequences: [String: UInt64]
    public var disabled: Bool
    public var email: String?
    /// Bumped (to a freshly allocated gateway sequence) on every change; drives the `_user/` rows.
    public var sequence: UInt64
    /// Computed: every channel the principal may read -> sequence at which it became visible.
    public var channelGrants: [String: UInt64]
    /// Computed (users): every role the user has -> sequence at which it was granted.
    public var roleGrants: [String: UInt64]

    public init(name: String, isRole: Bool, sequence: UInt64 = 0) {
        self.name = name
        self.isRole = isRole
        self.passwordHash = nil
        self.adminChannelSequences = [:]
        self.adminRoleSequences = [:]
        self.disabled = false
        self.email = nil
        self.sequence = sequence
        self.channelGrants = [:]
        self.roleGrants = [:]
    }

    /// Explicit channels. Setting keeps the grant sequence of channels already present; new ones are
    /// granted at `sequence` (so bump `sequence` first).
    public var adminChannels: Set<String> {
        get { Set(adminChannelSequences.keys) }
        set { adminChannelSequences = Self.retime(adminChannelSequences, newValue, at: sequence) }
    }

    /// Explicit roles (bare names); same sequence rule as `adminChannels`.
    public var adminRoles: Set<String> {
        get { Set(adminRoleSequences.keys) }
        set { adminRoleSequences = Self.retime(adminRoleSequences, newValue, at: sequence) }
    }

    private static func retime(_ old: [String: UInt64], _ new: Set<String>, at seq: UInt64) -> [String: UInt64] {
        var out: [String: UInt64] = [:]
        for n in new { out[n] = old[n] ?? seq }
        return out
    }

    /// The name the REST API shows (`GUEST` for the guest user).
    public var restName: String { !isRole && name.isEmpty ? Self.guestRESTName : name }

    /// The internal name for a REST name (`GUEST` is `""` for users).
    public static func internalName(restName: String, isRole: Bool) -> String {
        !isRole && restName == guestRESTName ? "" : restName
    }

    public var isGuest: Bool { !isRole && name.isEmpty }

    /// Every channel the principal reads: computed grants, explicit channels and, for users, `!`.
    public var allChannels: Set<String> {
        var all = Set(channelGrants.keys).union(adminChannelSequences.keys)
        if !isRole { all.insert(ChannelAccess.publicChannel) }
        return all
    }

    /// Every role of a user: computed grants and explicit roles.
    public var allRoles: Set<String> { Set(roleGrants.keys).union(adminRoleSequences.keys) }

    /// The context the sync function and the access checks use for this user.
    public func userContext() -> UserContext {
        UserContext(name: name, roles: allRoles, channels: allChannels)
    }

    // MARK: Passwords

    /// bcrypt-checks `password` (tens of milliseconds: off event loops). A disabled user, a role or a
    /// principal without a password never matches.
    public func checkPassword(_ password: String) -> Bool {
        guard !isRole, !disabled, let hash = passwordHash else { return false }
        return PasswordHash.check(password, against: hash)
    }

    /// A new bcrypt hash (cost `Limits.bcryptCost`).
    public static func hashPassword(_ password: String) -> String? { PasswordHash.hash(password) }

    // MARK: JSON

    /// `includeSecrets: true`: the storage form (round-trips through `init(json:)`, carries the bcrypt hash
    /// and the TimedSets). `false`: the admin REST form (`name, admin_channels, all_channels, email,
    /// disabled, admin_roles, roles`; never the password or its hash).
    public func json(includeSecrets: Bool) -> JSON {
        var m: [(String, JSON)] = []
        if includeSecrets {
            m.append(("name", .string(name)))
            if isRole { m.append(("is_role", .bool(true))) }
            m.append(("sequence", .number(Double(sequence))))
            m.append(("admin_channels", Self.timed(adminChannelSequences)))
            if !isRole { m.append(("admin_roles", Self.timed(adminRoleSequences))) }
            m.append(("all_channels", Self.timed(channelGrants)))
            if !isRole { m.append(("rolesSince", Self.timed(roleGrants))) }
            if let passwordHash { m.append(("passwordhash_bcrypt", .string(passwordHash))) }
            if let email { m.append(("email", .string(email))) }
            if disabled { m.append(("disabled", .bool(true))) }
            return .object(m)
        }
        m.append(("name", .string(restName)))
        m.append(("admin_channels", Self.list(adminChannels)))
        m.append(("all_channels", Self.list(allChannels)))
        if !isRole {
            if let email { m.append(("email", .string(email))) }
            if disabled { m.append(("disabled", .bool(true))) }
            m.append(("admin_roles", Self.list(adminRoles)))
            m.append(("roles", Self.list(allRoles)))
        }
        return .object(m)
    }

    /// Parses the storage form (`json(includeSecrets: true)`).
    public init(json: JSON) throws(CouchError) {
        guard json.objectValue != nil, let name = json["name"]?.stringValue else {
            throw .badRequest("principal document without a name")
        }
        self.init(name: name, isRole: json["is_role"]?.boolValue ?? false)
        guard let seq = json["sequence"].map({ $0.intValue }) ?? 0, seq >= 0 else {
            throw .badRequest("principal \(name): bad sequence")
        }
        sequence = UInt64(seq)
        adminChannelSequences = try Self.parseTimed(json["admin_channels"], "admin_channels", at: sequence)
        adminRoleSequences = try Self.parseTimed(json["admin_roles"], "admin_roles", at: sequence)
        channelGrants = try Self.parseTimed(json["all_channels"], "all_channels", at: sequence)
        roleGrants = try Self.parseTimed(json["rolesSince"], "rolesSince", at: sequence)
        passwordHash = json["passwordhash_bcrypt"]?.stringValue
        email = json["email"]?.stringValue
        disabled = json["disabled"]?.boolValue ?? false
    }

    private static func timed(_ set: [String: UInt64]) -> JSON {
        .object(set.sorted { $0.key < $1.key }.map { ($0.key, .number(Double($0.value))) })
    }

    private static func list(_ set: Set<String>) -> JSON { .array(set.sorted().map { .string($0) }) }

    /// A TimedSet object, or (leniently) an array of names all at `seq`.
    private static func parseTimed(_ json: JSON?, _ field: String, at seq: UInt64) throws(CouchError)
        -> [String: UInt64]
    {
        guard let json, !json.isNull else { return [:] }
        var out: [String: UInt64] = [:]
        if let members = json.objectValue {
            for (k, v) in members {
                guard let n = v.intValue, n >= 0 else { throw .badRequest("\(field): \(k) has no sequence") }
                out[k] = UInt64(n)
            }
        } else if let items = json.arrayValue {
            for item in items {
                guard let s = item.stringValue else { throw .badRequest("\(field) must hold strings") }
                out[s] = seq
            }
        } else {
            throw .badRequest("\(field) must be an object or an array")
        }
        return out
    }
}
