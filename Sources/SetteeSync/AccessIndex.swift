import SetteeJSON

/// Who may read which channels, from the `access()` and `role()` calls of every document's current
/// winning revision, combined with the principals' explicit grants. A pure value the gateway keeps in
/// memory (rebuilt at startup from the grants stored with each document, `restore`).
///
/// Invariants:
/// 1. Each document contributes exactly the grants of its current winning revision: `update` replaces
///    the document's previous grants, so a grant that the new revision no longer makes is revoked.
/// 2. A grant a document keeps making keeps the sequence at which it first appeared (TimedSet rule);
///    a newly made grant carries the sequence of the revision that made it.
/// 3. `channelRoutes`/`roleRoutes` are exactly the inversion of `byDoc` (checked by the model test).
/// 4. Effective sets are the minimum, per channel (role), over every route still valid: `!` at 1,
///    explicit channels, `access()` to the user, and per role held since `g`: the role's explicit
///    channels and `access()` to `role:NAME`, each at `max(g, channel's own sequence)`.
///
/// ```
///  doc rev --access()/role()--> byDoc[docID] --inverted--> channelRoutes[principal][channel][docID]
///                                                          roleRoutes[user][role][docID]
///  Principal (admin grants) + routes --effectiveChannels--> [channel: since]
/// ```
public struct AccessIndex: Sendable, Equatable {
    /// The grants of one document's winning revision, with the sequence of each grant. Stored with
    /// the document (Sync Gateway's `_sync.access` / `_sync.role_access`).
    public struct DocGrants: Sendable, Equatable {
        /// Principal (`"jane"` or `"role:editor"`) -> channel -> sequence granted.
        public var access: [String: [String: UInt64]]
        /// User -> role name -> sequence granted.
        public var roles: [String: [String: UInt64]]

        public init(access: [String: [String: UInt64]] = [:], roles: [String: [String: UInt64]] = [:]) {
            self.access = access
            self.roles = roles
        }

        public var isEmpty: Bool { access.isEmpty && roles.isEmpty }

        /// `{"access":{"jane":{"ch":12}},"role_access":{"jane":{"editor":12}}}` (empty maps omitted).
        public func json() -> JSON {
            var m: [(String, JSON)] = []
            if !access.isEmpty { m.append(("access", Self.nested(access))) }
            if !roles.isEmpty { m.append(("role_access", Self.nested(roles))) }
            return .object(m)
        }

        /// Parses `json()`; malformed members are skipped (the document's next write rewrites them).
        public init(json: JSON) {
            self.init(access: Self.parse(json["access"]), roles: Self.parse(json["role_access"]))
        }

        private static func nested(_ map: [String: [String: UInt64]]) -> JSON {
            .object(
                map.sorted { $0.key < $1.key }.map { p, set in
                    (p, .object(set.sorted { $0.key < $1.key }.map { ($0.key, .number(Double($0.value))) }))
                })
        }

        private static func parse(_ json: JSON?) -> [String: [String: UInt64]] {
            var out: [String: [String: UInt64]] = [:]
            for (p, set) in json?.objectValue ?? [] {
                var inner: [String: UInt64] = [:]
                for (k, v) in set.objectValue ?? [] {
                    if let n = v.intValue, n >= 0 { inner[k] = UInt64(n) }
                }
                if !inner.isEmpty { out[p] = inner }
            }
            return out
        }
    }

    public private(set) var byDoc: [String: DocGrants] = [:]
    /// Principal -> channel -> granting docID -> sequence.
    private var channelRoutes: [String: [String: [String: UInt64]]] = [:]
    /// User -> role -> granting docID -> sequence.
    private var roleRoutes: [String: [String: [String: UInt64]]] = [:]

    public init() {}

    /// The grants document `docID` currently makes, if any.
    public func grants(docID: String) -> DocGrants? { byDoc[docID] }

    /// Records the grants of `docID`'s new winning revision, assigned `sequence` (replacing the document's
    /// previous grants; pass empty maps for a tombstone or a revision that grants nothing). Returns the
    /// stored grants (to persist with the document) and the principals (`"jane"`, `"role:editor"`)
    /// whose grants changed, whose feeds the gateway should wake.
    @discardableResult
    public mutating func update(
        docID: String, sequence: UInt64, access: [String: Set<String>], roles: [String: Set<String>]
    ) -> (grants: DocGrants, changed: Set<String>) {
        let old = byDoc[docID] ?? DocGrants()
        var new = DocGrants()
        for (p, channels) in access where !channels.isEmpty {
            var set: [String: UInt64] = [:]
            for c in channels { set[c] = old.access[p]?[c] ?? sequence }
            new.access[p] = set
        }
        for (u, names) in roles where !names.isEmpty {
            var set: [String: UInt64] = [:]
            for r in names { set[r] = old.roles[u]?[r] ?? sequence }
            new.roles[u] = set
        }
        let changed = replace(docID: docID, old: old, new: new)
        return (new, changed)
    }

