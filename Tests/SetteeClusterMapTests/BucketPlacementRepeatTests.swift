import SetteeClusterMap
import SetteeCore
import Testing

/// A chain naming one node twice: found by validation's rule, repaired at start, and never a trap in `indexMap`.
@Suite struct BucketPlacementRepeatTests {
    let a = NodeID("a")
    let b = NodeID("b")

    /// Proves the rule validation applies: a node named twice is found; empty slots (nil, "") may repeat.
    @Test func repeatedNodeIgnoresEmptySlots() {
        #expect(BucketPlacement.repeatedNode(in: [a, a]) == a)
        #expect(BucketPlacement.repeatedNode(in: [a, nil, b, a]) == a)
        #expect(BucketPlacement.repeatedNode(in: [a, nil, nil]) == nil)
        #expect(BucketPlacement.repeatedNode(in: [a, NodeID(""), NodeID("")]) == nil)
        #expect(BucketPlacement.repeatedNode(in: [nil, nil]) == nil)
    }

    /// Proves the start-up repair keeps each chain's first mention (the active) and empties later ones, in current
    /// and forward chains, and counts them.
    @Test func droppingRepeatedNodesKeepsTheFirstMention() {
        let p = BucketPlacement(chains: [[a, a], [b, a, b], [a, nil, nil]], forward: [1: [b, b]])
        let (clean, dropped) = p.droppingRepeatedNodes()
        #expect(clean.chains == [[a, nil], [b, a, nil], [a, nil, nil]])
        #expect(clean.forward == [1: [b, nil]])
        #expect(dropped == 3)
        #expect(BucketPlacement(chains: [[a, b]]).droppingRepeatedNodes().dropped == 0)
    }

    /// Proves `indexMap` of a placement naming a node twice builds a map (the repeat becomes -1) instead of
    /// trapping in `VBucketMap`'s precondition, as it did for every caller (registry, rebalance, failover).
    @Test func indexMapOfARepeatedNodeDoesNotTrap() {
        let map = BucketPlacement(chains: [[a, a], [b, a]]).indexMap(over: [a, b], numReplicas: 1)
        #expect(map.chains == [[0, -1], [1, 0]])
    }
}
