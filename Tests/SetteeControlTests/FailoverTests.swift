import SetteeClusterMap
import SetteeControl
import SetteeCore
import Testing

@Suite struct FailoverTests {
    static let node = NodeInfo(
        otpNode: NodeID("n_0@127.0.0.1"), host: "127.0.0.1", adminPort: 9000, kvPort: 12000, viewsPort: 9500,
        nodeUUID: "0123456789abcdef0123456789abcdef")
    static let bucket = BucketSettings(
        name: "beer", uuid: "fe01ce2a7fbac8fafaed7c982a04e229", ramQuotaMB: 100, replicaNumber: 0, flushEnabled: true,
        authType: .sasl, evictionPolicy: "valueOnly", numVBuckets: 1024)

    /// Proves each chain kind is handled: promoted, replica removed, lost, untouched, and an already-empty active.
    @Test func chainsChangeAsSpecified() {
        let map = VBucketMap(
            numReplicas: 2,
            chains: [[0, 1, 2], [1, 0, 2], [0, -1, -1], [1, 2, -1], [0, 2, 1], [-1, 0, 1]],
            nodeCount: 3)
        let outcome = Failover.failOver(node: 0, in: map, nodeCount: 3, revision: MapRevision(epoch: 1, rev: 9))
        #expect(
            outcome.map.chains == [[1, 2, -1], [1, 2, -1], [-1, -1, -1], [1, 2, -1], [2, 1, -1], [-1, 1, -1]])
        #expect(outcome.promoted == [VBucketID(0), VBucketID(4)])
        #expect(outcome.lost == [VBucketID(2)])
        #expect(outcome.replicasRemoved == [VBucketID(1), VBucketID(5)])
        #expect(outcome.revision == MapRevision(epoch: 2, rev: 10))
    }

    /// Proves, over random maps and failed nodes, that the failed node vanishes, actives move only off it,
    /// every lost vBucket had no other copy, and the result is deterministic.
    @Test func randomFailoversKeepInvariants() {
        for seed in UInt64(1)...100 {
            var rng = SplitMix64(seed: seed)
            let count = Int.random(in: 1...6, using: &rng)
            let replicas = Int.random(in: 0...3, using: &rng)
            let map = VBucketMap.build(numVBuckets: 1024, nodeCount: count, numReplicas: replicas)
            let failed = Int.random(in: 0..<count, using: &rng)
            let outcome = Failover.failOver(node: failed, in: map, nodeCount: count, revision: MapRevision(rev: 1))
            #expect(outcome.map.chains.allSatisfy { !$0.contains(failed) }, "seed \(seed)")
            for (vb, (before, after)) in zip(map.chains, outcome.map.chains).enumerated() {
                if before[0] != failed {
                    #expect(after[0] == before[0], "seed \(seed) vb \(vb)")
                } else if before.dropFirst().contains(where: { $0 >= 0 }) {
                    #expect(after[0] == before.first(where: { $0 >= 0 && $0 != failed }), "seed \(seed) vb \(vb)")
                } else {
                    #expect(outcome.lost.contains(VBucketID(UInt16(vb))), "seed \(seed) vb \(vb)")
                }
            }
            #expect(outcome.promoted.count + outcome.lost.count == map.activeVBuckets(onNode: failed).count)
            #expect(
                outcome == Failover.failOver(node: failed, in: map, nodeCount: count, revision: MapRevision(rev: 1)))
        }
    }

    /// Proves `ClusterMap.failOver` installs the map at a strictly newer revision and keeps the node list.
    @Test func clusterMapFailOverBumpsRevision() {
        var second = Self.node
        second.otpNode = NodeID("n_1@127.0.0.1")
        var bucket = Self.bucket
        bucket.replicaNumber = 1
        var cluster = ClusterMap.initial(
            bucket: bucket, nodes: [Self.node, second], thisNode: 0, revision: MapRevision(epoch: 1, rev: 4))
        let outcome = cluster.failOver(nodeAt: 1)
        #expect(cluster.revision == MapRevision(epoch: 2, rev: 5))
        #expect(cluster.nodes.count == 2)
        #expect(outcome.promoted.count == 512 && outcome.lost.isEmpty)
        #expect((0..<1024).allSatisfy { cluster.isActiveHere(VBucketID(UInt16($0))) })
    }
}
