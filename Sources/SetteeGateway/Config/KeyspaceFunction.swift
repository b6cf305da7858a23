import SetteeJSON

/// A JavaScript function a keyspace's config holds, which Sync Gateway 3.x reads and replaces on the admin port at
/// `/{keyspace}/_config/sync` and `/{keyspace}/_config/import_filter` (its "database configuration" REST API; the
/// body is the source, `Content-Type: application/javascript`). The raw value is the path segment and the config
/// field alike.
public enum KeyspaceFunction: String, Sendable, CaseIterable {
    /// The collection's sync function (absent: the default, `channel(doc.channels)`).
    case sync
    /// The collection's import filter (absent: every KV write is imported).
    case importFilter = "import_filter"
}

extension DatabaseConfig {
    /// The source of `function` for `keyspace` as the entry in force gives it; nil when none is configured (or the
    /// database does not serve `keyspace`).
    public func source(of function: KeyspaceFunction, for keyspace: Keyspace) -> String? {
        guard let c = keyspaces.first(where: { $0.keyspace == keyspace }) else { return nil }
        switch function {
        case .sync: return c.sync
        case .importFilter: return c.importFilter
        }
    }

    /// This entry with `function` of `keyspace` set to `source` (nil removes it: the default sync function, no import
    /// filter), written where the entry keeps it, so `GET /db/_config` shows it and `PUT /db/_config` keeps it: the
    /// top-level field for a database without `scopes` (its default collection), else
    /// `scopes.S.collections.C.<field>`. The result is parsed again by the same rules as the file's (so a field the
    /// entry already had under another letter case is replaced, not doubled). A keyspace the entry does not name
    /// is a `ConfigError`; the source itself is not compiled here (`GatewayDatabase.reconfigure` does that).
    public func replacing(
        _ function: KeyspaceFunction, of keyspace: Keyspace, with source: String?
    ) throws(ConfigError) -> DatabaseConfig {
        let path = "databases.\(name)"
        guard keyspaces.contains(where: { $0.keyspace == keyspace }) else {
            throw ConfigError(path: path, message: "keyspace \(keyspace) is not one of the database's")
        }
        guard case .object(var members) = self.source else {
            throw ConfigError(path: path, message: "must be an object")
        }
        let value = source.map(JSON.string)
        if collections == nil {
            Self.setMember(&members, function.rawValue, value)
        } else {
            // scopes.S.collections.C: scope and collection names are exact, field names case-insensitive (as read).
            guard let s = Self.memberIndex(members, "scopes"), case .object(var scopes) = members[s].1,
                let sc = scopes.firstIndex(where: { $0.0 == keyspace.scope }), case .object(var scope) = scopes[sc].1,
                let cs = Self.memberIndex(scope, "collections"), case .object(var collections) = scope[cs].1,
                let c = collections.firstIndex(where: { $0.0 == keyspace.collection }),
                case .object(var collection) = collections[c].1
            else {
                throw ConfigError(path: "\(path).scopes", message: "keyspace \(keyspace) is not one of the database's")
            }
            Self.setMember(&collection, function.rawValue, value)
            collections[c].1 = .object(collection)
            scope[cs].1 = .object(collections)
            scopes[sc].1 = .object(scope)
            members[s].1 = .object(scopes)
        }
        return try DatabaseConfig(name: name, json: .object(members), path: path)
    }

    /// The index of member `key` matched case-insensitively, as `ConfigObject` reads fields.
    private static func memberIndex(_ members: [(String, JSON)], _ key: String) -> Int? {
        members.firstIndex { $0.0.lowercased() == key }
    }

    /// Sets (or, `value` nil, removes) field `key`, replacing every member that names it in any letter case.
    private static func setMember(_ members: inout [(String, JSON)], _ key: String, _ value: JSON?) {
        let first = memberIndex(members, key)
        members.removeAll { $0.0.lowercased() == key }
        guard let value else { return }
        // In the first one's place (every member before it was kept), else at the end.
        members.insert((key, value), at: first ?? members.count)
    }
}
