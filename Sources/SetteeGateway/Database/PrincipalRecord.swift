import SetteeJSON

/// A user or role as the bucket stores it (`_sync:user:<name>`, `_sync:role:<name>`; GUEST is the user
/// named ""). Explicit grants carry the sequence they were made at, so a later grant backfills.
struct PrincipalRecord: Sendable, Equatable {
    var name: String
    var isRole: Bool
    /// Channel -> sequence at which the admin granted it.
    var adminChannels: [String: UInt64] = [:]
    /// Role -> sequence at which the admin granted it (users only).
    var adminRoles: [String: UInt64] = [:]
    var passwordHash: String? = nil
    var email: String? = nil
    var disabled: Bool = false
    var sequence: UInt64 = 0
    var recentSequences: [UInt64] = []

    init(name: String, isRole: Bool) {
        self.name = name
        self.isRole = isRole
    }

    static func key(_ name: String, isRole: Bool) -> String {
        (isRole ? rolePrefix : userPrefix) + name
    }

    private static let userPrefix = "_sync:user:"
    private static let rolePrefix = "_sync:role:"

    /// The user or role an item key names (the inverse of `key(_:isRole:)`), or nil for any other key.
    static func parse(key: String) -> (name: String, isRole: Bool)? {
        if key.hasPrefix(userPrefix) { return (String(key.dropFirst(userPrefix.count)), false) }
        if key.hasPrefix(rolePrefix) { return (String(key.dropFirst(rolePrefix.count)), true) }
        return nil
    }

    var key: String { Self.key(name, isRole: isRole) }

    func json() -> JSON {
        var m: [(String, JSON)] = [("name", .string(name))]
        m.append(("admin_channels", SyncMeta.grantsJSON(["": adminChannels])[""] ?? .object([])))
        if !isRole {
            m.append(("admin_roles", SyncMeta.grantsJSON(["": adminRoles])[""] ?? .object([])))
            if let passwordHash { m.append(("passwordhash", .string(passwordHash))) }
            if let email { m.append(("email", .string(email))) }
            if disabled { m.append(("disabled", .bool(true))) }
        }
        m.append(("sequence", .number(Double(sequence))))
        m.append(("recent_sequences", .array(recentSequences.map { .number(Double($0)) })))
        return .object(m)
    }

    init?(json: JSON, isRole: Bool) {
        guard let name = json["name"]?.stringValue else { return nil }
        self.name = name
        self.isRole = isRole
        adminChannels = SyncMeta.parseGrants(.object([("", json["admin_channels"] ?? .object([]))]))[""] ?? [:]
        adminRoles = SyncMeta.parseGrants(.object([("", json["admin_roles"] ?? .object([]))]))[""] ?? [:]
        passwordHash = json["passwordhash"]?.stringValue
        email = json["email"]?.stringValue
        disabled = json["disabled"]?.boolValue ?? false
        sequence = UInt64(max(0, json["sequence"]?.intValue ?? 0))
        recentSequences = (json["recent_sequences"]?.arrayValue ?? []).compactMap {
            $0.intValue.map { UInt64(max(0, $0)) }
        }
    }
}
