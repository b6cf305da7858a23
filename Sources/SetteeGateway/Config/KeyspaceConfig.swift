import SetteeCore
import SetteeJSON

/// One collection a gateway database serves, as Sync Gateway 3.1 names it: a scope and a collection of the bucket
/// (`_default`.`_default` is the bucket's default collection, the only one a database without `scopes` serves).
public struct Keyspace: Sendable, Hashable, CustomStringConvertible {
    public var scope: String
    public var collection: String

    public init(scope: String, collection: String) {
        self.scope = scope
        self.collection = collection
    }

    /// `_default._default`.
    public static let defaultCollection = Keyspace(
        scope: CollectionsManifest.defaultName, collection: CollectionsManifest.defaultName)

    public var isDefault: Bool { self == Self.defaultCollection }

    /// `scope.collection`.
    public var description: String { "\(scope).\(collection)" }

    /// The keyspace's name in a URL path for database `db` (Sync Gateway's short forms): `db` for the default
    /// collection, `db.collection` for a collection of the default scope, `db.scope.collection` otherwise.
    public func pathName(db: String) -> String {
        if isDefault { return db }
        if scope == CollectionsManifest.defaultName { return "\(db).\(collection)" }
        return "\(db).\(scope).\(collection)"
    }

    /// Splits the first segment of a URL path into a database name and the keyspace it names (Sync Gateway 3.1):
    /// `db` is `_default._default`, `db.c` is collection `c` of scope `_default`, `db.s.c` is `s.c`. Nil for more
    /// than two dots or an empty part. A database name never contains a dot (`DatabaseConfig.isValidName`), so the
    /// split is unambiguous.
    public static func parsePath(_ segment: String) -> (db: String, keyspace: Keyspace)? {
        let parts = segment.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard !parts.contains("") else { return nil }
        switch parts.count {
        case 1: return (parts[0], .defaultCollection)
        case 2: return (parts[0], Keyspace(scope: CollectionsManifest.defaultName, collection: parts[1]))
        case 3: return (parts[0], Keyspace(scope: parts[1], collection: parts[2]))
        default: return nil
        }
    }
}

/// What a database's config says of one collection (`scopes.S.collections.C`): its sync function. A collection
/// without `sync` runs the default function (`channel(doc.channels)`), as Sync Gateway 3.1 does for a named one.
public struct CollectionConfig: Sendable, Equatable {
    public var keyspace: Keyspace
    public var sync: String?
    /// `import_filter`: a JavaScript function of a document written by a KV client that returns `true` when the
    /// gateway is to import it (Sync Gateway 3.1's per-collection import filter); nil imports every document.
    public var importFilter: String?

    public init(keyspace: Keyspace, sync: String? = nil, importFilter: String? = nil) {
        self.keyspace = keyspace
        self.sync = sync
        self.importFilter = importFilter
    }

    /// Parses a database entry's `scopes` object (Sync Gateway 3.1's shape:
    /// `{"s": {"collections": {"c": {"sync": "function(doc){...}"}}}}`). Rules, each a `ConfigError` at its path: one
    /// scope per database (Sync Gateway 3.1's rule); scope and collection names as the data service takes them
    /// (`CollectionsManifest.isValidName`, or `_default`); at least one collection and at most
    /// `Limits.gatewayMaxCollectionsPerDatabase`; `_default` scope's `_default` collection only there; only `sync` in
    /// a collection besides `sync` and `import_filter`.
    static func parseScopes(_ json: JSON, path: String) throws(ConfigError) -> [CollectionConfig] {
        guard case .object(let scopes) = json else { throw ConfigError(path: path, message: "must be an object") }
        guard scopes.count == 1, let (scopeName, scopeJSON) = scopes.first else {
            throw ConfigError(path: path, message: "must name exactly one scope (Sync Gateway 3.1's rule)")
        }
        let scopePath = "\(path).\(scopeName)"
        guard scopeName == CollectionsManifest.defaultName || CollectionsManifest.isValidName(scopeName) else {
            throw ConfigError(path: scopePath, message: "invalid scope name")
        }
        var scope = try ConfigObject(scopeJSON, path: scopePath)
        guard let members = try scope.objectMembers("collections"), !members.isEmpty else {
            throw ConfigError(path: scope.child("collections"), message: "must name at least one collection")
        }
        try scope.finish()
        guard members.count <= Limits.gatewayMaxCollectionsPerDatabase else {
            throw ConfigError(
                path: scope.child("collections"),
                message: "names \(members.count) collections; at most \(Limits.gatewayMaxCollectionsPerDatabase)")
        }
        var out: [CollectionConfig] = []
        for m in members {
            let isDefault = scopeName == CollectionsManifest.defaultName && m.name == CollectionsManifest.defaultName
            guard isDefault || CollectionsManifest.isValidName(m.name) else {
                throw ConfigError(path: m.path, message: "invalid collection name")
            }
            let keyspace = Keyspace(scope: scopeName, collection: m.name)
            guard !out.contains(where: { $0.keyspace == keyspace }) else {
                throw ConfigError(path: m.path, message: "named twice")
            }
            var c = try ConfigObject(m.value, path: m.path)
            let sync = try c.string("sync")
            let importFilter = try c.string("import_filter")
            try c.finish()
            out.append(CollectionConfig(keyspace: keyspace, sync: sync, importFilter: importFilter))
        }
        return out
    }
}
