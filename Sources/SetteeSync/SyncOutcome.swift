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
