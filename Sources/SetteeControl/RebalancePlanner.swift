import SetteeClusterMap
import SetteeCore

// Rebalance planning: from the current vBucket map over the old node list to a balanced target map over
// the new node list, moving as little data as possible.
//
// The planner is a pure function; the orchestrator (a shell) executes the moves it returns.
//
// Guarantees of `RebalancePlanner.plan` (the property tests check each one):
// 1. every chain of the target has `numReplicas + 1` entries; with `n` nodes the first `min(R, n-1)` replica
//    slots are filled and the rest are -1;
// 2. no node appears twice in a chain, so no replica shares the active's node;
// 3. each node's active count is `floor(V/n)` or `ceil(V/n)`; each node's replica count is
//    `floor(V*R'/n)` or `ceil(V*R'/n)` where `R' = min(R, n-1)`;
// 4. the same inputs give the same plan;
// 5. moves are exactly the vBuckets whose chain (as node names) changed;
// 6. the number of vBuckets whose active changes is the minimum over all balanced targets: a kept node keeps
//    `min(current actives, quota)` of its actives, and the `V mod n` larger quotas go to the nodes that
//    already hold the most actives;
// 7. copies to build stay close to the lower bound "sum over nodes of (target copies - copies held today)":
//    every held copy stays as a replica unless its chain is too long or its node is over quota. Not always exactly
//    the bound (moving the active off a full chain forces a copy out); the tests allow 10% + 8 above it.
//
//   current map (old indexes) ──translate──▶ chains of kept nodes ──actives──▶ ──replicas──▶ target map
//                                                                   keep       keep all copies
//                                                                   promote    trim long chains
//                                                                   fill       shed over quota
//                                                                              fill by room
//                                                                              repair dead ends

/// One vBucket whose chain changes during a rebalance.
public struct VBucketMove: Sendable, Equatable, Hashable {
    /// The vBucket.
    public let vbucket: VBucketID
    /// Its chain before, as node names (`nil` for an empty slot). Ejected nodes still appear here.
    public let from: [NodeID?]
    /// Its chain after.
    public let to: [NodeID?]
    /// Where the new copies stream from: the current active (alive even when being ejected), or `nil`
    /// when the vBucket has no copy anywhere (lost in a failover) and is created empty.
    public let source: NodeID?
    /// Nodes in `to` that hold no copy today: each needs a replica built by streaming from `source`.
    public let newCopies: [NodeID]
    /// Nodes that hold a copy today and none after the move: they drop it once the map is published.
    public let droppedCopies: [NodeID]

    public init(
        vbucket: VBucketID, from: [NodeID?], to: [NodeID?], source: NodeID?, newCopies: [NodeID],
        droppedCopies: [NodeID]
    ) {
        self.vbucket = vbucket
        self.from = from
        self.to = to
        self.source = source
        self.newCopies = newCopies
        self.droppedCopies = droppedCopies
    }

    /// Whether the active copy changes node.
    public var changesActive: Bool { from.first.flatMap { $0 } != to.first.flatMap { $0 } }
    /// Whether the new active already holds a copy (a replica or the active itself), so the takeover
    /// needs no full copy.
    public var promotesExistingCopy: Bool {
        guard let active = to.first.flatMap({ $0 }) else { return false }
        return from.contains(active)
    }
}

/// The result of planning a rebalance.
public struct RebalancePlan: Sendable, Equatable {
    /// The new node list: `target`'s node indexes point into it.
    public let nodes: [NodeID]
    /// The balanced target map.
    public let target: VBucketMap
    /// One entry per vBucket whose chain changes, in vBucket order.
    public let moves: [VBucketMove]

    /// Total copies to build across all moves.
    public var copiesToBuild: Int { moves.reduce(0) { $0 + $1.newCopies.count } }
}

