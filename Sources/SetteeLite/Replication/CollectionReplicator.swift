import SetteeCore
import SetteeReplication

/// What one collection of a `ReplicatorConfiguration` replicates (Couchbase Lite 3.1's `CollectionConfiguration`).
/// Each collection's filters and resolver apply to that collection's replicators only, over REST and over BLIP alike
/// (they run in the collection's `LocalEndpoint`, docs/adr/0152).
public struct CollectionConfiguration: Sendable {
    /// Pull only the documents in these channels (the gateway's `sync_gateway/bychannel` filter); pushes are not
    /// filtered by channel, as in Couchbase Lite (a Lite database does not know its documents' channels).
    public var channels: [String]?
    /// Push and pull only the documents with these ids.
    public var documentIDs: [String]?
    /// Push only the revisions this takes (after `documentIDs`); see `DocumentFilter`.
    public var pushFilter: DocumentFilter?
    /// Save only the pulled revisions this takes (after the remote's `channels`/`documentIDs` filter); a refused one
    /// counts in the pull's `docWriteFailures` and is not asked for again.
    public var pullFilter: DocumentFilter?
    /// Resolves the conflicts a pull makes in this collection (`ConflictResolver`); nil keeps them in the revision
    /// tree (the winner rule decides what reads see, as before).
    public var conflictResolver: ConflictResolver?

