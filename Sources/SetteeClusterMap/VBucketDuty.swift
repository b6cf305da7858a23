import SetteeCore

/// What one node must do for one vBucket, derived from the cluster map (and a rebalance's target map).
///
/// ```
///   chain[0] == me                      → active(replicas: the rest of the chain)
///   me in chain[1...], chain[0] exists  → replica(source: chain[0])
///   me only in the forward chain        → replica(source: chain[0])   (an incoming copy during a move)
///   anything else                       → dead                        (data, if any, is kept)
/// ```
public enum VBucketDuty: Sendable, Hashable {
    /// This node holds the active copy; `replicas` are the other copies that count toward majority durability.
    /// `moving` is the chain a rebalance is moving the vBucket to (nil when it is not moving): until the switch,
    /// a durable write needs a majority of it too, as kv_engine's second replication chain does, so that the copies
    /// the new chain keeps hold every acknowledged write when the old ones are dropped.
    case active(replicas: [NodeID], moving: [NodeID?]? = nil)
    /// Follow the active copy on `source`.
    case replica(source: NodeID)
    /// Takeover: refuse client writes with NOT_MY_VBUCKET, keep serving streams.
    case pending
    /// Not ours (no copy here, or a replica whose active is lost: its data is kept until a failover).
    case dead

    /// `me`'s duty for vBucket `vb` of placement `p`: pending while the vBucket is in takeover or the node is fenced;
    /// an active counts the forward chain only once a rebalance has added the vBucket to `p.dual` (its new copies
    /// caught up). Pure.
    public static func duty(of me: NodeID, vb: Int, in p: BucketPlacement, fenced: Bool = false) -> VBucketDuty {
        let chain = vb >= 0 && vb < p.chains.count ? p.chains[vb] : []
        let active = chain.first ?? nil
        if active == me {
            if p.takeover.contains(vb) || fenced { return .pending }
            return .active(
                replicas: chain.dropFirst().compactMap { $0 }.filter { $0 != me },
                moving: p.dual.contains(vb) ? p.forward[vb] : nil)
        }
        guard let active else { return .dead }
        if chain.dropFirst().contains(me) || (p.forward[vb]?.contains(me) ?? false) { return .replica(source: active) }
        return .dead
    }

    /// This node's duty for every vBucket of `map`, whose chains index `nodes`. `forward` (a rebalance's
    /// target chains over the same `nodes`, or nil) adds replica duties for copies this node is about to
    /// receive. Pure.
    public static func duties(
        for node: NodeID, nodes: [NodeID], map: VBucketMap, forward: VBucketMap? = nil
    ) -> [VBucketDuty] {
        precondition(
            forward == nil || forward!.numVBuckets == map.numVBuckets,
            "forward map has \(forward!.numVBuckets) vBuckets, current \(map.numVBuckets)")
        func names(_ chain: [Int]) -> [NodeID?] {
            chain.map { $0 >= 0 && $0 < nodes.count ? nodes[$0] : nil }
        }
        var placement = BucketPlacement(chains: map.chains.map(names))
        for (vb, chain) in (forward?.chains ?? []).enumerated() { placement.forward[vb] = names(chain) }
        return map.chains.indices.map { duty(of: node, vb: $0, in: placement) }
    }
}
