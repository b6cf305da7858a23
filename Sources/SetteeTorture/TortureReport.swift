/// Everything one fault-test run concluded, and its Markdown rendering.
public struct TortureReport: Sendable {
    public var scenario: String
    public var nodes: Int
    public var replicas: Int
    public var autoFailover: Bool
    public var seed: UInt64
    public var faults: [ScheduledFault]
    public var lost: TortureChecks.LostWrites
    public var counters: [TortureChecks.CounterVerdict]
    public var registers: [String: RegisterChecker.Verdict]
    public var availability: [TortureChecks.Availability]
    public var splitBrain: [TortureChecks.SplitBrain]
    /// Whether every node ended with the same map revision.
    public var mapsConverged: Bool
    /// Things the harness itself noticed (a node that did not restart, a heal that failed).
    public var notes: [String]
    /// Each node's own durable-write counts at the end (since its last start); empty when none answered.
    public var nodeSyncWrites: [NodeSyncWrites]

    public init(
        scenario: String, nodes: Int, replicas: Int, autoFailover: Bool, seed: UInt64, faults: [ScheduledFault],
        lost: TortureChecks.LostWrites, counters: [TortureChecks.CounterVerdict],
        registers: [String: RegisterChecker.Verdict], availability: [TortureChecks.Availability],
        splitBrain: [TortureChecks.SplitBrain], mapsConverged: Bool, notes: [String],
        nodeSyncWrites: [NodeSyncWrites] = []
    ) {
        self.scenario = scenario
        self.nodes = nodes
        self.replicas = replicas
        self.autoFailover = autoFailover
        self.seed = seed
        self.faults = faults
        self.lost = lost
        self.counters = counters
        self.registers = registers
        self.availability = availability
        self.splitBrain = splitBrain
        self.mapsConverged = mapsConverged
        self.notes = notes
        self.nodeSyncWrites = nodeSyncWrites
    }

    public var nonLinearizable: [String] {
        registers.compactMap { key, v in
            if case .notLinearizable = v { return key }
            return nil
        }.sorted()
    }

    public var undecided: [String] {
        registers.compactMap { key, v in
            if case .unknown = v { return key }
            return nil
        }.sorted()
    }

    /// The run passes when nothing acknowledged was lost, every counter and register holds, no split brain
    /// was seen and the maps converged. Undecided registers do not fail a run but are reported.
    public var passed: Bool {
        lost.lost.isEmpty && counters.allSatisfy(\.holds) && nonLinearizable.isEmpty && splitBrain.isEmpty
            && mapsConverged
    }

    public var markdown: String {
        var s =
            "## \(scenario): \(nodes) nodes, \(replicas) replica(s), auto-failover \(autoFailover ? "on" : "off")\n\n"
        s += "Verdict: **\(passed ? "PASS" : "FAIL")**. Seed `\(seed)` (replay with `--seed \(seed)`).\n\n"
        s += "| check | result |\n|---|---|\n"
        s +=
            "| acknowledged durable inserts lost | \(lost.lost.count) of \(lost.acknowledged) (\(lost.unknown) unknown) |\n"
        let badCounters = counters.filter { !$0.holds }
        s +=
            "| counters within acked ≤ final ≤ acked+unknown | \(counters.count - badCounters.count) of \(counters.count) |\n"
        s +=
            "| registers linearizable | \(registers.count - nonLinearizable.count - undecided.count) of \(registers.count)"
        s += undecided.isEmpty ? " |\n" : " (\(undecided.count) undecided) |\n"
        s += "| split-brain samples | \(splitBrain.count) |\n"
        s += "| maps converged after heal | \(mapsConverged ? "yes" : "no") |\n\n"
        s += "| phase | ops | ok | availability |\n|---|---|---|---|\n"
        for a in availability {
            let pct = (a.fraction * 1000).rounded() / 10
            s += "| \(a.phase) | \(a.total) | \(a.ok) | \(pct)% |\n"
        }
        if !faults.isEmpty {
            s +=
                "\nFaults: "
                + faults.map { "\($0.fault) at \($0.startMs) ms for \($0.durationMs) ms" }.joined(
                    separator: "; ") + ".\n"
        }
        for c in badCounters {
            s +=
                "\n- counter `\(c.key)`: final \(c.final.map(String.init) ?? "missing"), acknowledged \(c.acknowledged), unknown \(c.unknown)"
        }
        if !lost.lost.isEmpty { s += "\n- lost keys (first 20): " + lost.lost.prefix(20).joined(separator: ", ") }
        if !nonLinearizable.isEmpty {
            s += "\n- non-linearizable registers: " + nonLinearizable.joined(separator: ", ")
        }
        if let first = splitBrain.first {
            s += "\n- first split brain: vb \(first.vbucket) active on \(first.nodes.joined(separator: " and "))"
        }
        for n in notes { s += "\n- note: \(n)" }
        if !nodeSyncWrites.isEmpty {
            let unknown = lost.unknown
            s += "\n\nDurable writes as the nodes counted them at the end (since each node's last start; "
            s += "the clients got \(unknown) unknown insert outcome(s)):\n\n"
            s += "| node | accepted | committed | aborted | replica prepares |\n|---|---|---|---|---|\n"
            for n in nodeSyncWrites {
                s += "| \(n.node) | \(n.accepted) | \(n.committed) | \(n.aborted) | \(n.replicaAccepted) |\n"
            }
        }
        return s + "\n"
    }
}
