import SetteeCore

/// kv_engine's SystemXattrRead / SystemXattrWrite privileges: what a requester may do with system extended
/// attributes (names starting with `_`, such as the gateway's `_sync`). The shell derives them from the
/// connection's roles (SetteeAuth `BucketGrants`); the decision of what they allow stays pure (ADR 0029).
///
/// - A lookup of a system attribute without `read` fails that path with EACCESS (0x24); `$XTOC` lists only
///   user attributes; virtual attributes (`$document`, ...) and user attributes need nothing extra.
/// - A mutation request with a system-attribute spec, without `write`, is refused as a whole with EACCESS
///   before the document is read.
public struct SystemXattrPrivileges: OptionSet, Sendable, Equatable {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let read = SystemXattrPrivileges(rawValue: 0x01)
    public static let write = SystemXattrPrivileges(rawValue: 0x02)
    public static let all: SystemXattrPrivileges = [.read, .write]
}

extension SubdocRequest {
    /// EACCESS, the status of a path or a request the requester's privileges do not cover.
    public static let accessDeniedStatus: UInt16 = 0x24

    /// Whether `spec` reaches a system attribute: an XATTR path whose attribute name starts with `_`. A path that
    /// does not parse reaches nothing (it fails on its own with PATH_EINVAL).
    static func reachesSystemXattr(_ spec: SubdocSpec) -> Bool {
        guard spec.flags.contains(.xattrPath),
            case .key(let name)? = try? SubdocPath.parse(spec.path, xattr: true).components.first
        else { return false }
        return SubdocXattr.isSystem(name)
    }

    /// EACCESS when this is a mutation that edits a system attribute and `privileges` lack `write`, else nil.
    /// Checked before the document is read, as kv_engine checks privileges before it fetches.
    public func systemXattrRefusal(_ privileges: SystemXattrPrivileges) -> UInt16? {
        guard isMutation, !privileges.contains(.write), specs.contains(where: Self.reachesSystemXattr) else {
            return nil
        }
        return Self.accessDeniedStatus
    }
}
