import SetteeJSON

/// `delta_sync` of a database (Sync Gateway's `DeltaSyncConfig`): whether `rev` messages on `/_blipsync` may carry a
/// JSON delta against a revision the other side has (`deltaSrc`, ADR 0125), both ways.
///
/// `{"enabled": true, "rev_max_age_seconds": 86400}`. Off unless enabled, as in Sync Gateway (an Enterprise feature
/// there, off by default).
public struct DeltaSyncConfig: Sendable, Equatable {
    /// Deltas are offered on pull and accepted on push.
    public var enabled: Bool
    /// Sync Gateway keeps the bodies of replaced revisions this long to make deltas from (`rev_max_age_seconds`,
    /// default 86400; 0 keeps none). Here a replaced body stays in the document's revision tree within a generation
    /// and byte window (`Limits.gatewayKeptAncestorBodies`, `gatewayKeptAncestorBodyBytes`) and, while deltas are
    /// active, for this many seconds instead of `old_rev_expiry_seconds` (`OldBodyRule`, ADR 0156); 0 keeps its
    /// meaning, no delta sources, so deltas off.
    public var revMaxAgeSeconds: Int

    /// Sync Gateway's `DefaultDeltaSyncRevMaxAge`.
    public static let defaultRevMaxAgeSeconds = 86_400

    public static let disabled = DeltaSyncConfig(enabled: false)

    public init(enabled: Bool, revMaxAgeSeconds: Int = DeltaSyncConfig.defaultRevMaxAgeSeconds) {
        self.enabled = enabled
        self.revMaxAgeSeconds = revMaxAgeSeconds
    }

    /// Deltas are made and accepted: enabled, with a window that keeps any replaced body.
    public var active: Bool { enabled && revMaxAgeSeconds > 0 }

    init(json: JSON, path: String) throws(ConfigError) {
        var o = try ConfigObject(json, path: path)
        enabled = try o.bool("enabled") ?? false
        revMaxAgeSeconds =
            try o.int("rev_max_age_seconds", in: 0...Int(Int32.max)) ?? DeltaSyncConfig.defaultRevMaxAgeSeconds
        try o.finish()
    }
}
