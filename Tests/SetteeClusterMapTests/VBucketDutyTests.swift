import SetteeClusterMap
import SetteeCore
import Testing

@Suite struct VBucketDutyTests {
    let nodes = [NodeID("a"), NodeID("b"), NodeID("c")]

    /// chain[0] is active with the rest of the chain as its replicas; a node in the rest of a chain
    /// follows chain[0]; a node outside the chain has nothing to do.
    @Test func dutiesFromTheMap() {
        let map = VBucketMap(numReplicas: 1, chains: [[0, 1], [1, 2], [2, 0], [0, -1]], nodeCount: 3)
        #expect(
            VBucketDuty.duties(for: nodes[0], nodes: nodes, map: map) == [
                .active(replicas: [nodes[1]]), .dead, .replica(source: nodes[2]), .active(replicas: []),
            ])
        #expect(
            VBucketDuty.duties(for: nodes[1], nodes: nodes, map: map) == [
                .replica(source: nodes[0]), .active(replicas: [nodes[2]]), .dead, .dead,
            ])
    }

    /// A replica whose active is lost (-1) is dead here (its data is kept for a failover to promote).
    @Test func lostActive() {
        let map = VBucketMap(numReplicas: 2, chains: [[-1, 1, 2]], nodeCount: 3)
        #expect(VBucketDuty.duties(for: nodes[1], nodes: nodes, map: map) == [.dead])
    }

    /// A rebalance's forward map adds replica duties for incoming copies (following the current active),
    /// and changes nothing for copies the node already has.
    @Test func forwardMapAddsIncomingCopies() {
        let map = VBucketMap(numReplicas: 1, chains: [[0, 1], [1, 0]], nodeCount: 3)
        let forward = VBucketMap(numReplicas: 1, chains: [[2, 1], [1, 2]], nodeCount: 3)
        #expect(
            VBucketDuty.duties(for: nodes[2], nodes: nodes, map: map, forward: forward) == [
                .replica(source: nodes[0]), .replica(source: nodes[1]),
            ])
        #expect(
            VBucketDuty.duties(for: nodes[0], nodes: nodes, map: map, forward: forward) == [
                .active(replicas: [nodes[1]]), .replica(source: nodes[1]),
            ])
    }

    /// Every vBucket gets exactly one active across the cluster for a built map, and each replica
    /// duty names that active.
    @Test func builtMapIsConsistent() {
        let map = VBucketMap.build(numVBuckets: 1024, nodeCount: 3, numReplicas: 2)
        let all = nodes.map { VBucketDuty.duties(for: $0, nodes: nodes, map: map) }
        var ok = true
        for vb in 0..<1024 {
            let actives = (0..<3).filter { if case .active = all[$0][vb] { true } else { false } }
            ok = ok && actives.count == 1
            for n in 0..<3 {
                if case .replica(let source) = all[n][vb] { ok = ok && source == nodes[actives[0]] }
            }
        }
        #expect(ok)
    }
}
