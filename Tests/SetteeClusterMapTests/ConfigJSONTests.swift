import Foundation
import SetteeClusterMap
import SetteeCore
import SetteeJSON
import Testing

/// Parses rendered JSON with Foundation, so shape tests check what a real parser sees.
func parse(_ value: JSON) throws -> [String: Any] {
    try #require(try JSONSerialization.jsonObject(with: Data(value.serialized())) as? [String: Any])
}

@Suite struct ConfigJSONTests {
    static let node = ClusterMapTests.node
    static let cluster = ClusterIdentity(uuid: "c0ffee00c0ffee00c0ffee00c0ffee00", name: "test-cluster")
    static func map(rev: Int64 = 7) -> ClusterMap {
        ClusterMap.initial(
            bucket: ClusterMapTests.bucket, nodes: [node], thisNode: 0, revision: MapRevision(epoch: 1, rev: rev))
    }

    /// Proves the terse config has every field the SDK reads, with `$HOST` for this node in placeholder mode.
    @Test func terseConfigShapeWithPlaceholders() throws {
        let json = try parse(ConfigJSON.terseBucket(Self.map(), cluster: Self.cluster, selfAddress: .placeholder))
        #expect(json["rev"] as? Int == 7)
        #expect(json["revEpoch"] as? Int == 1)
        #expect(json["name"] as? String == "beer")
        #expect(json["nodeLocator"] as? String == "vbucket")
        #expect(json["bucketType"] as? String == "membase")
        #expect(json["uuid"] as? String == "fe01ce2a7fbac8fafaed7c982a04e229")
        #expect(json["uri"] as? String == "/pools/default/buckets/beer?bucket_uuid=fe01ce2a7fbac8fafaed7c982a04e229")
        #expect(
            json["streamingUri"] as? String
                == "/pools/default/bucketsStreaming/beer?bucket_uuid=fe01ce2a7fbac8fafaed7c982a04e229")
        #expect(json["numVBuckets"] as? Int == 1024)
        #expect(json["bucketCapabilitiesVer"] as? String == "")
        let caps = try #require(json["bucketCapabilities"] as? [String])
        #expect(Set(caps) == ["dcp", "cbhello", "touch", "cccp", "nodesExt", "durableWrite"])
        #expect(!caps.contains("collections") && !caps.contains("xattr"))
        #expect((json["ddocs"] as? [String: Any])?["uri"] as? String == "/pools/default/buckets/beer/ddocs")
        let vbsm = try #require(json["vBucketServerMap"] as? [String: Any])
        #expect(vbsm["hashAlgorithm"] as? String == "CRC")
        #expect(vbsm["numReplicas"] as? Int == 0)
        #expect(vbsm["serverList"] as? [String] == ["$HOST:12000"])
        let vbmap = try #require(vbsm["vBucketMap"] as? [[Int]])
        #expect(vbmap.count == 1024)
        #expect(vbmap.allSatisfy { $0 == [0] })
        let nodes = try #require(json["nodes"] as? [[String: Any]])
        #expect(nodes.count == 1)
        #expect(nodes[0]["hostname"] as? String == "$HOST:9000")
        #expect(nodes[0]["couchApiBase"] == nil)  // no views service on this node
        #expect((nodes[0]["ports"] as? [String: Any])?["direct"] as? Int == 12000)
        let ext = try #require(json["nodesExt"] as? [[String: Any]])
        #expect(ext.count == 1)
        #expect(ext[0]["hostname"] as? String == "$HOST")
        #expect(ext[0]["thisNode"] as? Bool == true)
        let services = try #require(ext[0]["services"] as? [String: Int])
        #expect(services == ["mgmt": 9000, "kv": 12000])
        #expect(json["clusterCapabilitiesVer"] as? [Int] == [1, 0])
        #expect(json["clusterCapabilities"] is [String: Any])
        #expect(json["clusterUUID"] as? String == Self.cluster.uuid)
        #expect(json["clusterName"] as? String == "test-cluster")
    }

    /// Proves a node that serves views advertises `capi`, `couchApiBase` and the `couchapi` capability, and one
    /// that does not advertises none of them (SDKs ping every advertised service).
    @Test func viewsAdvertisedOnlyWhenServed() throws {
        var viewsNode = Self.node
        viewsNode.servesViews = true
        let map = ClusterMap.initial(
            bucket: ClusterMapTests.bucket, nodes: [viewsNode], thisNode: 0, revision: MapRevision(rev: 1))
        let json = try parse(ConfigJSON.terseBucket(map, cluster: Self.cluster, selfAddress: .placeholder))
        #expect((json["bucketCapabilities"] as? [String])?.contains("couchapi") == true)
        let ext = try #require(json["nodesExt"] as? [[String: Any]])
        #expect(ext[0]["services"] as? [String: Int] == ["mgmt": 9000, "kv": 12000, "capi": 9500])
        let nodes = try #require(json["nodes"] as? [[String: Any]])
        #expect(nodes[0]["couchApiBase"] as? String == "http://$HOST:9500/beer%2Bfe01ce2a7fbac8fafaed7c982a04e229")
        let full = try parse(
            AdminJSON.bucket(map, runtime: NodeRuntime(), stats: BucketBasicStats(), selfAddress: .configured))
        let fullNodes = try #require(full["nodes"] as? [[String: Any]])
        #expect(
            fullNodes[0]["couchApiBase"] as? String == "http://127.0.0.1:9500/beer%2Bfe01ce2a7fbac8fafaed7c982a04e229")

        let plain = try parse(ConfigJSON.terseBucket(Self.map(), cluster: Self.cluster, selfAddress: .placeholder))
        #expect((plain["bucketCapabilities"] as? [String])?.contains("couchapi") == false)
        #expect(
            !ConfigJSON.terseBucket(Self.map(), cluster: Self.cluster, selfAddress: .placeholder).text.contains("capi"))
    }

    /// Proves NodeInfo decodes documents without `servesViews` (written before the field existed) as false.
    @Test func nodeInfoDecodesWithoutServesViews() throws {
        let old =
            #"{"otpNode":"n_0@127.0.0.1","host":"127.0.0.1","adminPort":9000,"kvPort":12000,"viewsPort":9500,"nodeUUID":"u"}"#
        let node = try JSONDecoder().decode(NodeInfo.self, from: Data(old.utf8))
        #expect(node.servesViews == false)
        #expect(node.kvPort == 12000)
        var views = node
        views.servesViews = true
        #expect(try JSONDecoder().decode(NodeInfo.self, from: JSONEncoder().encode(views)) == views)
    }

    /// Proves the terse config names real hosts when asked (HTTP answers), leaving no `$HOST` anywhere.
    @Test func terseConfigWithRealHosts() throws {
        let value = ConfigJSON.terseBucket(Self.map(), cluster: Self.cluster, selfAddress: .configured)
        #expect(!value.text.contains("$HOST"))
        let json = try parse(value)
        let vbsm = try #require(json["vBucketServerMap"] as? [String: Any])
        #expect(vbsm["serverList"] as? [String] == ["127.0.0.1:12000"])
        let ext = try #require(json["nodesExt"] as? [[String: Any]])
        #expect(ext[0]["hostname"] as? String == "127.0.0.1")
        let over = try parse(ConfigJSON.terseBucket(Self.map(), cluster: Self.cluster, selfAddress: .override("::1")))
        #expect((over["vBucketServerMap"] as? [String: Any])?["serverList"] as? [String] == ["[::1]:12000"])
    }

    /// Proves the global (GCCCP) config carries rev, revEpoch, nodesExt and the cluster capabilities, and no map.
    @Test func globalConfigShape() throws {
        let json = try parse(
            ConfigJSON.global(
                revision: MapRevision(epoch: 2, rev: 9), nodes: [Self.node], thisNode: 0, selfAddress: .placeholder))
        #expect(json["rev"] as? Int == 9)
        #expect(json["revEpoch"] as? Int == 2)
        #expect(json["vBucketServerMap"] == nil)
        let ext = try #require(json["nodesExt"] as? [[String: Any]])
        #expect(ext[0]["hostname"] as? String == "$HOST")
        #expect((ext[0]["services"] as? [String: Int])?["kv"] == 12000)
        #expect(json["clusterCapabilitiesVer"] as? [Int] == [1, 0])
        #expect(json["clusterCapabilities"] != nil)
    }

    /// Proves the full bucket object has every field the SDK requires, and `controllers.flush` only when enabled.
    @Test func fullBucketShape() throws {
        let stats = BucketBasicStats(itemCount: 12, diskUsed: 4096, dataUsed: 4096, memUsed: 52_428_800)
        let json = try parse(
            AdminJSON.bucket(
                Self.map(), runtime: NodeRuntime(uptimeSeconds: 42), stats: stats, selfAddress: .configured))
        #expect(json["name"] as? String == "beer")
        #expect(json["uuid"] as? String == ClusterMapTests.bucket.uuid)
        #expect(json["bucketType"] as? String == "membase")
        let quota = try #require(json["quota"] as? [String: Int])
        #expect(quota["rawRAM"] == 100 * 1024 * 1024)
        #expect(quota["ram"] == 100 * 1024 * 1024)
        #expect(json["replicaNumber"] as? Int == 0)
        #expect(json["evictionPolicy"] as? String == "valueOnly")
        #expect(json["conflictResolutionType"] as? String == "seqno")
        #expect(json["authType"] as? String == "sasl")
        #expect(json["numVBuckets"] as? Int == 1024)
        let controllers = try #require(json["controllers"] as? [String: Any])
        #expect(controllers["flush"] as? String == "/pools/default/buckets/beer/controller/doFlush")
        let nodes = try #require(json["nodes"] as? [[String: Any]])
        #expect(nodes.count == 1)
        let n = nodes[0]
        #expect(n["status"] as? String == "healthy")
        #expect(n["hostname"] as? String == "127.0.0.1:9000")
        #expect(n["version"] as? String == ConfigJSON.serverVersion)
        #expect(n["services"] as? [String] == ["kv"])
        #expect((n["ports"] as? [String: Int])?["direct"] == 12000)
        #expect(n["clusterMembership"] as? String == "active")
        #expect(n["otpNode"] as? String == "n_0@127.0.0.1")
        #expect(n["uptime"] as? String == "42")
        #expect(n["couchApiBase"] == nil)
        let basic = try #require(json["basicStats"] as? [String: Any])
        #expect(basic["itemCount"] as? Int == 12)
        #expect(basic["diskUsed"] as? Int == 4096)
        #expect(basic["memUsed"] as? Int == 52_428_800)
        #expect((basic["quotaPercentUsed"] as? Double).map { abs($0 - 50) < 0.001 } == true)
        for key in ["opsPerSec", "diskFetches", "dataUsed"] { #expect(basic[key] != nil, "basicStats.\(key)") }
        #expect(json["vBucketServerMap"] is [String: Any])
        #expect(json["streamingUri"] is String && json["uri"] is String && json["ddocs"] is [String: Any])
        #expect(json["stats"] is [String: Any])

        var noFlush = ClusterMapTests.bucket
        noFlush.flushEnabled = false
        let map2 = ClusterMap.initial(bucket: noFlush, nodes: [Self.node], thisNode: 0, revision: MapRevision(rev: 1))
        let json2 = try parse(
            AdminJSON.bucket(map2, runtime: NodeRuntime(), stats: BucketBasicStats(), selfAddress: .configured))
        #expect((json2["controllers"] as? [String: Any])?["flush"] == nil)
    }

    /// Proves `/pools` lists no pool and an empty-array uuid before provisioning, and the default pool after.
    @Test func poolsShape() throws {
        let before = try parse(AdminJSON.pools(clusterUUID: nil, isAdmin: false))
        #expect((before["pools"] as? [Any])?.isEmpty == true)
        #expect((before["uuid"] as? [Any])?.isEmpty == true)
        let after = try parse(AdminJSON.pools(clusterUUID: Self.cluster.uuid, isAdmin: true))
        let pools = try #require(after["pools"] as? [[String: Any]])
        #expect(pools.count == 1)
        #expect(pools[0]["name"] as? String == "default")
        #expect(pools[0]["uri"] as? String == "/pools/default?uuid=\(Self.cluster.uuid)")
        #expect(after["uuid"] as? String == Self.cluster.uuid)
        #expect(after["isAdminCreds"] as? Bool == true)
        #expect(after["implementationVersion"] is String)
        #expect(after["componentsVersion"] is [String: Any])
    }

    /// Proves `/pools/default` has nodes, the buckets uri, bucketNames and rebalanceStatus "none".
    @Test func poolDefaultShape() throws {
        let json = try parse(
            AdminJSON.poolDefault(
                cluster: Self.cluster, nodes: [Self.node], thisNode: 0, runtime: NodeRuntime(memoryTotal: 1 << 30),
                selfAddress: .configured, buckets: [ClusterMapTests.bucket], memoryQuotaMB: 512, maxBucketCount: 30))
        #expect(json["name"] as? String == "default")
        #expect(json["rebalanceStatus"] as? String == "none")
        #expect(json["memoryQuota"] as? Int == 512)
        #expect(json["clusterName"] as? String == "test-cluster")
        let buckets = try #require(json["buckets"] as? [String: Any])
        #expect(buckets["uri"] as? String == "/pools/default/buckets?uuid=\(Self.cluster.uuid)")
        #expect(buckets["terseBucketsBase"] as? String == "/pools/default/b/")
        let names = try #require(json["bucketNames"] as? [[String: Any]])
        #expect(names.first?["bucketName"] as? String == "beer")
        let nodes = try #require(json["nodes"] as? [[String: Any]])
        #expect(nodes[0]["thisNode"] as? Bool == true)
        #expect(nodes[0]["memoryTotal"] as? Int == 1 << 30)
        #expect((nodes[0]["ports"] as? [String: Int])?["direct"] == 12000)
    }

    /// Proves strings are escaped (quotes, backslashes, control characters) and non-ASCII passes through intact.
    @Test func stringEscaping() throws {
        let value: JSON = ["k": .string("a\"b\\c\n\u{01}é")]
        #expect(value.text == #"{"k":"a\"b\\c\n\u0001é"}"#)
        let json = try parse(value)
        #expect(json["k"] as? String == "a\"b\\c\n\u{01}é")
    }

    /// Proves a bucket name with `%` is percent-encoded in the URIs the configs publish.
    @Test func percentInNameIsEncodedInURIs() throws {
        var b = ClusterMapTests.bucket
        b.name = "a%b"
        let map = ClusterMap.initial(bucket: b, nodes: [Self.node], thisNode: 0, revision: MapRevision(rev: 1))
        let json = try parse(ConfigJSON.terseBucket(map, cluster: Self.cluster, selfAddress: .configured))
        #expect(json["name"] as? String == "a%b")
        #expect((json["uri"] as? String)?.hasPrefix("/pools/default/buckets/a%25b?") == true)
    }
}
