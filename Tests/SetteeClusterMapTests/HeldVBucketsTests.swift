import SetteeCore
import Testing

@testable import SetteeClusterMap

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
