import SetteeClusterMap
import SetteeCore
import Testing

@testable import SetteeControl

/// `HeldVBuckets`: what becomes of an active vBucket held after an unclean shutdown (ADR 0033).
@Suite struct HeldVBucketsTests {
    let a = NodeID("a")
    let b = NodeID("b")
    let c = NodeID("c")

    @Test func releasedWhenNoReplicaIsAhead() {
        #expect(HeldVBuckets.decide(me: a, chain: [a, b, c], myHigh: 10, replicaHighs: [b: 10, c: 7]) == .release)
        #expect(HeldVBuckets.decide(me: a, chain: [a, nil], myHigh: 10, replicaHighs: [:]) == .release)
        #expect(HeldVBuckets.decide(me: a, chain: [a], myHigh: 0, replicaHighs: [:]) == .release)
    }

    @Test func handedToTheReplicaFurthestAhead() {
        #expect(
            HeldVBuckets.decide(me: a, chain: [a, b, c], myHigh: 10, replicaHighs: [b: 11, c: 15]) == .handOver(to: c))
        #expect(
            HeldVBuckets.decide(me: a, chain: [a, b, c], myHigh: 10, replicaHighs: [b: 12, c: 3]) == .handOver(to: b))
    }

    /// A replica that did not answer may hold what this copy lost: wait for it (or for its failover).
    @Test func waitsForSilentReplicas() {
        #expect(
            HeldVBuckets.decide(me: a, chain: [a, b, c], myHigh: 10, replicaHighs: [b: 20, c: nil])
                == .wait(missing: [c]))
        #expect(HeldVBuckets.decide(me: a, chain: [a, b], myHigh: 10, replicaHighs: [:]) == .wait(missing: [b]))
    }

    @Test func notActiveHereOnceTheMapMovedOn() {
        #expect(HeldVBuckets.decide(me: a, chain: [b, a], myHigh: 10, replicaHighs: [:]) == .notActiveHere)
        #expect(HeldVBuckets.decide(me: a, chain: [nil, b], myHigh: 10, replicaHighs: [:]) == .notActiveHere)
    }

    /// The settle rule (ADR 0033, amendment): an unsettled copy the current map makes a replica or nothing here
    /// settles; one it makes active or pending stays unsettled (held once asked to serve, then compared).
    @Test func settlesWhenTheMapMakesTheCopyAReplicaOrNothing() {
        let duties: [VBucketDuty] = [
            .replica(source: b), .dead, .active(replicas: [b]), .pending, .active(replicas: []),
        ]
        #expect(HeldVBuckets.settles(vb: 0, duties: duties))
        #expect(HeldVBuckets.settles(vb: 1, duties: duties))
        #expect(!HeldVBuckets.settles(vb: 2, duties: duties))
        #expect(!HeldVBuckets.settles(vb: 3, duties: duties))
        #expect(!HeldVBuckets.settles(vb: 4, duties: duties))  // active without replicas: the rounds release it
        #expect(
            (0..<duties.count).filter { HeldVBuckets.settles(vb: $0, duties: duties) } == [0, 1],
            "exactly the replica and the dead copy settle")
    }

    /// Nothing known about a copy (no map for the bucket, or a vBucket the duties do not cover) keeps it unsettled:
    /// it is not trusted until the map says what it is.
    @Test func staysUnsettledWithoutDuties() {
        let duties: [VBucketDuty] = [.replica(source: b), .dead]
        #expect(!HeldVBuckets.settles(vb: 0, duties: nil))
        #expect(!HeldVBuckets.settles(vb: 2, duties: duties))
        #expect(!HeldVBuckets.settles(vb: 1024, duties: duties))
        #expect(!HeldVBuckets.settles(vb: -1, duties: duties))
        #expect(!HeldVBuckets.settles(vb: 0, duties: []))
    }

    /// Duties derived from a map feed the rule: first in the chain, a stays unsettled; a replica (also an incoming
    /// copy of a move) or outside the chain, it settles.
    @Test func settlesFromTheDutiesOfAMap() {
        let nodes = [a, b, c]
        let map = VBucketMap(numReplicas: 1, chains: [[0, 1], [1, 0], [1, 2], [2, 1]], nodeCount: 3)
        let forward = VBucketMap(numReplicas: 1, chains: [[0, 1], [1, 0], [1, 2], [2, 0]], nodeCount: 3)
        let duties = VBucketDuty.duties(for: a, nodes: nodes, map: map, forward: forward)
        #expect((0..<4).map { HeldVBuckets.settles(vb: $0, duties: duties) } == [false, true, true, true])
    }

    @Test func handOverSwapsActiveAndReplica() {
        #expect(HeldVBuckets.handedOver([a, b, c], from: a, to: c) == [c, b, a])
        #expect(HeldVBuckets.handedOver([a, b], from: a, to: b) == [b, a])
    }

    @Test func handOverRefusedWhenItNoLongerApplies() {
        var p = BucketPlacement(chains: [[a, b], [b, a], [a, c]])
        #expect(HeldVBuckets.handOverRefusal(p, vb: 0, from: a, to: b) == nil)
        #expect(HeldVBuckets.handOverRefusal(p, vb: 1, from: a, to: b) != nil)  // a is not the active
        #expect(HeldVBuckets.handOverRefusal(p, vb: 2, from: a, to: b) != nil)  // b is not a replica
        #expect(HeldVBuckets.handOverRefusal(p, vb: 3, from: a, to: b) != nil)  // out of range
        #expect(HeldVBuckets.handOverRefusal(p, vb: -1, from: a, to: b) != nil)
        p.forward[0] = [b, c]
        #expect(HeldVBuckets.handOverRefusal(p, vb: 0, from: a, to: b) != nil)  // a rebalance moves it
    }
}
