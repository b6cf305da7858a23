import SetteeClusterMap
import SetteeCore

// Hard failover: a pure change of the vBucket map when a node is declared dead.
//
// `Failover.decide` is the orchestrator's entry: it fails over a set of nodes given the seqnos the surviving
// copies reported, promotes per vBucket the copy that holds the most, and lists the vBuckets where that cannot be
// shown to keep every majority-acknowledged write (`unsafe`). `Failover.failOver` is `decide` for one node with
// no seqnos known (ties everywhere, so chain order).
//
// Guarantees (tests check each one):
// 1. the failed node appears in no chain of the result;
// 2. a chain whose active was on the failed node gets as active its surviving copy with the highest reported
//    seqno (the first in chain order on ties); the other survivors keep their order and the chain is padded
//    with -1;
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

/// What the surviving copies said before a failover: per node index, the high seqno of each vBucket there
/// (array index = vBucket). A node absent from the table did not answer; a short array leaves the rest unknown.
public struct CopySeqnos: Sendable, Equatable {
    public var byNode: [Int: [UInt64]]

    public init(_ byNode: [Int: [UInt64]] = [:]) { self.byNode = byNode }

    /// The high seqno `node` reported for `vb`, or nil when it did not answer.
    public func seqno(node: Int, vb: Int) -> UInt64? {
        guard let row = byNode[node], vb >= 0, vb < row.count else { return nil }
        return row[vb]
    }
}

/// What a failover of one or more nodes would do, decided before anything is published.
public struct FailoverDecision: Sendable, Equatable {
    /// The map with every failed node removed from every chain.
    public let map: VBucketMap
    /// vBuckets whose active was on a failed node and now has a surviving copy as active.
    public let promoted: [VBucketID]
    /// vBuckets whose active was on a failed node and that have no surviving copy at all.
    public let lost: [VBucketID]
    /// vBuckets that only lost replicas (their active survives).
    public let replicasRemoved: [VBucketID]
    /// vBuckets whose active was on a failed node where no surviving copy can be shown to hold every write a
    /// majority acknowledged (too many copies gone or silent; `lost` ones included). Failing over with any is
    /// "unsafe": an operator must ask for it, auto-failover never does it.
    public let unsafe: [VBucketID]

    public var isSafe: Bool { unsafe.isEmpty }
}

/// Hard failover. Pure.
public enum Failover {
    /// How many copies a majority-durable write must reach before it is acknowledged with `numReplicas`
    /// replicas configured (the rule `DurabilityMonitor` applies): `(R + 1) / 2 + 1`.
    public static func majority(numReplicas: Int) -> Int { (numReplicas + 1) / 2 + 1 }

    /// Decides the failover of the nodes `failed` (indexes into a map over `nodeCount` nodes), given what the
    /// surviving copies reported.
    ///
    /// Per vBucket whose active is on a failed node, the surviving copy that answered with the highest seqno is
    /// promoted (chain order on ties); the other survivors follow it as replicas, in chain order.
    ///
    /// Why that is safe, and when it is not: a write acknowledged as majority-durable sits on at least
    /// `M = majority(R)` of the chain's `R + 1` copies, and every copy holds a prefix of the active's history
    /// (replicas apply snapshots in seqno order). If fewer than `M` copies are gone, counting failed nodes,
    /// empty slots (a copy lost to an earlier failover, whose promoted successor's replicas may not have caught
    /// up) and survivors that did not answer, then some answering survivor holds that write, so the one with
    /// the highest seqno holds it and everything before it. Otherwise nothing shows that any survivor holds
    /// it: the vBucket is reported `unsafe`. A vBucket whose active survives stays with it (it holds all it
    /// acknowledged).
    public static func decide(map: VBucketMap, failed: Set<Int>, nodeCount: Int, seqnos: CopySeqnos)
        -> FailoverDecision
    {
        let majority = Self.majority(numReplicas: map.numReplicas)
        var chains: [[Int]] = []
        chains.reserveCapacity(map.numVBuckets)
        var promoted: [VBucketID] = []
        var lost: [VBucketID] = []
        var replicasRemoved: [VBucketID] = []
        var unsafe: [VBucketID] = []
        for (vb, chain) in map.chains.enumerated() {
            guard chain.contains(where: { failed.contains($0) }) else {
                chains.append(chain)
                continue
            }
            let id = VBucketID(UInt16(truncatingIfNeeded: vb))
            // Live copies in chain order.
            var survivors = chain.filter { $0 >= 0 && !failed.contains($0) }
            if chain[0] >= 0 && failed.contains(chain[0]) {
                let answered = survivors.compactMap { node in seqnos.seqno(node: node, vb: vb).map { (node, $0) } }
                // Strictly greater keeps the earliest in chain order on ties.
                var best: (node: Int, seqno: UInt64)? = nil
                for (node, seqno) in answered where best == nil || seqno > best?.seqno ?? 0 { best = (node, seqno) }
                if let chosen = best?.node ?? survivors.first {
                    survivors.removeAll { $0 == chosen }
                    survivors.insert(chosen, at: 0)
                    promoted.append(id)
                } else {
                    lost.append(id)
                }
                if chain.count - answered.count >= majority { unsafe.append(id) }
            } else {
                replicasRemoved.append(id)
                // An already-empty active slot stays empty: promoting a copy of a vBucket that had no active is a
                // rebalance's decision.
                if chain[0] < 0 { survivors.insert(-1, at: 0) }
            }
            if survivors.isEmpty { survivors = [-1] }
            while survivors.count < chain.count { survivors.append(-1) }
            chains.append(survivors)
        }
        return FailoverDecision(
            map: VBucketMap(numReplicas: map.numReplicas, chains: chains, nodeCount: nodeCount),
            promoted: promoted, lost: lost, replicasRemoved: replicasRemoved, unsafe: unsafe)
    }

    /// Fails over node index `node` of a map over `nodeCount` nodes, published until now at `revision`, with
    /// nothing known of the survivors' seqnos: the first surviving replica of each chain is promoted.
    public static func failOver(node: Int, in map: VBucketMap, nodeCount: Int, revision: MapRevision)
        -> FailoverOutcome
    {
        precondition((0..<nodeCount).contains(node), "failed node \(node) not in \(nodeCount) nodes")
        // Every survivor "reports" the same seqno, so ties pick chain order.
        let zeros = [UInt64](repeating: 0, count: map.numVBuckets)
        let same = CopySeqnos(Dictionary(uniqueKeysWithValues: (0..<nodeCount).map { ($0, zeros) }))
        let decision = decide(map: map, failed: [node], nodeCount: nodeCount, seqnos: same)
        return FailoverOutcome(
            map: decision.map, revision: MapRevision(epoch: revision.epoch + 1, rev: revision.rev + 1),
            promoted: decision.promoted, lost: decision.lost, replicasRemoved: decision.replicasRemoved)
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
