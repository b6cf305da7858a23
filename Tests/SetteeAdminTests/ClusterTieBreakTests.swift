import Foundation
import SetteeClusterMap
import SetteeControl
import SetteeRegistry
import SetteeStorage
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeAdmin

/// Two orchestrators that changed the same config (each thinking the other unreachable) publish different
/// documents at one `(revEpoch, rev)`; the cluster must converge on one of them.
@Suite(.onTestThreads) struct ClusterTieBreakTests {
    static func document(_ registry: NodeRegistry) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(registry.clusterDocument())) as? [String: Any])
    }

    static func variant(_ doc: [String: Any], orchestrator: String, name: String) throws -> [UInt8] {
        var doc = doc
        doc["orchestrator"] = orchestrator
        var cluster = doc["cluster"] as? [String: Any] ?? [:]
        cluster["name"] = name
        doc["cluster"] = cluster
        return Array(try JSONSerialization.data(withJSONObject: doc))
    }

    /// Proves the tie rule: at an equal revision the document made by the orchestrator whose name sorts lower
    /// is adopted and the other is not, whichever arrives first, so every node ends on the same one. Before,
    /// an equal revision was never adopted and two different configs stayed in place for good. The documents are
    /// offered to the node's brain, which decides (ADR 0130); the registry stores what it adopts.
    @Test func equalRevisionsConvergeOnTheLowerOrchestrator() async throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try makeRegistry(dir)
        defer { _ = registry.shutdown() }
        try registry.initialize(username: "Administrator", password: "password")
        let cluster = ClusterManager(registry: registry, logger: testLogger)
        var base = try Self.document(registry)
        base["lastRev"] = ((base["lastRev"] as? Int) ?? 1) + 5
        let fromZ = try Self.variant(base, orchestrator: "n_z@127.0.0.1", name: "made by z")
        let fromA = try Self.variant(base, orchestrator: "n_a@127.0.0.1", name: "made by a")
        let fromM = try Self.variant(base, orchestrator: "n_m@127.0.0.1", name: "made by m")

        #expect(try cluster.offerDocument(fromZ))
        #expect(try cluster.offerDocument(fromA))
        #expect(registry.clusterIdentity.name == "made by a")
        #expect(try !cluster.offerDocument(fromM))
        #expect(try !cluster.offerDocument(fromZ))
        #expect(try !cluster.offerDocument(fromA))
        #expect(registry.clusterIdentity.name == "made by a")
        #expect(cluster.brain.withLock { $0.config.stamp } == registry.clusterStamp)
        await cluster.shutdown()
    }
}
