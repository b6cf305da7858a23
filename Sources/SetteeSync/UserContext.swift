/// Who is writing (or reading), as the sync function and the access checks see it.
///
/// `name == nil` is the admin port or an import: every `require*` call in the sync function is a no-op.
/// `name == ""` is GUEST (validated like any user, as Sync Gateway does).
public struct UserContext: Sendable, Equatable {
    public var name: String?
    /// Role names without the `role:` prefix.
    public var roles: Set<String>
    /// The user's effective channels (what `requireAccess` checks; `*` is not a wildcard there).
    public var channels: Set<String>

    public init(name: String?, roles: Set<String> = [], channels: Set<String> = []) {
        self.name = name
        self.roles = roles
        self.channels = channels
    }

    /// The admin port / import context: no validation.
    public static let admin = UserContext(name: nil)

    /// True for the admin/import context.
    public var isAdmin: Bool { name == nil }
}
