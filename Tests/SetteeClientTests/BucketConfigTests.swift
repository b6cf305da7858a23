import SetteeClient
import SetteeClusterMap
import SetteeCore
import SetteeJSON
import Testing

/// Parsing the terse bucket config, routing keys through it, and the adoption rule.
@Suite struct BucketConfigTests {
    /// A config as our nodes render it (ConfigJSON.terseBucket) for two nodes, with `$HOST` for self.
    static func rendered(rev: Int64, epoch: Int64 = 1, nodes: Int = 2, replicas: Int = 1) -> [UInt8] {
        let infos = (0..<nodes).map {
            NodeInfo(
                host: "127.0.0.1", adminPort: 9000 + $0, kvPort: 12000 + $0, viewsPort: 13000 + $0, nodeUUID: "u\($0)")
        }
        let bucket = BucketSettings(
            name: "demo", uuid: "0123456789abcdef0123456789abcdef", ramQuotaMB: 100, replicaNumber: replicas)
        let map = ClusterMap.initial(
            bucket: bucket, nodes: infos, thisNode: 0, revision: MapRevision(epoch: epoch, rev: rev))
        return ConfigJSON.terseBucket(map, cluster: ClusterIdentity(uuid: "c", name: "n"), selfAddress: .placeholder)
            .serialized()
    }

    /// Proves the parser reads what the server renders: revision, nodes in map order with `$HOST`
    /// substituted by the source host, 1024 chains of numReplicas + 1 entries matching VBucketMap.build.
    @Test func parsesServerRenderedConfig() throws {
        let config = try BucketConfig.parse(Self.rendered(rev: 7), sourceHost: "10.0.0.5")
        #expect(config.revision == MapRevision(epoch: 1, rev: 7))
        #expect(config.bucket == "demo")
        #expect(config.nodes.count == 2)
        #expect(config.nodes[0].kv == NodeAddress(host: "10.0.0.5", port: 12000))
        #expect(config.nodes[0].mgmt == NodeAddress(host: "10.0.0.5", port: 9000))
        #expect(config.nodes[1].kv == NodeAddress(host: "127.0.0.1", port: 12001))
        #expect(config.numReplicas == 1 && config.numVBuckets == 1024)
        let expected = VBucketMap.build(numVBuckets: 1024, nodeCount: 2, numReplicas: 1)
        let same = config.chains.enumerated().allSatisfy { vb, chain in chain.map(Int.init) == expected.chains[vb] }
        #expect(same)
        #expect(config.activeCounts() == [512, 512] && config.replicaCounts() == [512, 512])
    }

    /// Proves key → vBucket → node follows the SDK's CRC32 rule (sample pairs from the wire reference)
    /// and the map's active entry.
    @Test func routesKeysByCRC32ThenActiveNode() throws {
        let config = try BucketConfig.parse(Self.rendered(rev: 1), sourceHost: "127.0.0.1")
        let samples: [(String, UInt16)] = [("doc1", 389), ("doc2", 140), ("nope", 977), ("key-0", 491), ("k1", 526)]
        for (key, vb) in samples {
            let (v, node) = config.route(key: Array(key.utf8))
            #expect(v.rawValue == vb, "\(key)")
            // Initial map: active of vb i is node i % 2.
            #expect(node?.port == 12000 + Int(vb) % 2, "\(key)")
        }
    }

    /// Proves a legacy config with only `serverList` routes by it, and that `-1` (no active) gives no node.
    @Test func serverListAndMissingActive() throws {
        var chains = Array(repeating: "[0]", count: 4)
        chains[2] = "[-1]"
        let text = """
            {"rev":3,"vBucketServerMap":{"numReplicas":0,"serverList":["$HOST:11210"],"vBucketMap":[\(chains.joined(separator: ","))]}}
            """
        let config = try BucketConfig.parse(Array(text.utf8), sourceHost: "192.168.1.9")
        #expect(config.nodes == [ConfigNode(kv: NodeAddress(host: "192.168.1.9", port: 11210), mgmt: nil)])
        #expect(config.activeNode(of: VBucketID(0)) == 0)
        #expect(config.activeNode(of: VBucketID(2)) == nil)
        #expect(config.revision == MapRevision(epoch: -1, rev: 3))
    }

