import SetteeJSON

/// Which node holds each vBucket: chain `[active, replica1, ...]` of node indexes, `-1` for none.
///
/// Invariants (checked by `init`):
/// 1. every chain has exactly `numReplicas + 1` entries (libvbucket and ns_server pad to equal length);
/// 2. node indexes are `-1` or in `0 ..< nodeCount`;
/// 3. no node appears twice in one chain (a replica is never on its active's node).
public struct VBucketMap: Sendable, Equatable, Hashable {
    public let numReplicas: Int
    public let chains: [[Int]]

    public init(numReplicas: Int, chains: [[Int]], nodeCount: Int) {
        precondition(numReplicas >= 0, "numReplicas \(numReplicas) < 0")
        for (vb, chain) in chains.enumerated() {
            precondition(chain.count == numReplicas + 1, "vb \(vb) chain \(chain) length != \(numReplicas + 1)")
            precondition(
                chain.allSatisfy { $0 >= -1 && $0 < nodeCount }, "vb \(vb) chain \(chain) nodeCount \(nodeCount)")
            let placed = chain.filter { $0 >= 0 }
            precondition(Set(placed).count == placed.count, "vb \(vb) chain \(chain) repeats a node")
        }
        self.numReplicas = numReplicas
        self.chains = chains
    }

    public var numVBuckets: Int { chains.count }

    /// The deterministic initial map: active of vb `i` is node `a = i % n`; with `r = i / n` (how many vBuckets
    /// of `a` came before), replica `k` (1-based) is node `(a + 1 + (r + k - 1) mod (n - 1)) % n` while `k < n`,
    /// else `-1`. So actives are balanced to within one vBucket, and each node's vBuckets rotate their first
    /// replica over all the other nodes: failing one node over spreads its actives evenly over every survivor
    /// (about `V/(n-1)` each) instead of doubling one neighbour's, as a ring (`(i + k) % n`) would. Offsets
    /// `1 ... n-1` of one chain are distinct, so no replica shares a node with its active or another replica.
    public static func build(numVBuckets: Int, nodeCount: Int, numReplicas: Int) -> VBucketMap {
        precondition(numVBuckets > 0, "numVBuckets \(numVBuckets)")
        precondition(nodeCount > 0, "nodeCount \(nodeCount)")
        precondition(numReplicas >= 0, "numReplicas \(numReplicas)")
        var chains: [[Int]] = []
        chains.reserveCapacity(numVBuckets)
        for vb in 0..<numVBuckets {
            let active = vb % nodeCount
            let round = vb / nodeCount
            var chain = [active]
            for k in 1...max(1, numReplicas) where k <= numReplicas {
                chain.append(k < nodeCount ? (active + 1 + (round + k - 1) % (nodeCount - 1)) % nodeCount : -1)
            }
            chains.append(chain)
        }
        return VBucketMap(numReplicas: numReplicas, chains: chains, nodeCount: nodeCount)
    }

    /// The active node index of `vbucket` (-1 when none).
    public func activeNode(of vbucket: Int) -> Int { chains[vbucket][0] }

    /// vBuckets whose active copy is on node `index`.
    public func activeVBuckets(onNode index: Int) -> [Int] {
        chains.indices.filter { chains[$0][0] == index }
    }

    /// vBuckets with a replica copy on node `index`.
    public func replicaVBuckets(onNode index: Int) -> [Int] {
        chains.indices.filter { chains[$0].dropFirst().contains(index) }
    }

    var json: JSON { .array(chains.map { .array($0.map { .int($0) }) }) }
}
