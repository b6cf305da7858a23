import SetteeClusterMap
import SetteeCore
import Testing

@Suite struct VBucketMapTests {
    /// Proves actives are spread evenly (within one vBucket) over every node count from 1 to 7.
    @Test(arguments: 1...7)
    func activesAreBalanced(nodeCount: Int) {
        let map = VBucketMap.build(numVBuckets: 1024, nodeCount: nodeCount, numReplicas: 1)
        let counts = (0..<nodeCount).map { map.activeVBuckets(onNode: $0).count }
        #expect(counts.reduce(0, +) == 1024)
        #expect(counts.max()! - counts.min()! <= 1, "active counts \(counts)")
    }

    /// Proves no chain places a replica on its active's node or repeats a node, and every chain has R+1 entries.
    @Test(arguments: [(1, 0), (1, 3), (2, 1), (3, 2), (4, 3), (2, 3)])
    func replicasNeverShareTheActiveNode(nodeCount: Int, replicas: Int) {
        let map = VBucketMap.build(numVBuckets: 1024, nodeCount: nodeCount, numReplicas: replicas)
        #expect(map.numReplicas == replicas)
        for chain in map.chains {
            #expect(chain.count == replicas + 1)
            let placed = chain.filter { $0 >= 0 }
            #expect(Set(placed).count == placed.count, "chain \(chain)")
            #expect(chain[0] >= 0)
        }
    }

    /// Proves a single node with replicas gets -1 for every replica slot, and that with enough nodes none is -1.
    @Test func missingReplicasAreMinusOne() {
        let single = VBucketMap.build(numVBuckets: 1024, nodeCount: 1, numReplicas: 2)
        #expect(single.chains.allSatisfy { $0 == [0, -1, -1] })
        let three = VBucketMap.build(numVBuckets: 1024, nodeCount: 3, numReplicas: 2)
        #expect(three.chains.allSatisfy { !$0.contains(-1) })
        let two = VBucketMap.build(numVBuckets: 8, nodeCount: 2, numReplicas: 2)
        #expect(two.chains[0] == [0, 1, -1])
        #expect(two.chains[1] == [1, 0, -1])
    }

    /// Proves the builder is deterministic: the same inputs give the same map.
    @Test func builderIsDeterministic() {
        let a = VBucketMap.build(numVBuckets: 1024, nodeCount: 3, numReplicas: 1)
        let b = VBucketMap.build(numVBuckets: 1024, nodeCount: 3, numReplicas: 1)
        #expect(a == b)
        #expect(a.chains[0] == [0, 1])
        // vb 4 and 5 are their actives' second vBuckets: the first replica moves one node further on.
        #expect(a.chains[4] == [1, 0])
        #expect(a.chains[5] == [2, 1])
    }

    /// Proves each replica rank is balanced too, so replica load is even.
    @Test func replicaRanksAreBalanced() {
        let map = VBucketMap.build(numVBuckets: 1024, nodeCount: 3, numReplicas: 2)
        let counts = (0..<3).map { map.replicaVBuckets(onNode: $0).count }
        #expect(counts.max()! - counts.min()! <= 2, "replica counts \(counts)")
        #expect(counts.reduce(0, +) == 2048)
    }
}

@Suite struct ClusterMapTests {
    static let node = NodeInfo(
        otpNode: NodeID("n_0@127.0.0.1"), host: "127.0.0.1", adminPort: 9000, kvPort: 12000, viewsPort: 9500,
        nodeUUID: "0123456789abcdef0123456789abcdef")
    static let bucket = BucketSettings(
        name: "beer", uuid: "fe01ce2a7fbac8fafaed7c982a04e229", ramQuotaMB: 100, replicaNumber: 0, flushEnabled: true,
        authType: .sasl, evictionPolicy: "valueOnly", numVBuckets: 1024)

    /// Proves `update` installs a newer revision and that the node owns every vBucket on a one-node map.
    @Test func updateRaisesRevision() {
        var map = ClusterMap.initial(
            bucket: Self.bucket, nodes: [Self.node], thisNode: 0, revision: MapRevision(rev: 3))
        #expect((0..<1024).allSatisfy { map.isActiveHere(VBucketID(UInt16($0))) })
        var second = Self.node
        second.kvPort = 12001
        second.otpNode = NodeID("n_1@127.0.0.1")
        let newMap = VBucketMap.build(numVBuckets: 1024, nodeCount: 2, numReplicas: 0)
        map.update(nodes: [Self.node, second], thisNode: 0, vbucketMap: newMap, revision: MapRevision(rev: 4))
        #expect(map.revision == MapRevision(rev: 4))
        #expect(map.revision > MapRevision(rev: 3))
        #expect(map.isActiveHere(VBucketID(0)))
        #expect(!map.isActiveHere(VBucketID(1)))
    }

    /// Proves revisions order by epoch first, then rev, as clients compare them.
    @Test func revisionsOrderByEpochThenRev() {
        #expect(MapRevision(epoch: 1, rev: 100) < MapRevision(epoch: 2, rev: 1))
        #expect(MapRevision(epoch: 1, rev: 5) < MapRevision(epoch: 1, rev: 6))
    }
}
