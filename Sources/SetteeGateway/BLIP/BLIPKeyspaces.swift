import SetteeCore

/// The keyspaces one `_blipsync` connection may reach (ADR 0149): the database's `GatewayDatabase` per collection
/// (ADR 0142), by the names `getCollections` uses (replication-protocol.adoc "Collections": `scope.collection`, or
/// `_default` for the default collection, as Couchbase Lite 3.1+ names them).
public struct BLIPKeyspaces: Sendable {
    /// Each served collection's database, by keyspace.
    public let byKeyspace: [Keyspace: GatewayDatabase]
    /// The database's primary keyspace (`GatewayServer.databases`: its default collection, else its first
    /// configured one): the connection's counters and log lines.
    public let primary: GatewayDatabase

    /// - Parameters:
    ///   - primary: the database's primary keyspace.
    ///   - keyspaces: every keyspace of the database (the primary's included).
    public init(primary: GatewayDatabase, keyspaces: [Keyspace: GatewayDatabase]) {
        self.primary = primary
        self.byKeyspace = keyspaces
    }

    /// A database of one keyspace, `db` (its own `keyspace`).
    public init(single db: GatewayDatabase) {
        self.init(primary: db, keyspaces: [db.keyspace: db])
    }

    /// The default collection's database; nil when the database's `scopes` leave it out.
    public var defaultCollection: GatewayDatabase? { byKeyspace[.defaultCollection] }

    /// The database a `getCollections` name resolves to: `_default` and `_default._default` are the default
    /// collection, `scope.collection` that collection; nil for a collection this database does not serve or a name
    /// of another shape (no dot beyond the one, no empty part), which `getCollections` answers null.
    public func resolve(_ name: String) -> GatewayDatabase? {
        if name == CollectionsManifest.defaultName { return defaultCollection }
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else { return nil }
        return byKeyspace[Keyspace(scope: String(parts[0]), collection: String(parts[1]))]
    }
}
