import SetteeClusterMap
import SetteeControl
import SetteeCore
import Testing

/// Replica placement and the failover decision: what a failover promotes, and when it must refuse.
@Suite struct FailoverSafetyTests {
    /// The most actives any survivor holds after failing over `failed` (chain-order promotion).
    static func maxSurvivorActives(_ map: VBucketMap, nodeCount: Int, failed: Int) -> Int {
        let after = Failover.failOver(node: failed, in: map, nodeCount: nodeCount, revision: MapRevision(rev: 1)).map
        return (0..<nodeCount).filter { $0 != failed }.map { after.activeVBuckets(onNode: $0).count }.max() ?? 0
    }

    static func ceilDiv(_ a: Int, _ b: Int) -> Int { (a + b - 1) / b }

    /// Proves replicas are spread, not placed in a ring: on 3 to 6 nodes with 1 or 2 replicas, failing over any
    /// one node of the initial map leaves no survivor with more than ceil(1024/(n-1)) + 2 actives. With the old
    /// ring (node i's replicas all on node i+1) one survivor took all of the failed node's actives: 683 on 3
    /// nodes, against a bound of 514.
    @Test(arguments: [3, 4, 5, 6], [1, 2])
    func initialMapSpreadsEveryNodesReplicas(nodeCount: Int, replicas: Int) {
        let map = VBucketMap.build(numVBuckets: 1024, nodeCount: nodeCount, numReplicas: replicas)
        let bound = Self.ceilDiv(1024, nodeCount - 1) + 2
        for failed in 0..<nodeCount {
            let worst = Self.maxSurvivorActives(map, nodeCount: nodeCount, failed: failed)
            #expect(worst <= bound, "n=\(nodeCount) R=\(replicas) failed \(failed): \(worst) > \(bound)")
        }
        // Replica load stays even: every node holds the same number of replica copies, within 2.
        let counts = (0..<nodeCount).map { map.replicaVBuckets(onNode: $0).count }
        #expect((counts.max() ?? 0) - (counts.min() ?? 0) <= 2, "replica counts \(counts)")
    }

    /// Proves the planner spreads the replicas it places: a bucket made on one node and rebalanced over 3 to 6
    /// nodes, with 1 or 2 replicas, leaves no survivor above ceil(1024/(n-1)) + 2 actives after failing over any
    /// node. Before, the node every vBucket lived on stayed first replica of all of them: 683 on 3 nodes.
    @Test(arguments: [3, 4, 5, 6], [1, 2])
    func rebalancedMapSpreadsReplicas(nodeCount: Int, replicas: Int) {
        let start = VBucketMap.build(numVBuckets: 1024, nodeCount: 1, numReplicas: replicas)
        let all = nodeNames(Array(0..<nodeCount))
        let target = RebalancePlanner.plan(current: start, oldNodes: nodeNames([0]), newNodes: all).target
        let bound = Self.ceilDiv(1024, nodeCount - 1) + 2
        for failed in 0..<nodeCount {
            let worst = Self.maxSurvivorActives(target, nodeCount: nodeCount, failed: failed)
            #expect(worst <= bound, "1→\(nodeCount) R=\(replicas) failed \(failed): \(worst) > \(bound)")
        }
    }

    /// Proves replicas stay spread when nodes join a running cluster one at a time (1 → 2 → … → n, each step a
    /// rebalance from the previous map), as operators grow clusters: failing over any node afterwards leaves no
    /// survivor above 115 % of ceil(1024/(n-1)) + 2 actives (the planner's spread slack: it keeps copies where they
    /// are up to that), and replica counts stay within 2 of each other. Before, every step kept the copies the
    /// previous one placed: 596 actives on one survivor of 3 nodes grown one by one, 428 on 4 (even: 512, 342).
    @Test(arguments: [3, 4, 5, 6], [1, 2])
    func incrementalAddsKeepReplicasSpread(nodeCount: Int, replicas: Int) {
        var map = VBucketMap.build(numVBuckets: 1024, nodeCount: 1, numReplicas: replicas)
        for n in 2...nodeCount {
            map =
                RebalancePlanner.plan(
                    current: map, oldNodes: nodeNames(Array(0..<(n - 1))), newNodes: nodeNames(Array(0..<n))
                ).target
        }
        let bound = Self.ceilDiv(1024, nodeCount - 1) * 115 / 100 + 2
        for failed in 0..<nodeCount {
            let worst = Self.maxSurvivorActives(map, nodeCount: nodeCount, failed: failed)
            #expect(worst <= bound, "1→…→\(nodeCount) R=\(replicas) failed \(failed): \(worst) > \(bound)")
        }
        let counts = (0..<nodeCount).map { map.replicaVBuckets(onNode: $0).count }
        #expect((counts.max() ?? 0) - (counts.min() ?? 0) <= 2, "replica counts \(counts)")
    }

