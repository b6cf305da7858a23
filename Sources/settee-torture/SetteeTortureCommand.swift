import ArgumentParser
import Foundation
import Logging
import SetteeClient
import SetteeCore
import SetteeJSON
import SetteeTorture

#if canImport(Glibc)
    import Glibc
#endif

/// `settee-torture`: one fault-test run. Starts a cluster with each node in its own network namespace,
/// drives a durable workload through the smart client while injecting the scenario's faults, heals,
/// reads everything back and judges the history (docs/internals/torture.md).
@main
struct SetteeTortureCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "settee-torture",
        abstract: "Fault-test a settee cluster in network namespaces and check the history it records (needs root).")

    @Option(help: "Data nodes.") var nodes: Int = 3
    @Option(help: "Replicas of the bucket.") var replicas: Int = 1
    @Option(help: "Fault kind: \(FaultSchedule.kinds.joined(separator: ", ")).") var scenario: String = "kill"
    @Flag(
        help: "Turn auto-failover on; without it the harness fails the faulted node over by hand, as an operator would."
    )
    var autoFailover = false
    @Option(help: "Auto-failover timeout (seconds), and how long the harness waits before a manual failover.")
    var failoverTimeout: Int = 5
    @Option(help: "Faults in the run.") var rounds: Int = 2
    @Option(help: "Quiet time before each fault (ms).") var settleMs: Int = 6_000
    @Option(help: "How long each fault lasts (ms).") var faultMs: Int = 12_000
    @Option(help: "Concurrent client processes.") var processes: Int = 8
    @Option(help: "Seed of the fault schedule and the workload (random when absent; printed).") var seed: UInt64?
    @Option(help: "Directory for node data, logs, history.json and report.md.") var out: String
    @Option(help: "settee-server binary.") var serverBinary: String = ".build/debug/settee-server"

    func run() async throws {
        guard geteuid() == 0 else {
            print("settee-torture: needs root to create network namespaces; nothing was run")
            throw ExitCode(3)
        }
        guard nodes >= 2, (1...3).contains(replicas), replicas < nodes, rounds >= 1 else {
            throw ValidationError("need nodes >= 2, 1 <= replicas < nodes, rounds >= 1")
        }
        let seed = self.seed ?? UInt64.random(in: 0...UInt64.max)
        guard
            let schedule = FaultSchedule.make(
                kind: scenario, nodes: nodes, rounds: rounds, settleMs: settleMs, faultMs: faultMs, seed: seed)
        else { throw ValidationError("unknown scenario \(scenario)") }
        print(
            "settee-torture: \(scenario), \(nodes) nodes, \(replicas) replica(s), auto-failover "
                + "\(autoFailover ? "on" : "off"), seed \(seed)")
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        let binary = URL(fileURLWithPath: serverBinary).standardizedFileURL.path
        // Disk-full runs give each node a small filesystem of its own to fill; 512 MiB holds a run's data.
        let cluster = NetnsCluster(
            nodes: nodes, serverBinary: binary, workDir: out,
            diskBytes: scenario == "disk-full" ? 512 << 20 : nil)
        defer { cluster.teardown() }
        try cluster.setUp()
        for i in 0..<nodes { try cluster.start(i) }
        let bucket = "torture"
        try await cluster.form(
            bucket: bucket, replicas: replicas, autoFailover: autoFailover, failoverSeconds: failoverTimeout)

        var logger = Logger(label: "settee.torture.client")
        logger.logLevel = .critical
        var options = ClientOptions(
            seeds: cluster.nodes.indices.map { .http(cluster.admin($0)) }, bucket: bucket, username: cluster.user,
            password: cluster.password, operationTimeoutMs: 8_000)
        // A durable write waiting for an unreachable replica must not hold the reads and writes queued behind it on
        // its connection (ADR 0039: with it, every harness client stalled during a fault on 3 nodes / 1 replica).
        options.unorderedExecution = true
        let client = try await BucketClient.connect(options, logger: logger)
        let log = HistoryLog()
        let monitor = ClaimMonitor()
        var notes: [String] = []

        let t0 = nowNs()
        let totalMs = (schedule.last.map { $0.startMs + $0.durationMs } ?? 0) + settleMs
        let end = t0 + UInt64(totalMs) * 1_000_000
        let workload = Workload(client: client, log: log, processes: processes, registers: 8, counters: 4, seed: seed)
        let load = Task { await workload.run(until: end) }
        let sampler = Task {
            while nowNs() < end {
                await monitor.sample(cluster, bucket: bucket, probe: client)
                try? await Task.sleep(for: .milliseconds(500))
            }
        }

        var phases: [TorturePhase] = []
        var phaseStart = t0
        var phaseName = "steady"
        for (k, f) in schedule.enumerated() {
            try await sleep(until: t0 + UInt64(f.startMs) * 1_000_000)
            phases.append(TorturePhase(name: phaseName, startNs: phaseStart, endNs: nowNs()))
            phaseStart = nowNs()
            phaseName = "fault \(k + 1): \(f.fault)"
            let faultEnd = t0 + UInt64(f.startMs + f.durationMs) * 1_000_000
            let (victims, during) = try await inject(f.fault, cluster, until: faultEnd)
            print("settee-torture: +\((nowNs() - t0) / 1_000_000) ms \(f.fault) (victims: \(victims.map { "n\($0)" }))")
            if !autoFailover, !victims.isEmpty {
                try await Task.sleep(for: .seconds(failoverTimeout))
                if let note = await manualFailover(victims, cluster) { notes.append(note) }
            }
            try await sleep(until: faultEnd)
            if let during, let note = await during.value { notes.append(note) }
            phases.append(TorturePhase(name: phaseName, startNs: phaseStart, endNs: nowNs()))
            phaseStart = nowNs()
            phaseName = "healed \(k + 1)"
            if let note = await heal(cluster) { notes.append(note) }
        }
        await load.value
        await sampler.value
        phases.append(TorturePhase(name: phaseName, startNs: phaseStart, endNs: nowNs()))

        if let note = await heal(cluster) { notes.append(note) }
        let converged = await waitConverged(cluster, bucket: bucket)
        if !converged { notes.append("maps did not converge within 60 s of the last heal") }
        await client.close()

        let history = log.all
        let reader = try await BucketClient.connect(options, logger: logger)
        var present: Set<String> = []
        var finals: [String: Int] = [:]
        for e in history {
            switch (e.operation, e.outcome) {
            case (.insert(let key), .ok), (.insert(let key), .info):
                if await read(reader, key) != nil { present.insert(key) }
            case (.add(let key, _), _) where finals[key] == nil:
                if let v = await read(reader, key) { finals[key] = Int(String(decoding: v, as: UTF8.self)) }
            default: continue
            }
        }
        await reader.close()
        var nodeCounts: [NodeSyncWrites] = []
        for i in cluster.nodes.indices where cluster.isRunning(i) {
            guard let r = try? await cluster.http(i, .GET, "/metrics"), r.status == 200,
                let counts = NodeSyncWrites.parse(
                    node: "n\(i)", metrics: r.text, bucket: bucket)
            else { continue }
            nodeCounts.append(counts)
        }

        let report = TortureReport(
            scenario: scenario, nodes: nodes, replicas: replicas, autoFailover: autoFailover, seed: seed,
            faults: schedule, lost: TortureChecks.lostInserts(history, present: present),
            counters: TortureChecks.counters(history, finals: finals), registers: RegisterChecker.check(history),
            availability: TortureChecks.availability(history, phases: phases),
            splitBrain: TortureChecks.splitBrain(monitor.all, roundNs: 400_000_000), mapsConverged: converged,
            notes: notes, nodeSyncWrites: nodeCounts)
        let encoded = try JSONEncoder().encode(history)
        try encoded.write(to: URL(fileURLWithPath: "\(out)/history.json"))
        try report.markdown.write(toFile: "\(out)/report.md", atomically: true, encoding: .utf8)
        print(report.markdown)
        if !report.passed { throw ExitCode(1) }
    }

    /// Reads a key with retries (the cluster may still be settling); nil when it is missing or unreadable.
    private func read(_ client: BucketClient, _ key: String) async -> [UInt8]? {
        for _ in 0..<5 {
            do {
                return try await client.get(key).value
            } catch ClientError.keyNotFound {
                return nil
            } catch {
                try? await Task.sleep(for: .milliseconds(500))
            }
        }
        return nil
    }

    private func sleep(until ns: UInt64) async throws {
        let now = nowNs()
        if ns > now { try await Task.sleep(for: .nanoseconds(Int64(ns - now))) }
    }

    /// Applies a fault; returns the nodes an operator would fail over for it (none for a cut link, which a
    /// single operator's view does not explain, a full disk, which the node reports itself, or a rebalance),
    /// and work that runs while the fault lasts (until `end`), whose note, if any, goes in the report.
    private func inject(_ fault: TortureFault, _ cluster: NetnsCluster, until end: UInt64) async throws
        -> ([Int], Task<String?, Never>?)
    {
        switch fault {
        case .kill(let n):
            cluster.signal(n, SIGKILL)
            return ([n], nil)
        case .pause(let n):
            cluster.signal(n, SIGSTOP)
            return ([n], nil)
        case .isolate(let n):
            for j in cluster.nodes.indices where j != n { try cluster.cut(n, j) }
            return ([n], nil)
        case .isolateOrchestrator:
            let n = await orchestrator(cluster) ?? 0
            for j in cluster.nodes.indices where j != n { try cluster.cut(n, j) }
            return ([n], nil)
        case .cutLink(let a, let b):
            try cluster.cut(a, b)
            return ([], nil)
        case .diskFull(let n):
            try cluster.fillDisk(n)
            // The node must say so where an operator looks: its status in /pools/default, polled each second
            // while the disk is full (the node notices at its next commit, so not at once).
            let watch = Task { () -> String? in
                var seen: Set<String> = []
                while nowNs() + 1_000_000_000 < end {
                    try? await Task.sleep(for: .seconds(1))
                    if let status = await nodeStatus(n, cluster) { seen.insert(status) }
                }
                return seen == ["healthy"]
                    ? "n\(n) reported itself healthy for the whole time its disk was full" : nil
            }
            return ([], watch)
        case .rebalanceOutWhileFlapping(let n, let a, let b):
            let via = cluster.nodes.indices.first { $0 != n && $0 != a && $0 != b } ?? (n == 0 ? 1 : 0)
            let flapper = Task { () -> String? in
                let rebalance = Task { () -> String? in
                    do {
                        try await cluster.rebalance(via: via, known: Array(cluster.nodes.indices), ejected: [n])
                        return nil
                    } catch {
                        // A rebalance may stop when the network fails under it; it must not lose anything.
                        return "rebalance of n\(n) out stopped: \(error)"
                    }
                }
                var down = false
                while nowNs() + 1_000_000_000 < end {
                    if down { cluster.heal(a, b) } else { try? cluster.cut(a, b) }
                    down.toggle()
                    try? await Task.sleep(for: .seconds(1))
                }
                cluster.heal(a, b)
                return await rebalance.value
            }
            return ([], flapper)
        }
    }

    /// Node `i`'s status as its own /pools/default shows it (peers report only whether they hear its heartbeats),
    /// or as another node shows it when it does not answer; nil when nobody answers.
    private func nodeStatus(_ i: Int, _ cluster: NetnsCluster) async -> String? {
        for j in [i] + cluster.nodes.indices.filter({ $0 != i }) {
            guard let r = try? await cluster.http(j, .GET, "/pools/default"), r.status == 200,
                let nodes = (try? JSON.parse(r.body))?["nodes"]?.arrayValue
            else { continue }
            if let me = nodes.first(where: { $0["otpNode"]?.stringValue == cluster.nodes[i].name }) {
                return me["status"]?.stringValue
            }
        }
        return nil
    }

    /// The orchestrator: the healthy active member whose name sorts lowest, as every node computes it.
    private func orchestrator(_ cluster: NetnsCluster) async -> Int? {
        for i in cluster.nodes.indices where cluster.isRunning(i) {
            guard let r = try? await cluster.http(i, .GET, "/pools/default"), r.status == 200,
                let nodes = (try? JSON.parse(r.body))?["nodes"]?.arrayValue
            else { continue }
            let names = nodes.filter {
                $0["clusterMembership"]?.stringValue == "active" && $0["status"]?.stringValue == "healthy"
            }.compactMap { $0["otpNode"]?.stringValue }.sorted()
            if let first = names.first { return cluster.nodes.firstIndex { $0.name == first } }
        }
        return nil
    }

    /// Fails the victims over through a node that is not one of them.
    private func manualFailover(_ victims: [Int], _ cluster: NetnsCluster) async -> String? {
        guard let via = cluster.nodes.indices.first(where: { !victims.contains($0) }) else { return nil }
        for v in victims {
            let r = try? await cluster.http(
                via, .POST, "/controller/failOver", form: [("otpNode", cluster.nodes[v].name)])
            if r?.status != 200 {
                return "manual failover of n\(v) refused: \(r.map { "\($0.status) \($0.text)" } ?? "no answer")"
            }
        }
        return nil
    }

    /// Undoes every fault (restart, SIGCONT, links back), then brings failed-over nodes back by full
    /// recovery and a rebalance, as an operator would. Returns a note when that did not work.
    private func heal(_ cluster: NetnsCluster) async -> String? {
        cluster.healLinks()
        for i in cluster.nodes.indices { cluster.freeDisk(i) }
        for i in cluster.nodes.indices {
            cluster.signal(i, SIGCONT)
            if !cluster.isRunning(i) {
                do { try cluster.start(i) } catch { return "n\(i) did not restart: \(error)" }
            }
        }
        for i in cluster.nodes.indices { try? await cluster.waitUp(i, seconds: 60) }
        for attempt in 0..<5 {
            try? await Task.sleep(for: .seconds(2))
            // Ask the node whose view of the cluster is largest: one rebalanced out knows only itself.
            var best: (via: Int, nodes: [JSON])?
            for i in cluster.nodes.indices {
                guard let r = try? await cluster.http(i, .GET, "/pools/default"), r.status == 200,
                    let nodes = (try? JSON.parse(r.body))?["nodes"]?.arrayValue
                else { continue }
                if nodes.count > (best?.nodes.count ?? 0) { best = (i, nodes) }
            }
            guard let (via, nodes) = best else { continue }
            let failed = nodes.filter { $0["clusterMembership"]?.stringValue != "active" }
                .compactMap { $0["otpNode"]?.stringValue }
            // A node rebalanced out is no member at all: it comes back through addNode, as a new node does.
            let members = Set(nodes.compactMap { $0["otpNode"]?.stringValue })
            let gone = cluster.nodes.indices.filter { !members.contains(cluster.nodes[$0].name) }
            if failed.isEmpty && gone.isEmpty { return nil }
            for i in gone { try? await cluster.addNode(i, via: via) }
            for name in failed {
                _ = try? await cluster.http(
                    via, .POST, "/controller/setRecoveryType", form: [("otpNode", name), ("recoveryType", "full")])
            }
            do {
                try await cluster.rebalance(via: via, known: Array(cluster.nodes.indices))
                return nil
            } catch {
                if attempt == 4 { return "recovery rebalance failed: \(error)" }
            }
        }
        return "failed-over nodes were not recovered"
    }

    private func waitConverged(_ cluster: NetnsCluster, bucket: String) async -> Bool {
        for _ in 0..<120 {
            let revs = await ClaimMonitor.revisions(cluster, bucket: bucket)
            if revs.count == cluster.nodes.count, Set(revs.values).count == 1 { return true }
            try? await Task.sleep(for: .milliseconds(500))
        }
        return false
    }
}
