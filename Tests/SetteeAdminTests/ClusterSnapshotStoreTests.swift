import Foundation
import SetteeClusterMap
import SetteeControl
import SetteeCore
import SetteeJSON
import SetteeRegistry
import SetteeStorage
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeAdmin

/// The brain decides, the registry stores (ADR 0127): the registry's cluster methods store and load what they are
/// given, and what reaches them is only what the node's `ClusterBrain` decided (the epoch rules of ADR 0023).
@Suite(.onTestThreads) struct ClusterSnapshotStoreTests {
    /// The node's cluster document with its revision, publisher and cluster name replaced.
    static func variant(_ registry: NodeRegistry, epoch: Int64, rev: Int64, publisher: String, name: String) throws
        -> [UInt8]
    {
        let doc = try JSON.parse(registry.clusterDocument())
        guard case .object(var members) = doc else { throw CancellationError() }
        func set(_ key: String, _ value: JSON) {
            if let i = members.firstIndex(where: { $0.0 == key }) {
                members[i].1 = value
            } else {
                members.append((key, value))
            }
        }
        set("revEpoch", .int(epoch))
        set("lastRev", .int(rev))
        set("orchestrator", .string(publisher))
        if let i = members.firstIndex(where: { $0.0 == "cluster" }), case .object(var cluster) = members[i].1,
            let j = cluster.firstIndex(where: { $0.0 == "name" })
        {
            cluster[j].1 = .string(name)
            members[i].1 = .object(cluster)
        }
        return JSON.object(members).serialized()
    }

    static func initialized(_ dir: TemporaryDirectory) throws -> NodeRegistry {
        let registry = try makeRegistry(dir)
        try registry.initialize(username: "Administrator", password: "password")
        return registry
    }

    /// Proves the registry judges nothing: a document from an epoch below the stored promise and at a lower revision
    /// (one `EpochRules.adopts` refuses) is stored as given, keeping the promise it is handed rather than the
    /// sender's; a promise lower than the stored one is stored as given too. The decisions these would need are the
    /// brain's, and a registry that still made them would refuse both (it did before ADR 0127).
    @Test func theStoreStoresWhatItIsGivenAndDecidesNothing() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try Self.initialized(dir)
        defer { _ = registry.shutdown() }
        let held = registry.clusterStamp
        let a = NodeID("n_a@127.0.0.1")
        let b = NodeID("n_b@127.0.0.1")
        try registry.storePromise(EpochPromise(epoch: held.epoch + 5, candidate: a))

