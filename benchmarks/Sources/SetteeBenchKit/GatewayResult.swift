import Histogram

/// The gateway phases (`settee-bench gateway --phase`).
public enum GatewayPhase: String, Codable, Sendable, CaseIterable {
    /// `_revs_diff` + `_bulk_docs?new_edits=false` batches, as a replicator pushes.
    case push
    /// `_changes?style=all_docs` pages + `_bulk_get?revs=true`, as a fresh replicator pulls.
    case pull
    /// N longpoll `_changes` feeds waiting, one write, time until each feed answers with it.
    case fanout
}

/// What one phase measured against one gateway in one round (also the `--json` rows).
public struct GatewayPhaseResult: Codable, Sendable {
    public var target: String
    public var phase: GatewayPhase
    public var round: Int
    /// push: documents accepted; pull: documents received; fanout: feeds that delivered the write.
    public var docs: Int
    public var seconds: Double
    /// push/pull: `docs / seconds`; fanout: 0.
    public var docsPerSecond: Double
    /// HTTP requests sent (fan-out: the long polls and the write).
    public var requests: Int
    public var errors: [String: Int]
    /// push: one batch (`_revs_diff` + `_bulk_docs`); pull: one `_bulk_get`; fanout: write sent → row arrived.
    public var latencyMicros: LatencySummary
    /// The same distribution as percentile points (see `LatencyCurve`).
    public var latencyCurve: [PercentilePoint]
    /// Per request kind (`revs_diff`, `bulk_docs`, `changes`, `bulk_get`, `write`).
    public var requestMicros: [String: LatencySummary]
    /// fanout: feeds opened; feeds whose reply came before the write (not measured); feeds that gave up.
    public var clients: Int?
    public var early: Int?
    public var missed: Int?

    public var errorCount: Int { errors.values.reduce(0, +) }

    init(
        target: String, phase: GatewayPhase, round: Int, docs: Int, seconds: Double, requests: Int,
        errors: [String: Int], latency: Histogram<UInt64>, requestLatency: [String: Histogram<UInt64>]
    ) {
        self.target = target
        self.phase = phase
        self.round = round
        self.docs = docs
        self.seconds = seconds
        docsPerSecond = phase != .fanout && seconds > 0 ? Double(docs) / seconds : 0
        self.requests = requests
        self.errors = errors
        latencyMicros = LatencySummary(latency)
        latencyCurve = LatencyCurve.points(latency)
        requestMicros = requestLatency.mapValues { LatencySummary($0) }
    }
}

/// Per phase and target over the rounds: medians with their spread, ratios against the first target.
public struct GatewaySummary: Codable, Sendable {
    public var phase: GatewayPhase
    public var target: String
    public var rounds: Int
    public var medianDocsPerSecond: Double
    public var minDocsPerSecond: Double
    public var maxDocsPerSecond: Double
    public var medianP50Micros: Double
    public var medianP99Micros: Double
    public var maxMicros: Double
    /// push/pull: throughput ratio to the first target; fanout: p99 ratio (lower is better).
    public var ratioMedian: Double
    public var ratioMin: Double
    public var ratioMax: Double
    public var docs: Int
    /// fanout: feeds opened and feeds that delivered the write, summed over the rounds.
    public var clients: Int?
    public var errors: Int
    public var latencyCurve: [PercentilePoint]

    /// Summaries for `results` (any order), targets in `targets` order within each phase.
    public static func make(_ results: [GatewayPhaseResult], targets: [String]) -> [GatewaySummary] {
        var out: [GatewaySummary] = []
        for phase in GatewayPhase.allCases {
            let first = results.filter { $0.phase == phase && $0.target == targets.first }
            func ratio(_ r: GatewayPhaseResult) -> Double? {
                guard let base = first.first(where: { $0.round == r.round }) else { return nil }
                if phase == .fanout {
                    return base.latencyMicros.p99 > 0 ? r.latencyMicros.p99 / base.latencyMicros.p99 : nil
                }
                return base.docsPerSecond > 0 ? r.docsPerSecond / base.docsPerSecond : nil
            }
            for target in targets {
                let runs = results.filter { $0.phase == phase && $0.target == target }
                guard !runs.isEmpty else { continue }
                let tput = runs.map(\.docsPerSecond)
                let ratios = runs.compactMap(ratio)
                out.append(
                    GatewaySummary(
                        phase: phase, target: target, rounds: runs.count, medianDocsPerSecond: medianOf(tput),
                        minDocsPerSecond: tput.min()!, maxDocsPerSecond: tput.max()!,
                        medianP50Micros: medianOf(runs.map(\.latencyMicros.p50)),
                        medianP99Micros: medianOf(runs.map(\.latencyMicros.p99)),
                        maxMicros: runs.map(\.latencyMicros.max).max()!, ratioMedian: medianOf(ratios),
                        ratioMin: ratios.min() ?? 0, ratioMax: ratios.max() ?? 0, docs: runs.map(\.docs).reduce(0, +),
                        clients: phase == .fanout ? runs.compactMap(\.clients).reduce(0, +) : nil,
                        errors: runs.map(\.errorCount).reduce(0, +),
                        latencyCurve: LatencyCurve.median(runs.map(\.latencyCurve))))
            }
        }
        return out
    }
}

/// The `settee-bench gateway --json` file.
public struct GatewayOutput: Codable, Sendable {
    public var docs: Int
    public var docSize: Int
    public var batch: Int
    public var connections: Int
    public var clients: Int
    public var rounds: Int
    public var results: [GatewayPhaseResult]
    public var summary: [GatewaySummary]

    public init(
        docs: Int, docSize: Int, batch: Int, connections: Int, clients: Int, rounds: Int,
        results: [GatewayPhaseResult], summary: [GatewaySummary]
    ) {
        self.docs = docs
        self.docSize = docSize
        self.batch = batch
        self.connections = connections
        self.clients = clients
        self.rounds = rounds
        self.results = results
        self.summary = summary
    }
}

func medianOf(_ values: [Double]) -> Double {
    let s = values.sorted()
    guard !s.isEmpty else { return 0 }
    return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
}
