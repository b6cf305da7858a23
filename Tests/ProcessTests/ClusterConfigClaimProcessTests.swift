import Foundation
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Operators' config changes (a bucket created, auto-failover settings, a user) claim their epoch from a majority
/// like topology changes (ADR 0039), on three real nodes.
@Suite("Config changes claim their epoch (real processes)", .serialized, .onTestThreads)
struct ClusterConfigClaimProcessTests {
    static func signal(_ s: ServerProcess, _ sig: Int32) {
        if let p = s.process { kill(p.processIdentifier, sig) }
    }

    static func bucketNames(_ node: ServerProcess) throws -> Set<String> {
        let list = (try? node.http("GET", "/pools/default/buckets").json()) as? [[String: Any]] ?? []
        return Set(list.compactMap { $0["name"] as? String })
    }

    /// Proves: an orchestrator whose two peers are paused (SIGSTOP: for a few seconds its view still counts them, so
    /// the old quorum check passes) refuses a bucket create, an auto-failover settings change and a new user with 503
    /// and a reason, and none of them exists anywhere after the peers resume (before ADR 0039 it committed each at
    /// the current epoch and, with a higher revision, every node adopted them after the heal). Healed, the same
    /// bucket create succeeds and reaches every node, so the claim does not block a healthy cluster.
    @Test func cutOffOrchestratorRefusesConfigChanges() throws {
        let nodes = try (0..<3).map { try ServerProcess(name: "cfgclaim-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for s in nodes { try s.start() }
        try ClusterHarness.formCluster(nodes, replicaNumber: 1)
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])
        let before = try ClusterHarness.map(a)
        let timeoutBefore = ClusterHarness.json(try a.http("GET", "/settings/autoFailover"))["timeout"] as? Int

        Self.signal(b, SIGSTOP)
        Self.signal(c, SIGSTOP)
        let stoppedAt = Date()
        let create = try a.http(
            "POST", "/pools/default/buckets",
            form: [("name", "cutoff"), ("ramQuotaMB", "100"), ("replicaNumber", "1"), ("authType", "none")])
        let createSeconds = Date().timeIntervalSince(stoppedAt)
        let settings = try a.http("POST", "/settings/autoFailover", form: [("enabled", "true"), ("timeout", "17")])
        let user = try a.http(
            "PUT", "/settings/rbac/users/local/cutoffuser", form: [("password", "secret123"), ("roles", "ro_admin")])
        let after = try ClusterHarness.map(a)
        let bucketsOnA = try Self.bucketNames(a)
        Self.signal(b, SIGCONT)
        Self.signal(c, SIGCONT)

        print("cut-off orchestrator: bucket create refused after \(String(format: "%.1f", createSeconds)) s")
        for (what, r) in [("bucket create", create), ("auto-failover settings", settings), ("user", user)] {
            #expect(r.status == 503, "\(what): \(r.status) \(r.text)")
            #expect(r.text.contains("quorum") || r.text.contains("majority"), "\(what): \(r.text)")
        }
        #expect(!bucketsOnA.contains("cutoff"))
        #expect(
            after.rev == before.rev && after.epoch == before.epoch,
            "a committed a change without a majority: \(ClusterHarness.summary(before)) -> \(ClusterHarness.summary(after))"
        )

        // Healed: every node healthy again, and none holds anything of the refused changes.
        let healed = try ClusterHarness.eventually(30) {
            try nodes.allSatisfy { n in
                let list = ClusterHarness.json(try n.http("GET", "/pools/default"))["nodes"] as? [[String: Any]] ?? []
                return list.count == 3 && list.allSatisfy { $0["status"] as? String == "healthy" }
            }
        }
        #expect(healed)
        for n in nodes {
            #expect(try !Self.bucketNames(n).contains("cutoff"))
            let timeout = ClusterHarness.json(try n.http("GET", "/settings/autoFailover"))["timeout"] as? Int
            #expect(timeout == timeoutBefore && timeout != 17)
            #expect(try n.http("GET", "/settings/rbac/users/local/cutoffuser").status == 404)
        }

        // With its majority back the same change is made and spreads.
        let again = try a.http(
            "POST", "/pools/default/buckets",
            form: [("name", "cutoff"), ("ramQuotaMB", "100"), ("replicaNumber", "1"), ("authType", "none")])
        #expect(again.status == 202, "\(again.status) \(again.text)")
        #expect(try ClusterHarness.eventually { try nodes.allSatisfy { try Self.bucketNames($0).contains("cutoff") } })
        let claimed = try ClusterHarness.map(a, bucket: "cutoff")
        #expect(claimed.epoch > before.epoch, "the bucket was not created in a newly claimed epoch: \(claimed.epoch)")
    }
}
