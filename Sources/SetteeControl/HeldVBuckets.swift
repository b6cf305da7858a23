import SetteeClusterMap
import SetteeCore

/// What becomes of an active vBucket held back after its node shut down uncleanly (a crash, a kill, a power cut).
///
/// The node acknowledged writes that were in its memory and its replicas' but not yet on its disk; a majority-durable
/// write is acknowledged once a majority holds it in memory. After the restart the node's copy may lack such writes
/// while a replica still holds them. Serving the old copy under a new history would make the replicas roll back to it
/// and discard the only copies (the fault matrix of 2026-11-22 lost an acknowledged durable insert exactly so). The
/// node therefore holds each such vBucket (`BucketEngine.heldVBuckets`: it serves clients nothing and produces no
/// replica stream) until its replicas' high seqnos are known:
///
/// - no replica is ahead of it: it serves again under a new failover-log entry (`release`);
/// - a replica is ahead: the map hands the vBucket to the replica that is furthest ahead (`handOver`), and this copy
///   becomes its replica and catches up from it; nothing any copy held is lost;
/// - a replica's seqnos cannot be had: it waits (`wait`), saying so, until the replica answers or is failed over;
/// - the map no longer makes this node the active (it was failed over meanwhile): the hold ends as the map says
///   (`notActiveHere`), without a new history entry.
///
/// See docs/adr/0033-hold-actives-after-unclean-shutdown.md.
public enum HeldVBuckets {
    public enum Action: Sendable, Equatable {
        case release
        case handOver(to: NodeID)
        case wait(missing: [NodeID])
        case notActiveHere
    }

    /// The action for one held vBucket whose chain (active first) is `chain`, held at `myHigh` by `me`.
    /// `replicaHighs` has an entry for every replica asked: nil when it did not answer.
    public static func decide(
        me: NodeID, chain: [NodeID?], myHigh: UInt64, replicaHighs: [NodeID: UInt64?]
    ) -> Action {
        guard chain.first == me else { return .notActiveHere }
        let replicas = replicaNodes(chain, me: me)
        let missing = replicas.filter { (replicaHighs[$0] ?? nil) == nil }
        if !missing.isEmpty { return .wait(missing: missing) }
        var best: (node: NodeID, high: UInt64)?
        for r in replicas {
            guard let high = replicaHighs[r] ?? nil else { continue }
            if high > myHigh, best.map({ high > $0.high }) ?? true { best = (r, high) }
        }
        if let best { return .handOver(to: best.node) }
        return .release
    }

    /// Whether an unsettled copy of `vb` (every vBucket of a node that shut down uncleanly, until the cluster has
    /// looked at it) is settled by this node's current duties (`NodeRegistry.duties(bucket:)`, from the current map):
    /// when they make the copy a replica or nothing here (`.replica`, `.dead`) it follows another active's history
    /// from now on, and a later promotion is an ordinary failover. A copy the map makes active or pending (`.active`,
    /// `.pending`) stays unsettled: it is held when asked to serve, and the rounds compare it with its replicas.
    /// Without duties (nil: the node does not know the bucket's map) or for a vBucket they do not cover (`vb` out of
    /// range), nothing is known about the copy, so it stays unsettled too. Pure; ADR 0033 (amendment).
    public static func settles(vb: Int, duties: [VBucketDuty]?) -> Bool {
        guard let duties, vb >= 0, vb < duties.count else { return false }
        switch duties[vb] {
        case .replica, .dead: return true
        case .active, .pending: return false
        }
    }

    /// The replicas of a chain other than `me`, in chain order, each once.
    public static func replicaNodes(_ chain: [NodeID?], me: NodeID) -> [NodeID] {
        var out: [NodeID] = []
        for case let n? in chain.dropFirst() where n != me && !out.contains(n) { out.append(n) }
        return out
    }

    /// Why a hand-over of `vb` from `from` to `to` cannot be applied to `placement`, or nil when it can: `from` must
    /// still be the active, `to` one of its replicas, and no rebalance move may be under way for the vBucket.
    public static func handOverRefusal(_ placement: BucketPlacement, vb: Int, from: NodeID, to: NodeID) -> String? {
        guard vb >= 0, vb < placement.chains.count else { return "vBucket \(vb) out of range" }
        let chain = placement.chains[vb]
        guard chain.first == from else { return "\(from) is not the active of vBucket \(vb)" }
        guard chain.dropFirst().contains(to), to != from else { return "\(to) is not a replica of vBucket \(vb)" }
        if placement.forward[vb] != nil || placement.takeover.contains(vb) {
            return "vBucket \(vb) is being moved by a rebalance"
        }
        return nil
    }

    /// `chain` with `from` (the active) and `to` (a replica) swapped: `to` serves, `from` follows it.
    public static func handedOver(_ chain: [NodeID?], from: NodeID, to: NodeID) -> [NodeID?] {
        chain.map { n in n == from ? to : (n == to ? from : n) }
    }
}
