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
public struct AuditSettings: Sendable, Codable, Equatable, Hashable {
    public var auditdEnabled: Bool
    public var logPath: String?
    public var rotateInterval: Int
    public var rotateSize: Int
    public var disabled: [Int]

    public init(
        auditdEnabled: Bool = false, logPath: String? = nil,
        rotateInterval: Int = Limits.defaultAuditRotateIntervalSeconds,
        rotateSize: Int = Limits.defaultAuditFileBytes, disabled: [Int] = []
    ) {
        self.auditdEnabled = auditdEnabled
        self.logPath = logPath
        self.rotateInterval = rotateInterval
        self.rotateSize = rotateSize
        self.disabled = disabled
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
        if let logPath, !logPath.hasPrefix("/") || !LogText.isPlainName(logPath, maxLength: 4096) {
            e.append(("logPath", "The value must be an absolute path"))
        }
        return e
    }
}
