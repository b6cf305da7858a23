import Foundation
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Config changes claim their epoch from a majority (ADR 0034), and auto-failover of a killed orchestrator takes the
/// timeout plus a few seconds, on three real nodes.
@Suite("Epoch claims and auto-failover timing (real processes)", .serialized, .onTestThreads)
struct ClusterEpochClaimProcessTests {
    static func signal(_ s: ServerProcess, _ sig: Int32) {
        if let p = s.process { kill(p.processIdentifier, sig) }
    }

    /// Proves two things on one three-node cluster (one replica):
    /// 1. An orchestrator whose two peers are paused (SIGSTOP: for a few seconds it still counts them reachable, so
    ///    its quorum check passes) commits nothing: the rebalance's first config change gets no majority's promise
    ///    for its epoch, so the orchestrator's config keeps its revision and the rebalance fails saying so. Before
    ///    epoch claims it committed the change locally and published it to nobody.
    /// 2. With auto-failover at 5 s, a SIGKILLed orchestrator's vBuckets are all active on the survivors within the
    ///    timeout plus 8 s (a generous bound for a loaded 2-core machine); the measured time is printed.
    @Test func cutOffOrchestratorCommitsNothingAndKilledOrchestratorFailsOverInTime() throws {
        let nodes = try (0..<3).map { try ServerProcess(name: "epochclaim-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for s in nodes { try s.start() }
        try ClusterHarness.formCluster(nodes, replicaNumber: 1)
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])

        // 1. a formed the cluster, so it published the config and orders changes.
        let before = try ClusterHarness.map(a)
        Self.signal(b, SIGSTOP)
        Self.signal(c, SIGSTOP)
        let asked = try a.http(
            "POST", "/controller/rebalance",
            form: [("knownNodes", nodes.map(ClusterHarness.nodeName).joined(separator: ",")), ("ejectedNodes", "")])
        let progress = try? ClusterHarness.waitForRebalance(a, timeout: 30)
        let after = try ClusterHarness.map(a)
        Self.signal(b, SIGCONT)
        Self.signal(c, SIGCONT)
        #expect(asked.status == 200 || asked.status == 503, "\(asked.status) \(asked.text)")
        #expect(
            after.rev == before.rev && after.epoch == before.epoch,
            "a committed a change without a majority: \(ClusterHarness.summary(before)) -> \(ClusterHarness.summary(after))"
        )
        if asked.status == 200 {
            let message = progress?["errorMessage"] as? String ?? ""
            #expect(message.contains("did not promise") || message.contains("claim"), "\(message)")
        }

        // Healed: every node sees the other two again.
        let healed = try ClusterHarness.eventually(30) {
            try nodes.allSatisfy { n in
                let list = ClusterHarness.json(try n.http("GET", "/pools/default"))["nodes"] as? [[String: Any]] ?? []
                return list.count == 3 && list.allSatisfy { $0["status"] as? String == "healthy" }
            }
        }
        #expect(healed)

        // 2. Auto-failover at 5 s; a (the orchestrator) is SIGKILLed.
        let enable = try b.http("POST", "/settings/autoFailover", form: [("enabled", "true"), ("timeout", "5")])
        #expect(enable.status == 200, "\(enable.text)")
        #expect(
            try ClusterHarness.eventually {
                try nodes.allSatisfy {
                    ClusterHarness.json(try $0.http("GET", "/settings/autoFailover"))["enabled"] as? Bool == true
                }
            })
        let killedAt = Date()
        a.kill9()
        var promotedAfter: TimeInterval? = nil
        while Date().timeIntervalSince(killedAt) < 40 {
            if let map = try? ClusterHarness.map(b) {
                let survivors = Set([b, c].compactMap { s in map.servers.firstIndex(of: "127.0.0.1:\(s.kvPort)") })
                if map.chains.count == 1024, map.chains.allSatisfy({ survivors.contains($0[0]) }) {
                    promotedAfter = Date().timeIntervalSince(killedAt)
                    break
                }
            }
            usleep(100_000)
        }
        let seconds = promotedAfter.map { String(format: "%.1f", $0) } ?? "more than 40"
        print(
            "auto-failover of a SIGKILLed orchestrator (timeout 5 s): vBuckets active on the survivors after \(seconds) s"
        )
        #expect(promotedAfter != nil && (promotedAfter ?? 99) <= 13, "took \(seconds) s")
    }
}