/// Plans rebalances. Pure and deterministic.
public enum RebalancePlanner {
    /// Plans the move from `current` (indexes into `oldNodes`) to a balanced map over `newNodes`.
    ///
    /// `newNodes` may add nodes, drop (eject) nodes, or both; nodes keep their identity by name, so a node's
    /// index may differ between the two lists. Nodes absent from `newNodes` hold nothing in the target.
    public static func plan(current: VBucketMap, oldNodes: [NodeID], newNodes: [NodeID]) -> RebalancePlan {
        precondition(!newNodes.isEmpty, "rebalance to an empty node list")
        precondition(Set(newNodes).count == newNodes.count, "duplicate node in \(newNodes)")
        precondition(Set(oldNodes).count == oldNodes.count, "duplicate node in \(oldNodes)")
        precondition(
            current.chains.allSatisfy { $0.allSatisfy { $0 < oldNodes.count } },
            "map indexes past \(oldNodes.count) old nodes")

        let n = newNodes.count
        let vbCount = current.numVBuckets
        let numReplicas = current.numReplicas
        let replicasPlaced = min(numReplicas, n - 1)

        // Old index -> new index (or -1 when the node is ejected).
        let newIndex = Dictionary(uniqueKeysWithValues: newNodes.enumerated().map { ($1, $0) })
        let translate: [Int] = oldNodes.map { newIndex[$0] ?? -1 }
        // Chains of the current map over the new indexes, ejected nodes and empty slots removed.
        let kept: [[Int]] = current.chains.map { chain in
            chain.compactMap { $0 >= 0 && translate[$0] >= 0 ? translate[$0] : nil }
        }
        let keptActive: [Int] = current.chains.map { $0[0] >= 0 ? translate[$0[0]] : -1 }

        // ---- Actives -------------------------------------------------------------------------------
        var currentActives = [Int](repeating: 0, count: n)
        for a in keptActive where a >= 0 { currentActives[a] += 1 }
        let activeQuota = quotas(
            total: vbCount, nodes: n,
            preferExtra: { x, y in
                currentActives[x] != currentActives[y] ? currentActives[x] > currentActives[y] : x < y
            })
        var active = [Int](repeating: -1, count: vbCount)
        var activeCount = [Int](repeating: 0, count: n)
        // Pass 1: keep an active where it is while its node has room. vBuckets with more copies are kept first: moving
        // the active of a chain with a free replica slot lets the old active stay on as a replica at no cost,
        // while moving a full chain's active forces one of its copies out (and a copy to be built elsewhere).
        let copyCount: [Int] = kept.map(\.count)
        let byCopies: [Int] = (0..<vbCount).sorted { (x: Int, y: Int) -> Bool in
            copyCount[x] != copyCount[y] ? copyCount[x] > copyCount[y] : x < y
        }
        for vb in byCopies {
            let a = keptActive[vb]
            if a >= 0 && activeCount[a] < activeQuota[a] {
                active[vb] = a
                activeCount[a] += 1
            }
        }
        // Pass 2: promote a kept replica (it has the data) whose node has room.
        for vb in 0..<vbCount where active[vb] < 0 {
            if let r = kept[vb].first(where: { $0 != keptActive[vb] && activeCount[$0] < activeQuota[$0] }) {
                active[vb] = r
                activeCount[r] += 1
            }
        }
        // Pass 3: the rest go to the node with the most room left.
        for vb in 0..<vbCount where active[vb] < 0 {
            let target = mostRoom(quota: activeQuota, used: activeCount, excluding: [])!
            active[vb] = target
            activeCount[target] += 1
        }

        // ---- Replicas ------------------------------------------------------------------------------
        var currentReplicas = [Int](repeating: 0, count: n)
        for vb in 0..<vbCount { for node in kept[vb] where node != active[vb] { currentReplicas[node] += 1 } }
        // A node's replica capacity is V minus its actives, so the larger replica quotas go to the nodes
        // with fewer actives first (required when R' = n-1), then to nodes already holding more copies.
        let replicaQuota = quotas(
            total: vbCount * replicasPlaced, nodes: n,
            preferExtra: { x, y in
                if activeCount[x] != activeCount[y] { return activeCount[x] < activeCount[y] }
                if currentReplicas[x] != currentReplicas[y] { return currentReplicas[x] > currentReplicas[y] }
                return x < y
            })
        var replicas = [[Int]](repeating: [], count: vbCount)
        var replicaCount = [Int](repeating: 0, count: n)
        // Pass 1: every copy that exists stays, as a replica (old replicas in rank order, then a demoted old active).
        for vb in 0..<vbCount {
            let holders =
                kept[vb].dropFirst(keptActive[vb] >= 0 ? 1 : 0) + (keptActive[vb] >= 0 ? [keptActive[vb]] : [])
            for node in holders where node != active[vb] && !replicas[vb].contains(node) {
                replicas[vb].append(node)
                replicaCount[node] += 1
            }
        }
        // Pass 2: a chain with more copies than slots (a demoted active, or fewer nodes than replicas) drops the
        // copy whose node is furthest over its quota (the last such in the chain on ties).
        for vb in 0..<vbCount {
            while replicas[vb].count > replicasPlaced {
                var drop = 0
                for (i, node) in replicas[vb].enumerated()
                where replicaCount[node] - replicaQuota[node] >= replicaCount[replicas[vb][drop]]
                    - replicaQuota[replicas[vb][drop]]
                {
                    drop = i
                }
                replicaCount[replicas[vb][drop]] -= 1
                replicas[vb].remove(at: drop)
            }
        }
        // Pass 3: nodes over quota shed copies. Every node then keeps min(copies it holds, quota), so the copies
        // to build are exactly each node's shortfall: the lower bound.
        for vb in 0..<vbCount {
            replicas[vb].removeAll { node in
                guard replicaCount[node] > replicaQuota[node] else { return false }
                replicaCount[node] -= 1
                return true
            }
        }
        // Pass 3b: copies kept from the old layout can pile one active node's replicas onto one other node (a cluster
        // grown one node at a time keeps every replica the second node took when it joined), so a failover would hand
        // that node most of the failed node's actives. A node holding more than `spreadSlack` times its fair share of
        // one active node's replicas gives up the excess, which pass 4 places on the least paired nodes. This builds
        // copies beyond the lower bound only when the layout is skewed; a balanced map keeps every copy.
        if replicasPlaced >= 1 && n > 2 {
            var pairs = [[Int]](repeating: [Int](repeating: 0, count: n), count: n)
            var activesOf = [Int](repeating: 0, count: n)
            for vb in 0..<vbCount {
                activesOf[active[vb]] += 1
                for node in replicas[vb] { pairs[active[vb]][node] += 1 }
            }
            let limit: [Int] = activesOf.map { a in
                (a * replicasPlaced * spreadSlackPercent / 100 + (n - 2)) / (n - 1) + 1
            }
            for vb in 0..<vbCount {
                let a = active[vb]
                replicas[vb].removeAll { node in
                    guard pairs[a][node] > limit[a] else { return false }
                    pairs[a][node] -= 1
                    replicaCount[node] -= 1
                    return true
                }
            }
        }
        // Pass 4: fill empty slots on a node with room that is not already in the chain, preferring the node that
        // holds the fewest replicas of this active's node's vBuckets (then the most room): each node's replicas are
        // spread over all the others, so a failover promotes copies on every survivor rather than on one.
        // The first replica is counted apart: it is the copy a failover promotes when the copies are level.
        var paired = [[[Int]]](
            repeating: [[Int]](repeating: [Int](repeating: 0, count: n), count: n), count: 2)
        for vb in 0..<vbCount {
            for (rank, node) in replicas[vb].enumerated() { paired[min(rank, 1)][active[vb]][node] += 1 }
        }
        for vb in 0..<vbCount {
            while replicas[vb].count < replicasPlaced {
                let chain = [active[vb]] + replicas[vb]
                let rank = min(replicas[vb].count, 1)
                if let node = leastPaired(
                    paired[rank][active[vb]], quota: replicaQuota, used: replicaCount, excluding: chain)
                {
                    replicas[vb].append(node)
                    replicaCount[node] += 1
                    paired[rank][active[vb]][node] += 1
                } else {
                    // Dead end: every node with room is already in this chain. Find another vBucket `w` with a
                    // replica `m` that this chain lacks, where a node `p` with room can take `m`'s place in `w`.
                    repair(vb: vb, active: active, replicas: &replicas, quota: replicaQuota, used: &replicaCount)
                }
            }
        }

        // Pass 5: in chains that change anyway, the replica put first is the one whose node is first replica for
        // the fewest of this active's vBuckets so far. Order costs no copy, and a copy kept from the old layout
        // (say, the one node every vBucket lived on) would otherwise be first for all of them.
        let before: [[Int]] = current.chains.map { chain in
            var out = chain.map { $0 >= 0 ? translate[$0] : -1 }
            while out.count < numReplicas + 1 { out.append(-1) }
            return out
        }
        func padded(_ vb: Int) -> [Int] {
            var chain = [active[vb]] + replicas[vb]
            while chain.count < numReplicas + 1 { chain.append(-1) }
            return chain
        }
        var firstPaired = [[Int]](repeating: [Int](repeating: 0, count: n), count: n)
        let changing = (0..<vbCount).map { padded($0) != before[$0] }
        for vb in 0..<vbCount where !changing[vb] {
            if let first = replicas[vb].first { firstPaired[active[vb]][first] += 1 }
        }
        for vb in 0..<vbCount where changing[vb] && !replicas[vb].isEmpty {
            let counts = firstPaired[active[vb]]
            var pick = 0
            for (i, node) in replicas[vb].enumerated() where counts[node] < counts[replicas[vb][pick]] { pick = i }
            if pick != 0 { replicas[vb].insert(replicas[vb].remove(at: pick), at: 0) }
            firstPaired[active[vb]][replicas[vb][0]] += 1
        }

        var chains: [[Int]] = []
        chains.reserveCapacity(vbCount)
        for vb in 0..<vbCount { chains.append(padded(vb)) }
        let target = VBucketMap(numReplicas: numReplicas, chains: chains, nodeCount: n)

        // ---- Moves ---------------------------------------------------------------------------------
        var moves: [VBucketMove] = []
        for vb in 0..<vbCount {
            let from: [NodeID?] = current.chains[vb].map { $0 >= 0 ? oldNodes[$0] : nil }
            let to: [NodeID?] = chains[vb].map { $0 >= 0 ? newNodes[$0] : nil }
            if from == to { continue }
            // Chains hold at most four nodes: array scans beat hashing names here.
            let holders = from.compactMap { $0 }
            let after = to.compactMap { $0 }
            moves.append(
                VBucketMove(
                    vbucket: VBucketID(UInt16(vb)), from: from, to: to, source: from[0],
                    newCopies: to.compactMap { $0 }.filter { !holders.contains($0) },
                    droppedCopies: from.compactMap { $0 }.filter { !after.contains($0) }))
        }
        return RebalancePlan(nodes: newNodes, target: target, moves: moves)
    }

