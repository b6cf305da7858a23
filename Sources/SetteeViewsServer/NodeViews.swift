import AsyncHTTPClient
import Logging
import SetteeClusterMap
import SetteeCore
import SetteePeerHTTP
import SetteeRegistry
import SetteeStorage
import SetteeTLS
import SetteeViews
import Synchronization

/// The views of every bucket on this node, opened lazily from the `NodeRegistry`: a bucket's
/// design documents and indexes live in `<registry.directory(for: settings)>/views`.
/// A bucket deleted and re-created under the same name gets fresh views: with a new uuid, and also with the
/// same uuid when the node's copy was dropped and opened again (a full recovery leaves the cluster, deleting
/// the bucket's directory, and joins back with the same bucket): views kept for the old engine would write
/// into a directory that no longer exists.
public final class NodeViews: Sendable {
    public let registry: NodeRegistry
    let logger: Logger
    private let buckets = Mutex<[String: (uuid: String, engine: ObjectIdentifier, views: BucketViews)]>([:])
    private let opening = Mutex<Void>(())

    /// The views port's calls to the other nodes' views ports (query scatter, design-document forwarding), through
    /// the one peer HTTP client on `HTTPClient.shared`. Its trust: the cluster's trusted CAs (from the cluster
    /// document), else each member's pinned leaf, as the admin peer calls do (ADR 0047).
    let peerClient: PeerClient
    /// Which trust admitted the views port's TLS calls to other nodes (`/metrics`, ADR 0057).
    public var peerTrustCounts: PeerTrustCounts { peerClient.trust.counts }

    public init(registry: NodeRegistry, logger: Logger) {
        self.registry = registry
        self.logger = logger
        self.peerClient = PeerClient(
            http: .shared, authorities: ClusterAuthorities { [registry] in registry.trustedCAs })
    }

    /// The views of bucket `name`; throws `.notFound("no_such_bucket")` when the bucket does not
    /// exist here. Blocking on first use (loads design documents, opens indexes).
    public func views(bucket name: String) throws(ViewError) -> BucketViews {
        guard let (engine, settings) = registry.resolveBucket(named: name) else {
            throw .notFound("no_such_bucket")
        }
        // The cached views hold their engine, so its identifier cannot be reused while they are cached.
        let identity = ObjectIdentifier(engine)
        if let cached = buckets.withLock({ $0[name] }), cached.uuid == settings.uuid, cached.engine == identity {
            return cached.views
        }
        return try opening.withLock { _ throws(ViewError) -> BucketViews in
            if let cached = buckets.withLock({ $0[name] }) {
                if cached.uuid == settings.uuid && cached.engine == identity { return cached.views }
                cached.views.stop()
            }
            let views = try BucketViews(
                bucket: name, directory: registry.directory(for: settings) + "/views",
                source: EngineViewSource(engine: engine), logger: logger)
            buckets.withLock { $0[name] = (settings.uuid, identity, views) }
            return views
        }
    }

    /// Opens the views of every bucket that has design documents, so their indexes catch up in the
    /// background from startup on (call off event loops).
    public func openAll() {
        for name in registry.bucketNames {
            do { _ = try views(bucket: name) } catch {
                logger.error("views of a bucket failed to open", metadata: ["bucket": "\(name)", "error": "\(error)"])
            }
        }
    }

    /// Stops every index worker.
    public func shutdown() {
        let all = buckets.withLock { b in
            defer { b = [:] }
            return b.values.map(\.views)
        }
        for v in all { v.stop() }
    }
}
