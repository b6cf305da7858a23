import Foundation
import SetteeClusterMap
import SetteeCore
import SetteeRegistry
import SetteeStorage
import SetteeTestSupport
import Testing

@testable import SetteeAdmin

/// A peer's epochs and revisions past `Limits.maxClusterEpoch` / `maxConfigRevision` are refused before anything is
/// persisted, and the registry's own `+ 1` refuses at the bound instead of overflowing.
@Suite(.onTestThreads) struct ClusterEpochLimitTests {
    static func registry(_ dir: TemporaryDirectory) throws -> NodeRegistry {
        let registry = try makeRegistry(dir)
        try registry.initialize(username: "Administrator", password: "password")
        try registry.createBucket(settings("demo", vbuckets: 16))
        return registry
    }

    /// The registry's document with `edit` applied.
    static func edited(_ registry: NodeRegistry, _ edit: (inout [String: Any]) -> Void) throws -> [UInt8] {
        var doc = try #require(try jsonObject(registry.clusterDocument()))
        edit(&doc)
        return Array(try JSONSerialization.data(withJSONObject: doc))
    }

    /// Proves a promise of epoch 9223372036854775807 (or a candidate stamp there) is not granted nor persisted, and a
    /// document with `revEpoch`, `lastRev` or a bucket `rev` of Int64.max is refused with the metadata file
    /// untouched. Before, the promise was persisted (the node refused every later config, across restarts, and
    /// its next change trapped on `+ 1`), and the document was adopted (the next change trapped). The promise is
    /// the brain's decision (ADR 0130); the document is refused by the store's checks whoever offers it.
    @Test func peerValuesPastTheBoundAreRefusedBeforeTheyArePersisted() async throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try Self.registry(dir)
        defer { _ = registry.shutdown() }
        let path = dir.path + "/node-metadata.json"
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        let stamp = registry.clusterStamp
        let peer = NodeID("n_1@127.0.0.1")
        let cluster = ClusterManager(registry: registry, logger: testLogger)

        #expect(!(try cluster.promiseRequested(from: peer, epoch: .max, stamp: stamp)))
        let wild = ConfigStamp(epoch: .max, rev: .max, publisher: peer)
        #expect(!(try cluster.promiseRequested(from: peer, epoch: stamp.epoch + 1, stamp: wild)))
        #expect(registry.epochPromise == nil)

        let max = Int(Int64.max)
        let hostile = [
            try Self.edited(registry) { $0["revEpoch"] = max },
            try Self.edited(registry) { $0["lastRev"] = max },
            try Self.edited(registry) { $0["promise"] = ["epoch": max, "candidate": peer.rawValue] },
            try Self.edited(registry) { doc in
                var buckets = doc["buckets"] as? [[String: Any]] ?? []
                buckets[0]["rev"] = max
                doc["buckets"] = buckets
                doc["lastRev"] = ((doc["lastRev"] as? Int) ?? 1) + 1
            },
        ]
        for doc in hostile {
            #expect(throws: RegistryError.self) { try cluster.offerDocument(doc) }
            #expect(throws: RegistryError.self) {
                try registry.storeClusterDocument(doc, promise: registry.epochPromise)
            }
            #expect(throws: RegistryError.self) {
                try registry.storeClusterDocument(doc, promise: registry.epochPromise, join: true)
            }
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)
        #expect(registry.clusterStamp == stamp)
        await cluster.shutdown()
        // The bound itself is accepted.
        try registry.storeClusterDocument(
            try Self.edited(registry) { $0["lastRev"] = Int(Limits.maxConfigRevision) }, promise: registry.epochPromise)
    }

    /// Proves a node whose config is at the top revision refuses its next change with `.limitReached` and commits
    /// nothing (topology change, settings change, leaving), rather than taking `lastRev + 1` past the bound.
    @Test func changeAtTheTopRevisionIsRefused() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try Self.registry(dir)
        defer { _ = registry.shutdown() }
        let top = try Self.edited(registry) { $0["lastRev"] = Int(Limits.maxConfigRevision) }
        try registry.storeClusterDocument(top, promise: registry.epochPromise)
        let stamp = registry.clusterStamp
        #expect(stamp.rev == Limits.maxConfigRevision)

        func expectLimit(_ body: () throws -> Void) {
            do {
                try body()
                Issue.record("committed past the bound")
            } catch let e as RegistryError {
                if case .limitReached = e {} else { Issue.record("\(e)") }
            } catch { Issue.record("\(error)") }
        }
        expectLimit { _ = try registry.updateCluster { _, _ in } }
        expectLimit { try registry.updateAutoFailover { $0.enabled = true } }
        expectLimit { try registry.leaveCluster() }
        #expect(registry.clusterStamp == stamp)
        #expect(registry.bucketNames == ["demo"])
    }
}