    /// How far over its fair share (as a percentage of it) one node may hold one active node's replicas before a
    /// rebalance moves the excess: 115 keeps a failover's extra load on any survivor near 15 % of an even split
    /// while a rebalance of a balanced map builds no copy beyond its lower bound.
    static let spreadSlackPercent = 115

    /// Splits `total` over `nodes` as evenly as possible; the `total mod nodes` nodes ranked first by
    /// `preferExtra` get one more.
    static func quotas(total: Int, nodes: Int, preferExtra: (Int, Int) -> Bool) -> [Int] {
        var result = [Int](repeating: total / nodes, count: nodes)
        for node in (0..<nodes).sorted(by: preferExtra).prefix(total % nodes) { result[node] += 1 }
        return result
    }

    /// The node with the most room left (lowest index on ties), not in `excluding`; nil when none has room.
    static func mostRoom(quota: [Int], used: [Int], excluding: [Int]) -> Int? {
        var best: Int? = nil
        for node in quota.indices where !excluding.contains(node) && used[node] < quota[node] {
            if let b = best, quota[b] - used[b] >= quota[node] - used[node] { continue }
            best = node
        }
        return best
    }

    /// The node with room, not in `excluding`, that shares the fewest vBuckets with the active (`paired[node]`);
    /// then the most room; then the lowest index. nil when none has room.
    static func leastPaired(_ paired: [Int], quota: [Int], used: [Int], excluding: [Int]) -> Int? {
        var best: Int? = nil
        for node in quota.indices where !excluding.contains(node) && used[node] < quota[node] {
            if let b = best {
                if paired[b] < paired[node] { continue }
                if paired[b] == paired[node] && quota[b] - used[b] >= quota[node] - used[node] { continue }
            }
            best = node
        }
        return best
    }

    /// Fills one replica slot of `vb` when every node with room is already in its chain, by a swap that keeps
    /// all counts within quota: some `w` gives its replica `m` (absent from `vb`'s chain) to `vb` and takes `p`
    /// (a node with room, absent from `w`'s chain) instead.
    static func repair(vb: Int, active: [Int], replicas: inout [[Int]], quota: [Int], used: inout [Int]) {
        let chain = [active[vb]] + replicas[vb]
        let withRoom = quota.indices.filter { used[$0] < quota[$0] }
        for w in replicas.indices where w != vb {
            let wChain = [active[w]] + replicas[w]
            for (slot, m) in replicas[w].enumerated() where !chain.contains(m) {
                if let p = withRoom.first(where: { !wChain.contains($0) }) {
                    replicas[w][slot] = p
                    used[p] += 1
                    replicas[vb].append(m)
                    return
                }
            }
        }
        preconditionFailure("no replica swap fills vb \(vb) chain \(chain); quota \(quota) used \(used)")
    }
}
