import SetteeCore

/// A fault the harness injects into a running cluster, and heals after its duration.
public enum TortureFault: Hashable, Sendable, Codable, CustomStringConvertible {
    /// `kill -9` the node; restarted (same data directory) at heal.
    case kill(node: Int)
    /// SIGSTOP the node; SIGCONT at heal.
    case pause(node: Int)
    /// Cut the node off from every other node; clients still reach it.
    case isolate(node: Int)
    /// Cut the node that is orchestrator when the fault starts off from every other node.
    case isolateOrchestrator
    /// Cut the link between two nodes only (a partial partition: both still see the rest).
    case cutLink(Int, Int)
    /// Fill the node's data filesystem (a small tmpfs of its own) to the last byte; freed at heal.
    case diskFull(node: Int)
    /// Rebalance the node out of the cluster while the link between two other nodes (or the node and
    /// another, on small clusters) goes down and up every second; the node is added back at heal.
    case rebalanceOutWhileFlapping(node: Int, linkA: Int, linkB: Int)

    public var description: String {
        switch self {
        case .kill(let n): return "kill -9 n\(n)"
        case .pause(let n): return "SIGSTOP n\(n)"
        case .isolate(let n): return "isolate n\(n) from its peers"
        case .isolateOrchestrator: return "isolate the orchestrator"
        case .cutLink(let a, let b): return "cut n\(a) <-> n\(b)"
        case .diskFull(let n): return "fill n\(n)'s disk"
        case .rebalanceOutWhileFlapping(let n, let a, let b):
            return "rebalance n\(n) out while n\(a) <-> n\(b) flaps"
        }
    }

    /// The scenario name used on the command line.
    public var kind: String {
        switch self {
        case .kill: return "kill"
        case .pause: return "pause"
        case .isolate: return "isolate"
        case .isolateOrchestrator: return "isolate-orchestrator"
        case .cutLink: return "partial-partition"
        case .diskFull: return "disk-full"
        case .rebalanceOutWhileFlapping: return "rebalance-flap"
        }
    }
}

/// One fault of a run: when it starts (from the start of the workload), how long it lasts.
public struct ScheduledFault: Hashable, Sendable, Codable {
    public var fault: TortureFault
    public var startMs: Int
    public var durationMs: Int
}

/// Builds a run's fault schedule from a seed, so a run replays from the seed it printed.
public enum FaultSchedule {
    public static let kinds = [
        "kill", "pause", "isolate", "isolate-orchestrator", "partial-partition", "disk-full", "rebalance-flap",
    ]

    /// `rounds` faults of `kind` on a cluster of `nodes`, each after `settleMs` of quiet and lasting
    /// `faultMs`. Nodes are drawn with the seeded generator; node 0 is drawn like any other.
    public static func make(kind: String, nodes: Int, rounds: Int, settleMs: Int, faultMs: Int, seed: UInt64)
        -> [ScheduledFault]?
    {
        guard nodes >= 2, kinds.contains(kind) else { return nil }
        var rng = SplitMix64(seed: seed)
        var out: [ScheduledFault] = []
        var t = settleMs
        for _ in 0..<rounds {
            let a = Int.random(in: 0..<nodes, using: &rng)
            var b = Int.random(in: 0..<(nodes - 1), using: &rng)
            if b >= a { b += 1 }
            let fault: TortureFault
            switch kind {
            case "kill": fault = .kill(node: a)
            case "pause": fault = .pause(node: a)
            case "isolate": fault = .isolate(node: a)
            case "isolate-orchestrator": fault = .isolateOrchestrator
            case "disk-full": fault = .diskFull(node: a)
            case "rebalance-flap":
                // The flapping link avoids the node leaving when there are others to cut.
                let others = (0..<nodes).filter { $0 != a }
                let pair = others.count >= 2 ? others.shuffled(using: &rng).prefix(2).sorted() : [a, b].sorted()
                fault = .rebalanceOutWhileFlapping(node: a, linkA: pair[0], linkB: pair[1])
            default: fault = .cutLink(min(a, b), max(a, b))
            }
            out.append(ScheduledFault(fault: fault, startMs: t, durationMs: faultMs))
            t += faultMs + settleMs
        }
        return out
    }
}
