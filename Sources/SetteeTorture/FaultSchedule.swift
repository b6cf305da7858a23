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

    public var description: String {
        switch self {
        case .kill(let n): return "kill -9 n\(n)"
        case .pause(let n): return "SIGSTOP n\(n)"
        case .isolate(let n): return "isolate n\(n) from its peers"
        case .isolateOrchestrator: return "isolate the orchestrator"
        case .cutLink(let a, let b): return "cut n\(a) <-> n\(b)"
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
    public static let kinds = ["kill", "pause", "isolate", "isolate-orchestrator", "partial-partition"]

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
            default: fault = .cutLink(min(a, b), max(a, b))
            }
            out.append(ScheduledFault(fault: fault, startMs: t, durationMs: faultMs))
            t += faultMs + settleMs
        }
        return out
    }
}