        let stale = try Self.variant(
            registry, epoch: held.epoch + 1, rev: max(held.rev - 1, 0), publisher: b.rawValue, name: "stale")
        #expect(
            !EpochRules.adopts(
                incoming: ConfigStamp(epoch: held.epoch + 1, rev: max(held.rev - 1, 0), publisher: b),
                current: held, promise: registry.epochPromise))
        try registry.storeClusterDocument(stale, promise: registry.epochPromise)
        #expect(registry.clusterIdentity.name == "stale")
        #expect(registry.clusterStamp == ConfigStamp(epoch: held.epoch + 1, rev: max(held.rev - 1, 0), publisher: b))
        #expect(registry.epochPromise == EpochPromise(epoch: held.epoch + 5, candidate: a))

        try registry.storePromise(EpochPromise(epoch: held.epoch + 2, candidate: b))
        #expect(registry.epochPromise == EpochPromise(epoch: held.epoch + 2, candidate: b))
        // What is stored is what a restart loads.
        _ = registry.shutdown()
        let reopened = try makeRegistry(dir)
        defer { _ = reopened.shutdown() }
        #expect(reopened.clusterIdentity.name == "stale")
        #expect(reopened.epochPromise == EpochPromise(epoch: held.epoch + 2, candidate: b))
    }

    /// Proves a stale or conflicting document reaches the store only as the brain decided: once the brain promised
    /// epoch e to a candidate (persisted before the grant is returned), a document from e - 1 is refused whatever its
    /// revision and the metadata file is left byte for byte; a document of e is stored with the brain's promise, not
    /// the sender's; a second candidate cannot get e, nobody gets an epoch the config already has; a document of
    /// another cluster is not offered at all. After each, the brain and the store hold the same stamp and promise.
    @Test func staleOrConflictingDocumentsAreStoredOnlyAsTheBrainDecided() async throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try Self.initialized(dir)
        defer { _ = registry.shutdown() }
        let cluster = ClusterManager(registry: registry, logger: testLogger)
        let path = dir.path + "/node-metadata.json"
        let held = registry.clusterStamp
        let e = held.epoch + 4
        let a = NodeID("n_a@127.0.0.1")
        let b = NodeID("n_b@127.0.0.1")
        func agree() -> Bool {
            let (stamp, promise) = cluster.brain.withLock { ($0.config.stamp, $0.promise) }
            return stamp == registry.clusterStamp && promise == registry.epochPromise
        }

        #expect(try cluster.promiseRequested(from: a, epoch: e, stamp: held))
        #expect(registry.epochPromise == EpochPromise(epoch: e, candidate: a))
        #expect(try !cluster.promiseRequested(from: b, epoch: e, stamp: held))
        #expect(registry.epochPromise == EpochPromise(epoch: e, candidate: a))
        #expect(agree())

        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        let stale = try Self.variant(registry, epoch: e - 1, rev: 999, publisher: b.rawValue, name: "minority")
        #expect(try !cluster.offerDocument(stale))
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)
        #expect(registry.clusterIdentity.name != "minority")
        #expect(agree())

        var foreign = try #require(
            try jsonObject(Self.variant(registry, epoch: e, rev: 999, publisher: "x", name: "x")))
        foreign["cluster"] = ["uuid": String(repeating: "f", count: 32), "name": "other"]
        #expect(try !cluster.offerDocument(Array(try JSONSerialization.data(withJSONObject: foreign))))
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)

        let claimed = try Self.variant(registry, epoch: e, rev: held.rev + 1, publisher: a.rawValue, name: "majority")
        #expect(try cluster.offerDocument(claimed))
        #expect(registry.clusterIdentity.name == "majority")
        #expect(registry.clusterStamp == ConfigStamp(epoch: e, rev: held.rev + 1, publisher: a))
        #expect(registry.epochPromise == EpochPromise(epoch: e, candidate: a))
        #expect(agree())
        // The same document again is no news: nothing is written.
        let adopted = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(try !cluster.offerDocument(claimed))
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == adopted)

        #expect(try !cluster.promiseRequested(from: a, epoch: e, stamp: registry.clusterStamp))
        #expect(try cluster.promiseRequested(from: b, epoch: e + 1, stamp: registry.clusterStamp))
        #expect(registry.epochPromise == EpochPromise(epoch: e + 1, candidate: b))
        #expect(agree())
        await cluster.shutdown()
    }

    /// Proves a write this node makes itself (here an operator's change through `claimedChange`, alone in its
    /// cluster) reaches the brain as soon as it is committed: the brain's config and auto-failover settings are the
    /// store's, with no mirror before the next event.
    @Test func ownWritesAreLoadedIntoTheBrain() async throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try Self.initialized(dir)
        defer { _ = registry.shutdown() }
        let cluster = ClusterManager(registry: registry, logger: testLogger)
        let before = registry.clusterStamp
        try await cluster.claimedChange { claim in
            try registry.updateAutoFailover(claim: claim) {
                $0.enabled = true
                $0.timeout = 42
            }
        }
        #expect(registry.clusterStamp.rev == before.rev + 1)
        let (stamp, auto, timeout) = cluster.brain.withLock {
            ($0.config.stamp, $0.autoFailover, $0.timing.failoverTimeout)
        }
        #expect(stamp == registry.clusterStamp)
        #expect(auto)
        #expect(timeout == .seconds(42))
        await cluster.shutdown()
    }
}
