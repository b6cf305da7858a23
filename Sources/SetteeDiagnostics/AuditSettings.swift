import SetteeCore

/// The cluster-wide audit configuration, Couchbase's `/settings/audit`: stored in the cluster document, so every
/// node applies the same one (`AuditLog.apply`).
///
/// - `auditdEnabled`: whether events are written at all (Couchbase's default: off).
/// - `logPath`: the directory of `audit.log` on every node; nil means each node's own `<dataDir>/logs`. A path set
///   here names the same directory on every node (as Couchbase's does), so nodes sharing a host should keep nil.
/// - `rotateInterval`: seconds after which the live file is renamed aside (`Limits.auditRotateIntervalRange`).
/// - `rotateSize`: bytes past which it is (0 = never by size; at most `Limits.maxAuditFileBytes`).
/// - `disabled`: event ids not written (`AuditEvent.Kind.rawValue`); at most `Limits.maxAuditDisabledIds`.
/// - `disabledUsers`: users whose events are not written (Couchbase's `disabledUsers`: a user's own activity left
///   out, e.g. an application's service account), except `auditSettingsChanged`, which Couchbase does not let a
///   filter hide; at most `Limits.maxAuditDisabledUsers`. A cluster document written before this field decodes it
///   as empty.
public struct AuditSettings: Sendable, Codable, Equatable, Hashable {
    public var auditdEnabled: Bool
    public var logPath: String?
    public var rotateInterval: Int
    public var rotateSize: Int
    public var disabled: [Int]
    public var disabledUsers: [AuditUser]

    public init(
        auditdEnabled: Bool = false, logPath: String? = nil,
        rotateInterval: Int = Limits.defaultAuditRotateIntervalSeconds,
        rotateSize: Int = Limits.defaultAuditFileBytes, disabled: [Int] = [], disabledUsers: [AuditUser] = []
    ) {
        self.auditdEnabled = auditdEnabled
        self.logPath = logPath
        self.rotateInterval = rotateInterval
        self.rotateSize = rotateSize
        self.disabled = disabled
        self.disabledUsers = disabledUsers
    }

    private enum CodingKeys: String, CodingKey {
        case auditdEnabled, logPath, rotateInterval, rotateSize, disabled, disabledUsers
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        auditdEnabled = try c.decode(Bool.self, forKey: .auditdEnabled)
        logPath = try c.decodeIfPresent(String.self, forKey: .logPath)
        rotateInterval = try c.decode(Int.self, forKey: .rotateInterval)
        rotateSize = try c.decode(Int.self, forKey: .rotateSize)
        disabled = try c.decode([Int].self, forKey: .disabled)
        disabledUsers = try c.decodeIfPresent([AuditUser].self, forKey: .disabledUsers) ?? []
    }

    /// Whether an event of `kind` by `user` (domain, name) is written under these settings.
    public func records(_ kind: AuditEvent.Kind, user: (domain: String, name: String)?) -> Bool {
        guard auditdEnabled, !disabled.contains(kind.rawValue) else { return false }
        guard let user, !disabledUsers.isEmpty, kind != .auditSettingsChanged else { return true }
        return !disabledUsers.contains { $0.matches(domain: user.domain, name: user.name) }
    }

    /// The field errors of these settings as `/settings/audit` answers them (field, message), empty when valid.
    public var errors: [(String, String)] {
        var e: [(String, String)] = []
        if !Limits.auditRotateIntervalRange.contains(rotateInterval) {
            e.append(
                (
                    "rotateInterval",
                    "The value must be in range from \(Limits.auditRotateIntervalRange.lowerBound) "
                        + "to \(Limits.auditRotateIntervalRange.upperBound) seconds"
                ))
        }
        if !(0...Limits.maxAuditFileBytes).contains(rotateSize) {
            e.append(("rotateSize", "The value must be in range from 0 to \(Limits.maxAuditFileBytes)"))
        }
        if disabled.count > Limits.maxAuditDisabledIds {
            e.append(("disabled", "At most \(Limits.maxAuditDisabledIds) event ids may be disabled"))
        }
        if disabledUsers.count > Limits.maxAuditDisabledUsers {
            e.append(("disabledUsers", "At most \(Limits.maxAuditDisabledUsers) users may be disabled"))
        }
        if let logPath, !logPath.hasPrefix("/") || !LogText.isPlainName(logPath, maxLength: 4096) {
            e.append(("logPath", "The value must be an absolute path"))
        }
        return e
    }
}

/// One entry of `AuditSettings.disabledUsers`: a user name and its domain as `/settings/audit` spells them
/// (`name/local` for a user of this cluster, `name/external` for one an external directory vouches for; Settee adds
/// `name/gateway` for a gateway database's user).
public struct AuditUser: Sendable, Codable, Equatable, Hashable {
    public var name: String
    public var domain: String

    /// The domains a `disabledUsers` entry may name.
    public static let domains: Set<String> = ["local", "external", "gateway"]

    public init(name: String, domain: String) {
        self.name = name
        self.domain = domain
    }

    /// Parses one `name/domain` entry of the POST form (the last `/` separates them: a name may hold one); nil when
    /// the domain is not one of `domains`, the name is empty or longer than `Limits.maxAuditDisabledUserNameBytes`.
    public init?(formEntry: Substring) {
        guard let slash = formEntry.lastIndex(of: "/") else { return nil }
        let name = String(Self.trimmed(formEntry[..<slash]))
        let domain = String(Self.trimmed(formEntry[formEntry.index(after: slash)...]))
        guard !name.isEmpty, name.utf8.count <= Limits.maxAuditDisabledUserNameBytes, Self.domains.contains(domain)
        else {
            return nil
        }
        self.init(name: name, domain: domain)
    }

    private static func trimmed(_ s: Substring) -> Substring {
        var t = s.drop(while: { $0 == " " })
        while t.last == " " { t = t.dropLast() }
        return t
    }

    /// Whether a record's `real_userid` (domain, name) is this user. The administrator's domain `admin` counts as
    /// `local`, as Couchbase records a local administrator.
    public func matches(domain recorded: String, name recordedName: String) -> Bool {
        guard recordedName == name else { return false }
        return recorded == domain || (domain == "local" && recorded == "admin")
    }
}
