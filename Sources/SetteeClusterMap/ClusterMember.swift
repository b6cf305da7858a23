import SetteeCore

/// One node of the cluster as the cluster config lists it (Couchbase's `clusterMembership`).
///
/// Lifecycle:
/// ```
///   addNode ──▶ inactiveAdded ──rebalance──▶ active ──failOver──▶ inactiveFailed
///                                              ▲                     │ setRecoveryType + rebalance
///                                              └─────────────────────┘
///   active ──rebalance with ejectedNodes──▶ (removed from the config)
/// ```
public struct ClusterMember: Sendable, Codable, Equatable, Hashable {
    public enum Membership: String, Sendable, Codable, Hashable {
        /// Holds vBuckets (or may, after the next rebalance).
        case active
        /// Joined, holds nothing until a rebalance includes it.
        case inactiveAdded
        /// Failed over: holds nothing; comes back only through recovery and a rebalance.
        case inactiveFailed
    }

    public var node: NodeInfo
    public var membership: Membership
    /// Set by `/controller/setRecoveryType` on a failed-over node ("full" or "delta").
    public var recoveryType: String?

    public init(node: NodeInfo, membership: Membership, recoveryType: String? = nil) {
        self.node = node
        self.membership = membership
        self.recoveryType = recoveryType
    }

    public var id: NodeID { node.otpNode }
}

/// One bucket's placement in the cluster config: chains of node names (`nil` for an empty slot), so the
/// placement survives members being added or removed (indexes would shift).
public struct BucketPlacement: Sendable, Codable, Equatable, Hashable {
    /// `[active, replica1, ...]` per vBucket.
    public var chains: [[NodeID?]]
    /// During a rebalance: the target chains of vBuckets being moved (Couchbase's `vBucketMapForward`).
    /// Nodes in a forward chain but not in the current one build incoming copies.
    public var forward: [Int: [NodeID?]]
    /// vBuckets in takeover: their current active stops taking writes (pending) until the switch.
    public var takeover: Set<Int>
    /// vBuckets of `forward` whose active counts the forward chain for durability (kv_engine's second chain): a
    /// rebalance adds a vBucket once the chain's new copies have caught up, as ns_server sets the second chain only
    /// in a move's later stages. Counted from the start of the move, every durable write to a moving vBucket waited
    /// for the new copy's backfill (ADR 0119).
    public var dual: Set<Int>

    public init(
        chains: [[NodeID?]], forward: [Int: [NodeID?]] = [:], takeover: Set<Int> = [], dual: Set<Int> = []
    ) {
        self.chains = chains
        self.forward = forward
        self.takeover = takeover
        self.dual = dual
    }

    enum CodingKeys: String, CodingKey { case chains, forward, takeover, dual }

    /// A document written before `dual` existed decodes with none.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        chains = try c.decode([[NodeID?]].self, forKey: .chains)
        forward = try c.decode([Int: [NodeID?]].self, forKey: .forward)
        takeover = try c.decode(Set<Int>.self, forKey: .takeover)
        dual = try c.decodeIfPresent(Set<Int>.self, forKey: .dual) ?? []
    }

    /// The deterministic initial placement of a new bucket over `nodes` (see `VBucketMap.build`).
    public static func initial(numVBuckets: Int, numReplicas: Int, nodes: [NodeID]) -> BucketPlacement {
        let map = VBucketMap.build(numVBuckets: numVBuckets, nodeCount: nodes.count, numReplicas: numReplicas)
        return BucketPlacement(chains: map.chains.map { $0.map { $0 >= 0 ? nodes[$0] : nil } })
    }

    /// The placement as an index map over `nodes`; names not in `nodes` become -1, and so does a later mention of a
    /// node its chain already named (validation refuses such a document, `repeatedNode(in:)`; this keeps
    /// `VBucketMap`'s invariant whatever placement reaches it, so no document can trap the node).
    public func indexMap(over nodes: [NodeID], numReplicas: Int) -> VBucketMap {
        var index: [NodeID: Int] = [:]
        for (i, n) in nodes.enumerated() { index[n] = i }
        let chains = chains.map { chain -> [Int] in
            var seen = Set<Int>()
            var out = chain.prefix(numReplicas + 1).map { name -> Int in
                guard let i = name.flatMap({ index[$0] }), seen.insert(i).inserted else { return -1 }
                return i
            }
            while out.count < numReplicas + 1 { out.append(-1) }
            return out
        }
        return VBucketMap(numReplicas: numReplicas, chains: chains, nodeCount: nodes.count)
    }

    /// The first node `chain` names twice, or nil. Empty slots (`nil`, or an empty name) may repeat: they name no
    /// node. A node holds at most one copy of a vBucket, so no honest placement repeats a node.
    public static func repeatedNode(in chain: [NodeID?]) -> NodeID? {
        var seen = Set<NodeID>()
        for case let name? in chain where !name.rawValue.isEmpty {
            if !seen.insert(name).inserted { return name }
        }
        return nil
    }

    /// This placement with every later mention of a node its chain (current or forward) already named turned into
    /// an empty slot, and how many slots that emptied. The first mention is kept, so an active stays the active;
    /// what is dropped is a replica slot the same node could never have filled twice.
    public func droppingRepeatedNodes() -> (placement: BucketPlacement, dropped: Int) {
        var dropped = 0
        func clean(_ chain: [NodeID?]) -> [NodeID?] {
            var seen = Set<NodeID>()
            return chain.map { name in
                guard let name, !name.rawValue.isEmpty else { return name }
                if seen.insert(name).inserted { return name }
                dropped += 1
                return nil
            }
        }
        var p = self
        p.chains = chains.map(clean)
        p.forward = forward.mapValues(clean)
        return (p, dropped)
    }

    /// Builds a placement from an index map over `nodes`.
    public static func from(_ map: VBucketMap, nodes: [NodeID]) -> BucketPlacement {
        BucketPlacement(chains: map.chains.map { $0.map { $0 >= 0 ? nodes[$0] : nil } })
    }

    /// Active vBuckets per node name.
    public func activeCounts() -> [NodeID: Int] {
        var counts: [NodeID: Int] = [:]
        for chain in chains { if let a = chain.first ?? nil { counts[a, default: 0] += 1 } }
        return counts
    }
}

/// Couchbase's `/settings/autoFailover`: off by default; when on, the orchestrator fails over a node that has
/// been unreachable for `timeout` seconds (at least `minimumTimeout`), at most `maxCount` times until reset.
public struct AutoFailoverSettings: Sendable, Codable, Equatable, Hashable {
    public static let minimumTimeout = 5
    public static let maximumTimeout = 3600
    public var enabled = false
    public var timeout = 120
    public var maxCount = 1
    /// Auto-failovers done since the last reset.
    public var count = 0
    public init() {}
}
