import SetteeCore
import SetteeJSON

/// Builders of the JSON documents clients read (Couchbase shapes; see the reference notes §1.5, §7).
/// Pure functions of their arguments.
public enum ConfigJSON {
    /// What the bucket supports. No `collections`/`xattr` until the KV server implements them: an SDK
    /// that sees `collections` sends collection-prefixed keys. `couchapi` (views) is added only when every
    /// node serves views (`bucketCapabilities(nodes:)`).
    public static let bucketCapabilities: [String] = [
        "dcp", "cbhello", "touch", "cccp", "nodesExt", "durableWrite",
    ]

    /// The capabilities for a bucket on `nodes`.
    public static func bucketCapabilities(nodes: [NodeInfo]) -> [String] {
        !nodes.isEmpty && nodes.allSatisfy(\.servesViews) ? ["couchapi"] + bucketCapabilities : bucketCapabilities
    }
    public static let clusterCapabilities: JSON = ["n1ql": []]
    public static let clusterCapabilitiesVer: JSON = [1, 0]
    /// The version nodes report; SDKs parse `major.minor.patch-build-edition`.
    public static let serverVersion = "7.6.0-0-community"
    /// `clusterCompatibility`: major * 0x10000 + minor.
    public static let clusterCompatibility = 7 * 0x10000 + 6

    static func host(of node: NodeInfo, isSelf: Bool, selfAddress: SelfAddress) -> String {
        guard isSelf else { return node.host }
        switch selfAddress {
        case .placeholder: return "$HOST"
        case .configured: return node.host
        case .override(let h): return h
        }
    }

    static func bucketURI(_ b: BucketSettings) -> String {
        "/pools/default/buckets/\(PercentEncoding.encode(b.name))?bucket_uuid=\(b.uuid)"
    }
    static func streamingURI(_ b: BucketSettings) -> String {
        "/pools/default/bucketsStreaming/\(PercentEncoding.encode(b.name))?bucket_uuid=\(b.uuid)"
    }
    static func couchApiBase(_ host: String, _ node: NodeInfo, _ b: BucketSettings) -> String {
        "http://\(hostPort(host, node.viewsPort))/\(PercentEncoding.encode(b.name))%2B\(b.uuid)"
    }
    /// Couchbase's `couchApiBaseHTTPS`: the same over the views TLS port, when the node has one.
    static func couchApiBaseHTTPS(_ host: String, _ node: NodeInfo, _ b: BucketSettings) -> String? {
        node.viewsTLSPort.map { "https://\(hostPort(host, $0))/\(PercentEncoding.encode(b.name))%2B\(b.uuid)" }
    }

    static func nodesExt(_ nodes: [NodeInfo], thisNode: Int?, selfAddress: SelfAddress) -> JSON {
        .array(
            nodes.enumerated().map { (i, node) in
                var services: [(String, JSON)] = [("mgmt", .int(node.adminPort)), ("kv", .int(node.kvPort))]
                if node.servesViews { services.append(("capi", .int(node.viewsPort))) }
                if let port = node.kvTLSPort { services.append(("kvSSL", .int(port))) }
                if let port = node.adminTLSPort { services.append(("mgmtSSL", .int(port))) }
                if node.servesViews, let port = node.viewsTLSPort { services.append(("capiSSL", .int(port))) }
                var members: [(String, JSON)] = [("services", .object(services))]
                if i == thisNode { members.append(("thisNode", true)) }
                members.append(("hostname", .string(host(of: node, isSelf: i == thisNode, selfAddress: selfAddress))))
                members.append(("nodeUUID", .string(node.nodeUUID)))
                return .object(members)
            })
    }

    static func vBucketServerMap(_ map: ClusterMap, selfAddress: SelfAddress) -> JSON {
        [
            "hashAlgorithm": "CRC",
            "numReplicas": .int(map.vbucketMap.numReplicas),
            "serverList": .array(
                map.nodes.enumerated().map { (i, n) in
                    .string(hostPort(host(of: n, isSelf: i == map.thisNode, selfAddress: selfAddress), n.kvPort))
                }),
            "vBucketMap": map.vbucketMap.json,
        ]
    }

    /// The terse bucket config (`/pools/default/b/NAME`, KV GET_CLUSTER_CONFIG and NOT_MY_VBUCKET bodies).
    public static func terseBucket(_ map: ClusterMap, cluster: ClusterIdentity, selfAddress: SelfAddress) -> JSON {
        let b = map.bucket
        let nodes: JSON = .array(
            map.nodes.enumerated().map { (i, n) in
                let h = host(of: n, isSelf: i == map.thisNode, selfAddress: selfAddress)
                var members: [(String, JSON)] = []
                if n.servesViews { members.append(("couchApiBase", .string(couchApiBase(h, n, b)))) }
                if n.servesViews, let https = couchApiBaseHTTPS(h, n, b) {
                    members.append(("couchApiBaseHTTPS", .string(https)))
                }
                members.append(("hostname", .string(hostPort(h, n.adminPort))))
                members.append(("ports", ["direct": .int(n.kvPort)]))
                return .object(members)
            })
        return [
            "rev": .int(map.revision.rev),
            "revEpoch": .int(map.revision.epoch),
            "name": .string(b.name),
            "nodeLocator": "vbucket",
            "bucketType": "membase",
            "uuid": .string(b.uuid),
            "uri": .string(bucketURI(b)),
            "streamingUri": .string(streamingURI(b)),
            "numVBuckets": .int(map.numVBuckets),
            "bucketCapabilitiesVer": "",
            "bucketCapabilities": .array(bucketCapabilities(nodes: map.nodes).map { .string($0) }),
            "ddocs": ["uri": .string("/pools/default/buckets/\(PercentEncoding.encode(b.name))/ddocs")],
            "vBucketServerMap": vBucketServerMap(map, selfAddress: selfAddress),
            "nodes": nodes,
            "nodesExt": nodesExt(map.nodes, thisNode: map.thisNode, selfAddress: selfAddress),
            "clusterCapabilitiesVer": clusterCapabilitiesVer,
            "clusterCapabilities": clusterCapabilities,
            "clusterUUID": .string(cluster.uuid),
            "clusterName": .string(cluster.name),
        ]
    }

    /// The cluster-level config a KV connection without a selected bucket gets (GCCCP).
    public static func global(
        revision: MapRevision, nodes: [NodeInfo], thisNode: Int, selfAddress: SelfAddress
    ) -> JSON {
        [
            "rev": .int(revision.rev),
            "revEpoch": .int(revision.epoch),
            "nodesExt": nodesExt(nodes, thisNode: thisNode, selfAddress: selfAddress),
            "clusterCapabilitiesVer": clusterCapabilitiesVer,
            "clusterCapabilities": clusterCapabilities,
        ]
    }
}

extension String {
    func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
