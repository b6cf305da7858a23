import SetteeCore

// Hard failover: a pure change of the vBucket map when a node is declared dead.
//
// Guarantees of `Failover.failOver` (tests check each one):
// 1. the failed node appears in no chain of the result;
// 2. a chain whose active was on the failed node gets its first replica that is not on the failed node and
//    not empty as active; the remaining replicas keep their order and the chain is padded with -1;
// 3. a chain whose active was on the failed node and that has no other copy becomes all -1 and is reported
//    in `lost` (its data is gone; a later rebalance recreates it empty);
// 4. chains that did not contain the failed node are unchanged;
// 5. the revision grows in both `epoch` and `rev` (see below).
//
// Why the epoch grows: a failover is the one topology change that may be made by a node other than the
// orchestrator that published the current config (the orchestrator may be the node that failed, and a new one
// takes over with whatever config it last saw). Bumping the epoch makes its config win over anything the failed
// orchestrator might have published at a higher `rev` that the new one never saw. This mirrors Couchbase's
// `revEpoch`, which counts quorum failovers. `rev` grows too so that `rev` alone stays monotonic in logs.
// See docs/adr/0004-cluster-metadata-ordering.md.
//
//   chain [F, a, b]  ──▶ [a, b, -1]     (promoted)
//   chain [x, F, b]  ──▶ [x, b, -1]     (replica removed)
//   chain [F, -1]    ──▶ [-1, -1]       (lost)

/// What a hard failover did.
public struct FailoverOutcome: Sendable, Equatable {
    /// The map with the failed node removed from every chain.
    public let map: VBucketMap
    /// The revision to publish the map at: `(epoch + 1, rev + 1)`.
    public let revision: MapRevision
    /// vBuckets whose active was on the failed node and now has a promoted replica as active. Each promoted
    /// copy must add a new failover-log entry (new vbuuid at its high seqno) when it becomes active.
    public let promoted: [VBucketID]
    /// vBuckets whose active was on the failed node and had no other copy: their data is lost.
    public let lost: [VBucketID]
    /// vBuckets that lost a replica on the failed node (their active was elsewhere).
    public let replicasRemoved: [VBucketID]
}

/// Hard failover of one node. Pure.
public enum Failover {
    /// Fails over node index `node` of a map over `nodeCount` nodes, published until now at `revision`.
    public static func failOver(node: Int, in map: VBucketMap, nodeCount: Int, revision: MapRevision)
        -> FailoverOutcome
    {
        precondition((0..<nodeCount).contains(node), "failed node \(node) not in \(nodeCount) nodes")
        var chains: [[Int]] = []
        chains.reserveCapacity(map.numVBuckets)
        var promoted: [VBucketID] = []
        var lost: [VBucketID] = []
        var replicasRemoved: [VBucketID] = []
        for (vb, chain) in map.chains.enumerated() {
            guard chain.contains(node) else {
                chains.append(chain)
                continue
            }
            let id = VBucketID(UInt16(vb))
            // Live copies in chain order. If the active slot was already empty (-1), the remaining replicas are
            // left in place: promoting a copy of a vBucket that had no active is a rebalance's decision.
            var survivors = chain.filter { $0 >= 0 && $0 != node }
            if chain[0] == node {
                if survivors.isEmpty { lost.append(id) } else { promoted.append(id) }
            } else {
                replicasRemoved.append(id)
                if chain[0] < 0 { survivors.insert(-1, at: 0) }
            }
            if survivors.isEmpty { survivors = [-1] }
            while survivors.count < chain.count { survivors.append(-1) }
            chains.append(survivors)
        }
        return FailoverOutcome(
            map: VBucketMap(numReplicas: map.numReplicas, chains: chains, nodeCount: nodeCount),
            revision: MapRevision(epoch: revision.epoch + 1, rev: revision.rev + 1),
            promoted: promoted, lost: lost, replicasRemoved: replicasRemoved)
    }
}

extension ClusterMap {
    /// Hard-fails over node index `node`: installs the failover map at the bumped revision. The node stays in
    /// `nodes` (Couchbase's `inactiveFailed`) so indexes do not shift; a rebalance ejects it later.
    @discardableResult
    public mutating func failOver(nodeAt node: Int) -> FailoverOutcome {
        let outcome = Failover.failOver(node: node, in: vbucketMap, nodeCount: nodes.count, revision: revision)
        update(nodes: nodes, thisNode: thisNode, vbucketMap: outcome.map, revision: outcome.revision)
        return outcome
    }
}
