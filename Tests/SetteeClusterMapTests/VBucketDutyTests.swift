import Foundation
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

    /// The active counts a moving vBucket's forward chain for durability only once the rebalance put it in `dual`
    /// (its new copies caught up): counted from the start of the move, its durable writes waited for the new
    /// copy's backfill (ADR 0119). Takeover and a fence make it pending; incoming copies follow the active.
    @Test func theSecondChainCountsOnlyOnceTheMoveIsDual() {
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])
        var p = BucketPlacement(chains: [[a, b], [a, b], [b, a]], forward: [0: [a, c], 1: [c, b]])
        #expect(VBucketDuty.duty(of: a, vb: 0, in: p) == .active(replicas: [b], moving: nil))
        #expect(VBucketDuty.duty(of: c, vb: 0, in: p) == .replica(source: a))
        p.dual = [0]
        #expect(VBucketDuty.duty(of: a, vb: 0, in: p) == .active(replicas: [b], moving: [a, c]))
        #expect(VBucketDuty.duty(of: a, vb: 1, in: p) == .active(replicas: [b], moving: nil))
        p.takeover = [1]
        #expect(VBucketDuty.duty(of: a, vb: 1, in: p) == .pending)
        #expect(VBucketDuty.duty(of: c, vb: 1, in: p) == .replica(source: a))
        #expect(VBucketDuty.duty(of: a, vb: 0, in: p, fenced: true) == .pending)
        // A `dual` entry without its forward chain (none is left by the rebalance) counts nothing.
        p.forward = [:]
        #expect(VBucketDuty.duty(of: a, vb: 0, in: p) == .active(replicas: [b], moving: nil))
        #expect(VBucketDuty.duty(of: c, vb: 0, in: p) == .dead)
        #expect(VBucketDuty.duty(of: a, vb: 7, in: p) == .dead)
    }

    /// A placement written before `dual` existed still decodes (with none), and `dual` round-trips.
    @Test func placementsWithoutDualDecode() throws {
        let old = Data(#"{"chains":[["a","b"]],"forward":{"0":["b","a"]},"takeover":[0]}"#.utf8)
        let p = try JSONDecoder().decode(BucketPlacement.self, from: old)
        #expect(p.dual.isEmpty && p.takeover == [0] && p.forward[0] == [nodes[1], nodes[0]])
        var q = p
        q.dual = [0]
        #expect(try JSONDecoder().decode(BucketPlacement.self, from: JSONEncoder().encode(q)) == q)
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
