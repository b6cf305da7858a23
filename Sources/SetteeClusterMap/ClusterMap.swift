import SetteeCore

/// The cluster's identity, shown in every config.
public struct ClusterIdentity: Sendable, Equatable, Codable {
    /// 32 lowercase hex characters, fixed when the first node is initialised.
    public var uuid: String
    public var name: String
    public init(uuid: String, name: String) {
        self.uuid = uuid
        self.name = name
    }
}

/// How the node that renders a config writes **its own** address. Other nodes always appear with
/// their real host.
public enum SelfAddress: Sendable, Equatable {
    /// The literal `$HOST`: the client substitutes the address it connected to. Used for the KV
    /// bodies (GET_CLUSTER_CONFIG, NOT_MY_VBUCKET), as Couchbase does for loopback-bound nodes.
    case placeholder
    /// The node's configured `host`.
    case configured
    /// A host the caller knows better (the HTTP request's `Host`), as ns_server substitutes the local address.
    case override(String)
}

/// One bucket's cluster map at one revision: the nodes, in vBucket-map index order, and the map.
///
/// Invariants:
/// 1. `thisNode` indexes `nodes`;
/// 2. every node index in `vbucketMap` indexes `nodes`;
/// 3. `revision` only grows: `update(...)` refuses a revision that is not greater.
public struct ClusterMap: Sendable, Equatable {
    public let bucket: BucketSettings
    public private(set) var revision: MapRevision
    public private(set) var nodes: [NodeInfo]
    public private(set) var thisNode: Int
    public private(set) var vbucketMap: VBucketMap

    public init(
        bucket: BucketSettings, revision: MapRevision, nodes: [NodeInfo], thisNode: Int, vbucketMap: VBucketMap
    ) {
        precondition(nodes.indices.contains(thisNode), "thisNode \(thisNode) not in \(nodes.count) nodes")
        precondition(
            vbucketMap.chains.allSatisfy { $0.allSatisfy { $0 < nodes.count } },
            "vBucket map indexes past \(nodes.count) nodes")
        self.bucket = bucket
        self.revision = revision
        self.nodes = nodes
        self.thisNode = thisNode
        self.vbucketMap = vbucketMap
    }

    /// The initial map of a new bucket: the deterministic layout over `nodes`.
    public static func initial(
        bucket: BucketSettings, nodes: [NodeInfo], thisNode: Int, revision: MapRevision
    ) -> ClusterMap {
        ClusterMap(
            bucket: bucket, revision: revision, nodes: nodes, thisNode: thisNode,
            vbucketMap: VBucketMap.build(
                numVBuckets: bucket.numVBuckets, nodeCount: nodes.count, numReplicas: bucket.replicaNumber))
    }

    /// Replaces the topology; `revision` must be newer than the current one (clients ignore configs that
    /// are not strictly newer, so a change without a bump would never reach them).
    public mutating func update(
        nodes: [NodeInfo], thisNode: Int, vbucketMap: VBucketMap, revision: MapRevision
    ) {
        precondition(revision > self.revision, "revision \(revision) not newer than \(self.revision)")
        self = ClusterMap(bucket: bucket, revision: revision, nodes: nodes, thisNode: thisNode, vbucketMap: vbucketMap)
    }

    /// The vBucket count (fixed for the bucket's life).
    public var numVBuckets: Int { vbucketMap.numVBuckets }

    /// Whether this node holds the active copy of `vbucket`.
    public func isActiveHere(_ vbucket: VBucketID) -> Bool {
        vbucket.index < vbucketMap.chains.count && vbucketMap.chains[vbucket.index][0] == thisNode
    }
}