    /// Both `channels` and `documentIDs` at once are refused when the replicator is made: the CouchDB protocol's
    /// `_changes` takes one. The closures combine with either.
    public init(
        channels: [String]? = nil, documentIDs: [String]? = nil, pushFilter: DocumentFilter? = nil,
        pullFilter: DocumentFilter? = nil, conflictResolver: ConflictResolver? = nil
    ) {
        self.channels = channels
        self.documentIDs = documentIDs
        self.pushFilter = pushFilter
        self.pullFilter = pullFilter
        self.conflictResolver = conflictResolver
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
    /// A `ws(s)://host:port/db` URL (a gateway's, or a Lite listener's `blipSyncURL`) replicates every collection
    /// over one BLIP connection to `db/_blipsync` (`BLIPCollectionsConnector`: one `getCollections`, each request
    /// naming its collection's index), as Couchbase Lite 3.1 does.
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
/// collection is filtered by its `channels` or `documentIDs` then its `pullFilter`, a push by its `documentIDs` then
/// its `pushFilter`; its `conflictResolver` resolves what its pull makes conflict.
///
/// Over a `ws(s)` URL every replicator works on one shared BLIP connection (`blip`), opened by the first to start and
/// closed when the last stops; each BLIP endpoint's remote identity is the collection's keyspace URL
/// (`keyspaceURL`), so each has its own checkpoint, kept on the remote in that collection (`getCheckpoint` with its
/// index). Filters are the same as over REST (`subChanges` with `filter=sync_gateway/bychannel` or `docIDs`).
public final class CollectionsReplicator: Sendable {
    public let configuration: ReplicatorConfiguration
    /// One replicator per collection and direction: `collection` is `scope.name`.
    public let replicators: [(collection: String, type: ReplicatorType, replicator: Replicator)]
    /// The shared BLIP connection's connector over a `ws(s)` URL (its `connectionsOpened` counts the WebSockets
    /// opened), else nil.
    public let blip: BLIPCollectionsConnector?

    /// Makes the replicators (none is started). `invalid` for a collection of another database, a target database
    /// without the collection, a collection given both filters, or over BLIP more than
    /// `Limits.gatewayBLIPMaxCollections` collections (one `getCollections` names them all).
    public init(_ configuration: ReplicatorConfiguration) throws(ReplicationError) {
        self.configuration = configuration
        var made: [(collection: String, type: ReplicatorType, replicator: Replicator)] = []
        let blipSetup = try Self.blipConnector(configuration)
        self.blip = blipSetup?.shared
        for (collection, config) in configuration.collections {
            if config.channels != nil && config.documentIDs != nil {
                throw .invalid("\(collection.fullName): channels and documentIDs cannot both filter one collection")
            }
            if let first = configuration.collections.first, first.collection.database !== collection.database {
                throw .invalid("\(collection.fullName) belongs to another database than the configuration's")
            }
            var local = LocalEndpoint(collection)
            local.pushFilter = config.pushFilter
            local.pullFilter = config.pullFilter
            local.conflictResolver = config.conflictResolver
            let pullFilter: ReplicationFilter? =
                config.documentIDs.map { .docIDs($0) } ?? config.channels.map { .channels($0) }
            let pushFilter: ReplicationFilter? = config.documentIDs.map { .docIDs($0) }
            if let blip = blipSetup {
                let name = Self.blipName(collection)
                let identity = Self.keyspaceURL(
                    blip.databaseURL, scope: collection.scope, collection: collection.name)
                for (type, role, filter) in [
                    (ReplicatorType.push, BLIPEndpoint.Role.pushTarget, pushFilter), (.pull, .pullSource, pullFilter),
                ] where configuration.replicatorType == type || configuration.replicatorType == .pushAndPull {
                    guard let connector = blip.shared.connector(for: name, role: role) else {
                        throw .invalid("\(collection.fullName): no BLIP connector for it")
                    }
                    let options = ReplicatorOptions(continuous: configuration.continuous, filter: filter)
                    made.append(
                        (
                            collection.fullName, type,
                            Replicator(
                                blip: connector, remoteIdentity: identity, local: local, role: role, options: options,
                                maxHistory: collection.database.options.revsLimit)
                        ))
                }
                continue
            }
            let remote = try Self.remote(for: collection, configuration)
            if configuration.replicatorType != .pull {
                let options = ReplicatorOptions(continuous: configuration.continuous, filter: pushFilter)
                made.append(
                    (collection.fullName, .push, Replicator(source: local, target: remote, options: options)))
            }
            if configuration.replicatorType != .push {
                var options = ReplicatorOptions(continuous: configuration.continuous, filter: pullFilter)
                options.skipsTombstonesIntoEmptyTarget = true
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

    /// The name `getCollections` gives `collection`: `scope.collection`, or `_default` for the default collection
    /// (replication-protocol.adoc "Collections").
    public static func blipName(_ collection: DatabaseCollection) -> String {
        collection.isDefault ? Database.defaultCollectionName : collection.fullName
    }

    /// Over a `ws(s)` URL: the one shared connector naming every configured collection, and the database URL
    /// without credentials (the replicators' remote identities start with it); else nil.
    private static func blipConnector(
        _ configuration: ReplicatorConfiguration
    ) throws(ReplicationError) -> (shared: BLIPCollectionsConnector, databaseURL: String)? {
        guard case .url(let url) = configuration.target, url.hasPrefix("ws://") || url.hasPrefix("wss://") else {
            return nil
        }
        let names = configuration.collections.map { blipName($0.collection) }
        guard names.count <= Limits.gatewayBLIPMaxCollections else {
            throw .invalid(
                "\(names.count) collections over one BLIP connection: at most \(Limits.gatewayBLIPMaxCollections)")
        }
        let base = try WebSocketBLIPConnector(databaseURL: url, authenticator: configuration.authenticator)
        return (BLIPCollectionsConnector(connector: base, collections: names), base.databaseURL)
    }

    private static func remote(
        for collection: DatabaseCollection, _ configuration: ReplicatorConfiguration
    ) throws(ReplicationError) -> any ReplicationEndpoint {
        switch configuration.target {
        case .url(let url):
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

extension Database {
    /// Resolves a `getCollections` name to this database's collection of that name (a BLIP listener serving every
    /// collection, as Couchbase Lite's `URLEndpointListener` serves its configured ones): `_default` or
    /// `_default._default` is the default collection, `scope.collection` a collection that exists; anything else,
    /// or a collection that cannot be read, nil (answered null). The collections are looked up when asked, so one
    /// created after the listener started is served too.
    public func blipCollectionResolver() -> BLIPReplicationServer.CollectionResolver {
        { [self] name in
            let parts = name.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            let scope: String
            let collection: String
            switch parts.count {
            case 1: (scope, collection) = (Database.defaultScope, parts[0])
            case 2: (scope, collection) = (parts[0], parts[1])
            default: return nil
            }
            // `getCollections` names the default scope's collections by their bare name only for `_default`.
            if parts.count == 1 && collection != Database.defaultCollectionName { return nil }
            guard let found = try? self.collection(collection, scope: scope) else { return nil }
            return LocalEndpoint(found)
        }
    }
}