    /// Proves malformed configs are refused with a reason instead of trapping: bad JSON, a node index
    /// past the node list, a chain of the wrong length, a vBucket count that is not a power of two.
    @Test(arguments: [
        "{not json",
        #"{"rev":1,"nodesExt":[{"services":{"kv":1}}],"vBucketServerMap":{"numReplicas":0,"vBucketMap":[[1],[0]]}}"#,
        #"{"rev":1,"nodesExt":[{"services":{"kv":1}}],"vBucketServerMap":{"numReplicas":1,"vBucketMap":[[0],[0]]}}"#,
        #"{"rev":1,"nodesExt":[{"services":{"kv":1}}],"vBucketServerMap":{"numReplicas":0,"vBucketMap":[[0],[0],[0]]}}"#,
        #"{"rev":1,"nodesExt":[{"hostname":"h"}],"vBucketServerMap":{"numReplicas":0,"vBucketMap":[[0]]}}"#,
        #"{"rev":1}"#,
    ])
    func refusesMalformedConfigs(text: String) {
        #expect(throws: ConfigError.self) { try BucketConfig.parse(Array(text.utf8), sourceHost: "h") }
    }

    /// Proves a node list longer than a cluster can be is refused, where 32,769 nodes and a chain naming node 32,768
    /// trapped converting the index to Int16 (a hostile node's config reached every smart client: router, gateway,
    /// CLI). A list of `Limits.maxClusterMembers` still parses.
    @Test func refusesMoreNodesThanAClusterHas() throws {
        func config(nodes: Int, index: Int) -> [UInt8] {
            let ext = Array(repeating: #"{"services":{"kv":1}}"#, count: nodes).joined(separator: ",")
            return Array(#"{"rev":1,"nodesExt":[\#(ext)],"vBucketServerMap":{"vBucketMap":[[\#(index)]]}}"#.utf8)
        }
        #expect(throws: ConfigError.self) {
            try BucketConfig.parse(config(nodes: 32_769, index: 32_768), sourceHost: "h")
        }
        let most = Limits.maxClusterMembers
        #expect(throws: ConfigError.self) {
            try BucketConfig.parse(config(nodes: most + 1, index: most), sourceHost: "h")
        }
        let parsed = try BucketConfig.parse(config(nodes: most, index: most - 1), sourceHost: "h")
        #expect(parsed.nodes.count == most && parsed.activeNode(of: VBucketID(0)) == most - 1)
    }

    /// Proves the adoption rule: strictly newer in (revEpoch, rev) wins; equal or older loses; a newer
    /// epoch wins even with a lower rev; a different vBucket count is never adopted.
    @Test func adoptsOnlyStrictlyNewer() throws {
        let r5 = try BucketConfig.parse(Self.rendered(rev: 5), sourceHost: "h")
        let r6 = try BucketConfig.parse(Self.rendered(rev: 6), sourceHost: "h")
        let e2r1 = try BucketConfig.parse(Self.rendered(rev: 1, epoch: 2), sourceHost: "h")
        #expect(r5.isNewer(than: nil))
        #expect(r6.isNewer(than: r5))
        #expect(!r5.isNewer(than: r6))
        #expect(!r5.isNewer(than: r5))
        #expect(e2r1.isNewer(than: r6))
        #expect(!r6.isNewer(than: e2r1))
        var small = r6
        small.revision = MapRevision(epoch: 9, rev: 9)
        small.chains = Array(small.chains.prefix(512))
        #expect(!small.isNewer(than: r6))
    }

    /// Proves seed strings parse to the right kind and default ports.
    @Test func seeds() {
        #expect(Seed("http://127.0.0.1:8091") == .http(NodeAddress(host: "127.0.0.1", port: 8091)))
        #expect(Seed("http://10.1.1.1") == .http(NodeAddress(host: "10.1.1.1", port: 8091)))
        #expect(Seed("couchbase://127.0.0.1") == .kv(NodeAddress(host: "127.0.0.1", port: 11210)))
        #expect(Seed("127.0.0.1:12000") == .kv(NodeAddress(host: "127.0.0.1", port: 12000)))
        #expect(Seed("http://h:notaport") == nil)
    }
}
