import Foundation
import SetteeClusterMap
import SetteeCore
import SetteeJSON
import SetteeStorage
import Synchronization

/// The node metadata as last committed (`<dataDir>/node-metadata.json`, `NodeMetadata`: the cluster snapshot every
/// member holds alike, and this node's own fields) and the configs derived from it (each bucket's `ClusterMap`, the
/// terse bucket configs and the global config, cached as JSON), with this node's fence and serving lease and the
/// config observers: the registry's cluster snapshot store (issue 69 item 2, ADR 0139).
///
/// Owns its state under its own lock (`committed`), held briefly; it never waits for disk under it. It stores and
/// loads, and decides nothing about the cluster (ADR 0130): `NodeRegistry` writes through it in the order its
/// `mutations` lock gives (`write`, then `publish`). Lock order: `committed` may be held while `BucketStore`'s lock is
/// taken (`publish`'s `alongside`, `NodeRegistry.resolveBucket`), never the other way round.
final class ClusterSnapshotStore: Sendable {
    /// What the metadata file last durably said, and what is derived from it.
    struct Committed: Sendable {
        var metadata: NodeMetadata
        var maps: [String: ClusterMap] = [:]
        var terseCache: [String: [UInt8]] = [:]
        var globalCache: [UInt8] = []
    }

    /// Called after a config changed (its revision grew): with the bucket's name, or nil when every config changed.
    typealias Observer = NodeRegistry.ConfigObserver

    /// `<dataDir>/node-metadata.json`.
    let path: String
    private let committed: Mutex<Committed>
    /// Why this node holds its active vBuckets back (pending: no client reads or writes), nil when it does not. Set
    /// by the cluster manager when the node cannot reach a majority (`NodeRegistry.setFence`).
    let fence = Mutex<String?>(nil)
    /// Whether this node may serve as an active vBucket's node now (ADR 0124).
    let servingLease = ServingLease()
    private let observers = Mutex<(next: UInt64, all: [UInt64: Observer])>((0, [:]))

    /// A store holding `metadata` (already durable at `path`), its configs derived for `node`.
    init(path: String, metadata: NodeMetadata, node: NodeInfo) {
        self.path = path
        var c = Committed(metadata: metadata)
        Self.rebuildCaches(&c, node: node)
        self.committed = Mutex(c)
    }

    /// The committed metadata.
    var metadata: NodeMetadata { committed.withLock { $0.metadata } }

    /// `body` applied to the committed metadata, under the store's lock (keep it short: no disk, no waiting).
    func read<T>(_ body: (NodeMetadata) -> T) -> T { committed.withLock { body($0.metadata) } }

    /// Makes `new` durable (atomic file replace, fsync). Called with `NodeRegistry.mutations` held, before `publish`.
    /// Blocking.
    func write(_ new: NodeMetadata) throws {
        try DataDirectory.writeAtomically(try new.encodedFile(), to: path)
    }

    /// Makes `new` (durable already: `write`) the committed metadata and rebuilds the configs derived from it for
    /// `node`, running `alongside` under the same hold (the bucket store's engines change with it, so a reader of
    /// both sees them together). Returns the metadata it replaced.
    @discardableResult
    func publish(_ new: NodeMetadata, node: NodeInfo, alongside: () -> Void = {}) -> NodeMetadata {
        committed.withLock { c in
            let old = c.metadata
            c.metadata = new
            alongside()
            Self.rebuildCaches(&c, node: node)
            return old
        }
    }

    /// Recomputes every map and cached JSON document from `c.metadata` (cheap: few buckets, run on change).
    static func rebuildCaches(_ c: inout Committed, node: NodeInfo) {
        c.maps.removeAll()
        c.terseCache.removeAll()
        let m = c.metadata
        let nodes = NodeRegistry.mapNodes(m, node: node)
        let names = nodes.map(\.otpNode)
        let thisNode = names.firstIndex(of: node.otpNode) ?? 0
        let active = NodeRegistry.activeMemberNames(m, node: node)
        for b in m.buckets {
            let placement =
                b.placement
                ?? BucketPlacement.initial(
                    numVBuckets: b.settings.numVBuckets, numReplicas: b.settings.replicaNumber, nodes: active)
            let map = ClusterMap(
                bucket: b.settings, revision: MapRevision(epoch: m.revEpoch, rev: b.rev), nodes: nodes,
                thisNode: thisNode,
                vbucketMap: placement.indexMap(over: names, numReplicas: b.settings.replicaNumber))
            c.maps[b.settings.name] = map
            c.terseCache[b.settings.name] =
                ConfigJSON.terseBucket(map, cluster: m.cluster, selfAddress: .placeholder).serialized()
        }
        c.globalCache = ConfigJSON.global(
            revision: MapRevision(epoch: m.revEpoch, rev: m.lastRev), nodes: nodes, thisNode: thisNode,
            selfAddress: .placeholder
        ).serialized()
    }

    // MARK: Derived configs

    func clusterMap(bucket: String) -> ClusterMap? { committed.withLock { $0.maps[bucket] } }
    func terseConfigJSON(bucket: String) -> [UInt8]? { committed.withLock { $0.terseCache[bucket] } }
    func globalConfigJSON() -> [UInt8] { committed.withLock { $0.globalCache } }

    // MARK: Observers

    func addObserver(_ observer: @escaping Observer) -> UInt64 {
        observers.withLock { o in
            o.next += 1
            o.all[o.next] = observer
            return o.next
        }
    }

    func removeObserver(_ token: UInt64) {
        _ = observers.withLock { $0.all.removeValue(forKey: token) }
    }

    /// Calls every observer with `bucket`, outside the lock.
    func notify(_ bucket: String?) {
        for observer in observers.withLock({ Array($0.all.values) }) { observer(bucket) }
    }
}
