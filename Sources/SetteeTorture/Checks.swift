/// The fault harness's verdicts other than linearizability: lost acknowledged inserts, counter bounds,
/// availability per phase and split brain. Each is a pure function of what the run recorded.
public enum TortureChecks {
    /// Acknowledged inserts that the final read (after healing) did not find.
    public struct LostWrites: Hashable, Sendable {
        public var acknowledged: Int
        public var unknown: Int
        public var lost: [String]
    }

    /// Every insert acknowledged `ok` must be present at the end; `present` holds the keys the final read found.
    public static func lostInserts(_ entries: [TortureEntry], present: Set<String>) -> LostWrites {
        var acked: [String] = []
        var unknown = 0
        for e in entries {
            guard case .insert(let key) = e.operation else { continue }
            switch e.outcome {
            case .ok: acked.append(key)
            case .info: unknown += 1
            case .fail: break
            }
        }
        let lost = acked.filter { !present.contains($0) }.sorted()
        return LostWrites(acknowledged: acked.count, unknown: unknown, lost: lost)
    }

    /// One counter's verdict: the final value must lie within acknowledged ... acknowledged + unknown.
    public struct CounterVerdict: Hashable, Sendable {
        public var key: String
        public var acknowledged: Int
        public var unknown: Int
        public var final: Int?
        public var holds: Bool {
            guard let final else { return acknowledged == 0 }
            return final >= acknowledged && final <= acknowledged + unknown
        }
    }

    /// Checks each counter of `entries` against its final value (`finals`, nil when the key is missing).
    public static func counters(_ entries: [TortureEntry], finals: [String: Int]) -> [CounterVerdict] {
        var acked: [String: Int] = [:]
        var unknown: [String: Int] = [:]
        for e in entries {
            guard case .add(let key, let delta) = e.operation else { continue }
            switch e.outcome {
            case .ok: acked[key, default: 0] += delta
            case .info: unknown[key, default: 0] += delta
            case .fail: acked[key] = acked[key] ?? 0
            }
        }
        return acked.keys.sorted().map {
            CounterVerdict(key: $0, acknowledged: acked[$0] ?? 0, unknown: unknown[$0] ?? 0, final: finals[$0])
        }
    }

    /// Operations of one phase and how many succeeded.
    public struct Availability: Hashable, Sendable {
        public var phase: String
        public var total: Int
        public var ok: Int
        public var fraction: Double { total == 0 ? 1 : Double(ok) / Double(total) }
    }

    /// Availability per phase: operations invoked inside a phase, and the share that completed `ok`.
    public static func availability(_ entries: [TortureEntry], phases: [TorturePhase]) -> [Availability] {
        phases.map { phase in
            var total = 0
            var ok = 0
            for e in entries where e.invokeNs >= phase.startNs && e.invokeNs < phase.endNs {
                total += 1
                if case .ok = e.outcome { ok += 1 }
            }
            return Availability(phase: phase.name, total: total, ok: ok)
        }
    }

    /// What one node said of itself at one moment: the vBuckets for which its own map names it active.
    public struct ActiveClaim: Hashable, Sendable, Codable {
        public var node: String
        public var atNs: UInt64
        public var activeVBuckets: Set<Int>
        public init(node: String, atNs: UInt64, activeVBuckets: Set<Int>) {
            self.node = node
            self.atNs = atNs
            self.activeVBuckets = activeVBuckets
        }
    }

    /// A moment at which two nodes each believed themselves active for the same vBucket.
    public struct SplitBrain: Hashable, Sendable {
        public var vbucket: Int
        public var nodes: [String]
        public var atNs: UInt64
    }

    /// Groups claims into sampling rounds (claims within `roundNs` of the round's first) and reports every
    /// vBucket claimed by two nodes in one round. A node that is failed over but still believes it is active
    /// is what the issue calls a failed-over node that keeps serving.
    public static func splitBrain(_ claims: [ActiveClaim], roundNs: UInt64) -> [SplitBrain] {
        let sorted = claims.sorted { $0.atNs < $1.atNs }
        var found: [SplitBrain] = []
        var i = 0
        while i < sorted.count {
            let start = sorted[i].atNs
            var round: [String: Set<Int>] = [:]
            while i < sorted.count, sorted[i].atNs - start <= roundNs {
                round[sorted[i].node, default: []].formUnion(sorted[i].activeVBuckets)
                i += 1
            }
            var owners: [Int: [String]] = [:]
            for (node, vbs) in round { for vb in vbs { owners[vb, default: []].append(node) } }
            for (vb, nodes) in owners where nodes.count > 1 {
                found.append(SplitBrain(vbucket: vb, nodes: nodes.sorted(), atNs: start))
            }
        }
        return found.sorted { ($0.atNs, $0.vbucket) < ($1.atNs, $1.vbucket) }
    }
}