    /// Restores grants as stored with a document (startup); returns the principals affected.
    @discardableResult
    public mutating func restore(docID: String, grants: DocGrants) -> Set<String> {
        replace(docID: docID, old: byDoc[docID] ?? DocGrants(), new: grants)
    }

    /// Forgets a document's grants (purge). Returns the principals affected.
    @discardableResult
    public mutating func remove(docID: String) -> Set<String> {
        replace(docID: docID, old: byDoc[docID] ?? DocGrants(), new: DocGrants())
    }

    private mutating func replace(docID: String, old: DocGrants, new: DocGrants) -> Set<String> {
        if old == new { return [] }
        var changed = Set<String>()
        Self.unroute(&channelRoutes, old.access, docID)
        Self.unroute(&roleRoutes, old.roles, docID)
        Self.route(&channelRoutes, new.access, docID)
        Self.route(&roleRoutes, new.roles, docID)
        for p in Set(old.access.keys).union(new.access.keys) where old.access[p] != new.access[p] {
            changed.insert(p)
        }
        for u in Set(old.roles.keys).union(new.roles.keys) where old.roles[u] != new.roles[u] { changed.insert(u) }
        byDoc[docID] = new.isEmpty ? nil : new
        return changed
    }

    private static func route(
        _ routes: inout [String: [String: [String: UInt64]]], _ grants: [String: [String: UInt64]], _ doc: String
    ) {
        for (p, set) in grants {
            for (name, seq) in set { routes[p, default: [:]][name, default: [:]][doc] = seq }
        }
    }

    private static func unroute(
        _ routes: inout [String: [String: [String: UInt64]]], _ grants: [String: [String: UInt64]], _ doc: String
    ) {
        for (p, set) in grants {
            for (name, _) in set {
                routes[p]?[name]?[doc] = nil
                if routes[p]?[name]?.isEmpty == true { routes[p]?[name] = nil }
            }
            if routes[p]?.isEmpty == true { routes[p] = nil }
        }
    }

    // MARK: Queries

    /// `access()` grants to one principal (`"jane"` or `"role:editor"`): channel -> earliest sequence.
    public func accessGrants(to principal: String) -> [String: UInt64] {
        (channelRoutes[principal] ?? [:]).compactMapValues { $0.values.min() }
    }

    /// `role()` grants to one user: role -> earliest sequence.
    public func roleGrants(to user: String) -> [String: UInt64] {
        (roleRoutes[user] ?? [:]).compactMapValues { $0.values.min() }
    }

    /// Users some document's `role()` call gives `role` (for waking their feeds when the role changes).
    public func usersGranted(role: String) -> Set<String> {
        Set(roleRoutes.compactMap { $0.value[role] != nil ? $0.key : nil })
    }

    /// A user's effective roles: explicit roles and `role()` grants, earliest sequence per role.
    public func effectiveRoles(of user: Principal) -> [String: UInt64] {
        precondition(!user.isRole, "roles have no roles: \(user.name)")
        var out = user.adminRoleSequences
        for (r, s) in roleGrants(to: user.name) { out[r] = min(out[r] ?? .max, s) }
        return out
    }

    /// A role's effective channels: its explicit channels and `access()` grants to `role:NAME`.
    public func effectiveChannels(ofRole role: Principal) -> [String: UInt64] {
        precondition(role.isRole, "\(role.name) is not a role")
        var out = role.adminChannelSequences
        for (c, s) in accessGrants(to: Names.rolePrefix + role.name) { out[c] = min(out[c] ?? .max, s) }
        return out
    }

    /// A user's effective channels with the sequence each became visible (earliest valid route wins):
    /// `!` at 1, explicit channels, `access()` grants, and the channels of every role the user holds
    /// (`role` looks roles up by name; a missing role contributes nothing).
    public func effectiveChannels(of user: Principal, role: (String) -> Principal?) -> [String: UInt64] {
        precondition(!user.isRole, "use effectiveChannels(ofRole:) for role \(user.name)")
        var out = user.adminChannelSequences
        out[ChannelAccess.publicChannel] = 1
        for (c, s) in accessGrants(to: user.name) { out[c] = min(out[c] ?? .max, s) }
        for (r, since) in effectiveRoles(of: user) {
            var roleChannels = accessGrants(to: Names.rolePrefix + r)
            if let rp = role(r), rp.isRole {
                for (c, s) in rp.adminChannelSequences { roleChannels[c] = min(roleChannels[c] ?? .max, s) }
            }
            for (c, s) in roleChannels { out[c] = min(out[c] ?? .max, max(since, s)) }
        }
        return out
    }

    /// `principal` with `channelGrants` (and for users `roleGrants`) filled in.
    public func resolved(_ principal: Principal, role: (String) -> Principal?) -> Principal {
        var p = principal
        if p.isRole {
            p.channelGrants = effectiveChannels(ofRole: p)
        } else {
            p.roleGrants = effectiveRoles(of: p)
            p.channelGrants = effectiveChannels(of: p, role: role)
        }
        return p
    }
}