    /// Proves the copy holding the most is promoted, whatever its rank: chain [0, 1, 2] with node 1 behind node 2
    /// promotes 2 (the old rule, first replica, promoted 1 and lost writes 1 never received); ties keep chain
    /// order; a silent survivor is not promoted over one that answered.
    @Test func promotesTheCopyThatHoldsTheMost() {
        let map = VBucketMap(numReplicas: 2, chains: [[0, 1, 2], [0, 2, 1], [0, 1, 2], [1, 0, 2]], nodeCount: 3)
        let seqnos = CopySeqnos([1: [90, 50, 70, 10], 2: [100, 50, 70, 10]])
        let d = Failover.decide(map: map, failed: [0], nodeCount: 3, seqnos: seqnos)
        #expect(d.map.chains == [[2, 1, -1], [2, 1, -1], [1, 2, -1], [1, 2, -1]])
        #expect(d.promoted == [VBucketID(0), VBucketID(1), VBucketID(2)])
        #expect(d.replicasRemoved == [VBucketID(3)])
        #expect(d.isSafe)

        // Node 2 silent: node 1 is promoted, one copy lost and one silent is 2 of 3 gone ≥ majority 2: unsafe.
        let silent = Failover.decide(map: map, failed: [0], nodeCount: 3, seqnos: CopySeqnos([1: [90, 50, 70, 10]]))
        #expect(silent.map.chains[0] == [1, 2, -1])
        #expect(silent.unsafe == [VBucketID(0), VBucketID(1), VBucketID(2)])
    }

    /// Proves the safety rule on the cases: one node lost with 1 or 2 replicas is safe; two copies lost
    /// with 2 replicas (two failed nodes, or one failed plus the slot an earlier failover emptied) is unsafe;
    /// a vBucket with no copy left is lost and unsafe; losing only replicas is always safe.
    @Test func refusesWhenNoSurvivorCanHoldEveryMajorityWrite() {
        let all = CopySeqnos([0: [5, 5, 5], 1: [5, 5, 5], 2: [5, 5, 5], 3: [5, 5, 5]])
        #expect(Failover.majority(numReplicas: 0) == 1)
        #expect(Failover.majority(numReplicas: 1) == 2)
        #expect(Failover.majority(numReplicas: 2) == 2)
        #expect(Failover.majority(numReplicas: 3) == 3)

        let one = VBucketMap(numReplicas: 1, chains: [[0, 1], [1, 0], [0, -1]], nodeCount: 2)
        let d1 = Failover.decide(map: one, failed: [0], nodeCount: 2, seqnos: all)
        #expect(d1.map.chains == [[1, -1], [1, -1], [-1, -1]])
        #expect(d1.lost == [VBucketID(2)] && d1.unsafe == [VBucketID(2)])

        let two = VBucketMap(numReplicas: 2, chains: [[0, 1, 2], [1, 2, 0], [0, 1, -1]], nodeCount: 4)
        let single = Failover.decide(map: two, failed: [0], nodeCount: 4, seqnos: all)
        #expect(single.unsafe == [VBucketID(2)])
        let double = Failover.decide(map: two, failed: [0, 1], nodeCount: 4, seqnos: all)
        #expect(double.map.chains == [[2, -1, -1], [2, -1, -1], [-1, -1, -1]])
        #expect(double.unsafe == [VBucketID(0), VBucketID(1), VBucketID(2)])
        #expect(double.lost == [VBucketID(2)])
        let replicaOnly = Failover.decide(map: two, failed: [2], nodeCount: 4, seqnos: all)
        #expect(replicaOnly.isSafe && replicaOnly.promoted.isEmpty)
    }

    /// Proves, over random maps, reports and failed sets, the decision's invariants: no failed node stays,
    /// every promoted active answered with the highest seqno among the survivors that answered (or nobody
    /// answered), a safe vBucket lost fewer than a majority of its copies, and the decision is deterministic.
    @Test func randomDecisionsKeepInvariants() {
        for seed in UInt64(1)...300 {
            var rng = SplitMix64(seed: seed)
            let count = Int.random(in: 2...6, using: &rng)
            let replicas = Int.random(in: 0...3, using: &rng)
            let vbs = 64
            let map = VBucketMap.build(numVBuckets: vbs, nodeCount: count, numReplicas: replicas)
            var failed: Set<Int> = [Int.random(in: 0..<count, using: &rng)]
            if Bool.random(using: &rng) { failed.insert(Int.random(in: 0..<count, using: &rng)) }
            var byNode: [Int: [UInt64]] = [:]
            for node in 0..<count where !failed.contains(node) && Int.random(in: 0..<5, using: &rng) != 0 {
                byNode[node] = (0..<vbs).map { _ in UInt64.random(in: 0...20, using: &rng) }
            }
            let seqnos = CopySeqnos(byNode)
            let d = Failover.decide(map: map, failed: failed, nodeCount: count, seqnos: seqnos)
            #expect(d == Failover.decide(map: map, failed: failed, nodeCount: count, seqnos: seqnos), "seed \(seed)")
            for (vb, (before, after)) in zip(map.chains, d.map.chains).enumerated() {
                #expect(after.allSatisfy { !failed.contains($0) }, "seed \(seed) vb \(vb)")
                guard failed.contains(before[0]) else {
                    #expect(after[0] == before[0], "seed \(seed) vb \(vb)")
                    continue
                }
                let survivors = before.filter { $0 >= 0 && !failed.contains($0) }
                let answered = survivors.compactMap { seqnos.seqno(node: $0, vb: vb) }
                if let best = answered.max() {
                    #expect(seqnos.seqno(node: after[0], vb: vb) == best, "seed \(seed) vb \(vb)")
                }
                let id = VBucketID(UInt16(vb))
                let safe = before.count - answered.count < Failover.majority(numReplicas: replicas)
                #expect(d.unsafe.contains(id) == !safe, "seed \(seed) vb \(vb)")
                #expect(d.lost.contains(id) == survivors.isEmpty, "seed \(seed) vb \(vb)")
            }
        }
    }
}
