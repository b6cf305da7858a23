/// What one run of the sync function decided for a revision.
public struct SyncOutcome: Sendable, Equatable {
    /// The revision's channels. A `*` among them collapses the set to `["*"]`.
    public var channels: Set<String>
    /// `access()` grants: principal (`"jane"` or `"role:editor"`) -> channels (`*` stripped, empty sets dropped).
    public var access: [String: Set<String>]
    /// `role()` grants: user -> role names (without `role:`).
    public var roles: [String: Set<String>]
    /// `expiry()`: seconds, relative (up to 30 days) or absolute Unix time, as the memcached rule reads it.
    public var expiry: UInt32?

    public init(
        channels: Set<String> = [], access: [String: Set<String>] = [:], roles: [String: Set<String>] = [:],
        expiry: UInt32? = nil
    ) {
        self.channels = channels
        self.access = access
        self.roles = roles
        self.expiry = expiry
    }
}

/// A write the sync function refused, with the HTTP status it maps to: 403 (`throw({forbidden})` or a
/// failed `require*`), 401 (`throw({unauthorized})`), 400 (an illegal channel name), 500 (any other
/// exception, a runaway function stopped by the watchdog, malformed `access()`/`role()` arguments),
/// 503 (the function's worker pool is closed or saturated).
public struct SyncRejection: Error, Sendable, Equatable, CustomStringConvertible {
    public var status: Int
    public var reason: String

    public init(status: Int, reason: String) {
        self.status = status
        self.reason = reason
    }

    public var description: String { "\(status) \(reason)" }

    /// The reason Sync Gateway gives for an unexpected exception.
    public static let exceptionReason = "Exception in JS sync function"
}
