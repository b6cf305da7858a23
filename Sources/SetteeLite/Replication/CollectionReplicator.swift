import SetteeReplication

/// What one collection of a `ReplicatorConfiguration` replicates (Couchbase Lite 3.1's `CollectionConfiguration`).
public struct CollectionConfiguration: Sendable, Equatable {
    /// Pull only the documents in these channels (the gateway's `sync_gateway/bychannel` filter); pushes are not
    /// filtered by channel, as in Couchbase Lite (a Lite database does not know its documents' channels).
    public var channels: [String]?
    /// Push and pull only the documents with these ids.
    public var documentIDs: [String]?

    /// Both filters at once are refused when the replicator is made: the CouchDB protocol's `_changes` takes one.
    public init(channels: [String]? = nil, documentIDs: [String]? = nil) {
        self.channels = channels
        self.documentIDs = documentIDs
    }
}

/// Which ways a `CollectionsReplicator` replicates (Couchbase Lite's `ReplicatorType`).
public enum ReplicatorType: Sendable, Equatable {
    case push, pull, pushAndPull
}

/// The other side of a `CollectionsReplicator`.
public enum ReplicationTarget: Sendable {
    /// A gateway (or CouchDB-protocol) database URL, `http(s)://host:port/db`: each collection replicates with the
    /// keyspace `db.scope.collection` (the default collection with `db` itself), as Sync Gateway 3.1 serves them.
    case url(String)
    /// Another local database (Couchbase Lite's `DatabaseEndpoint`): each collection with its namesake there,
    /// which must exist.
    case database(Database)
}

/// A replicator over several collections of one database, each with its own filters (Couchbase Lite 3.1's
/// `ReplicatorConfiguration(collections:)`, docs/adr/0150).
public struct ReplicatorConfiguration: Sendable {
    public var target: ReplicationTarget
    public var replicatorType: ReplicatorType = .pushAndPull
    public var continuous = false
    public var authenticator: ReplicationAuthenticator = .none
    /// The collections, in the order they were added, each with its configuration.
    public private(set) var collections: [(collection: DatabaseCollection, configuration: CollectionConfiguration)] =
        []

    /// A configuration over `collections`, each with `configuration` (change one with `addCollection`).
    public init(
        collections: [DatabaseCollection] = [], configuration: CollectionConfiguration = CollectionConfiguration(),
        target: ReplicationTarget
    ) {
        self.target = target
        for c in collections { addCollection(c, configuration: configuration) }
    }

    /// Adds `collection` with `configuration`, or replaces the configuration of a collection already added.
    public mutating func addCollection(
        _ collection: DatabaseCollection, configuration: CollectionConfiguration = CollectionConfiguration()
    ) {
        if let i = collections.firstIndex(where: { $0.collection == collection }) {
            collections[i].configuration = configuration
        } else {
            collections.append((collection, configuration))
        }
    }
}

/// Runs a `ReplicatorConfiguration`: one `Replicator` per collection and direction, each with its own checkpoint
/// (its id is made from the two endpoints' identities, which name the collection and the keyspace). A pull of a
/// collection is filtered by its `channels` or `documentIDs`, a push by its `documentIDs`.
///
/// Over `http(s)` only: BLIP's collection-indexed messages (`getCollections`) are another change's.
public final class CollectionsReplicator: Sendable {
    public let configuration: ReplicatorConfiguration
    /// One replicator per collection and direction: `collection` is `scope.name`.
    public let replicators: [(collection: String, type: ReplicatorType, replicator: Replicator)]

    /// Makes the replicators (none is started). `invalid` for a `ws(s)` URL, a collection of another database, a
    /// target database without the collection, or a collection given both filters.
    public init(_ configuration: ReplicatorConfiguration) throws(ReplicationError) {
        self.configuration = configuration
        var made: [(collection: String, type: ReplicatorType, replicator: Replicator)] = []
        for (collection, config) in configuration.collections {
            if config.channels != nil && config.documentIDs != nil {
                throw .invalid("\(collection.fullName): channels and documentIDs cannot both filter one collection")
            }
            if let first = configuration.collections.first, first.collection.database !== collection.database {
                throw .invalid("\(collection.fullName) belongs to another database than the configuration's")
            }
            let local = LocalEndpoint(collection)
            let remote = try Self.remote(for: collection, configuration)
            let pullFilter: ReplicationFilter? =
                config.documentIDs.map { .docIDs($0) } ?? config.channels.map { .channels($0) }
            let pushFilter: ReplicationFilter? = config.documentIDs.map { .docIDs($0) }
            if configuration.replicatorType != .pull {
                let options = ReplicatorOptions(continuous: configuration.continuous, filter: pushFilter)
                made.append(
                    (collection.fullName, .push, Replicator(source: local, target: remote, options: options)))
            }
            if configuration.replicatorType != .push {
                let options = ReplicatorOptions(continuous: configuration.continuous, filter: pullFilter)
                made.append(
                    (collection.fullName, .pull, Replicator(source: remote, target: local, options: options)))
            }
        }
        replicators = made
    }

    /// The keyspace URL of `collection` under the database URL `url`: `url` itself for the default collection,
    /// else `url.scope.collection` (Sync Gateway 3.1's keyspace path segment); a query (`?cert=sha256:...`) stays
    /// at the end.
    public static func keyspaceURL(_ url: String, scope: String, collection: String) -> String {
        var base = url
        var query = ""
        if let q = base.firstIndex(of: "?") {
            query = String(base[q...])
            base = String(base[..<q])
        }
        while base.hasSuffix("/") { base.removeLast() }
        if scope == Database.defaultScope && collection == Database.defaultCollectionName { return base + query }
        return "\(base).\(scope).\(collection)" + query
    }

    private static func remote(
        for collection: DatabaseCollection, _ configuration: ReplicatorConfiguration
    ) throws(ReplicationError) -> any ReplicationEndpoint {
        switch configuration.target {
        case .url(let url):
            if url.hasPrefix("ws://") || url.hasPrefix("wss://") {
                throw .invalid("replicating collections over BLIP is not supported yet; use the http(s) URL")
            }
            return try RemoteEndpoint(
                url: keyspaceURL(url, scope: collection.scope, collection: collection.name),
                authenticator: configuration.authenticator)
        case .database(let other):
            let namesake: DatabaseCollection?
            do { namesake = try other.collection(collection.name, scope: collection.scope) } catch {
                throw .invalid("\(other.name): \(error)")
            }
            guard let namesake else { throw .invalid("\(other.name) has no collection \(collection.fullName)") }
            return LocalEndpoint(namesake)
        }
    }

    /// Starts every replicator.
    public func start() {
        for r in replicators { r.replicator.start() }
    }

    /// Stops every replicator and waits for them.
    public func stop() async {
        for r in replicators { await r.replicator.stop() }
    }

    /// Waits until every replicator stopped (a one-shot one at its end); their last statuses, in `replicators`'
    /// order.
    public func waitUntilStopped() async -> [ReplicationStatus] {
        var out: [ReplicationStatus] = []
        for r in replicators { out.append(await r.replicator.waitUntilStopped()) }
        return out
    }
}
