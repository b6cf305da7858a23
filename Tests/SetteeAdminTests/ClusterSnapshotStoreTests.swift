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

/// The brain decides, the registry stores (ADR 0130): the registry's cluster methods store and load what they are
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
    /// brain's, and a registry that still made them would refuse both (it did before ADR 0130).
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

    /// The registry's document with three active members (this node, `n_1`, `n_2`) at `epoch`, published by `n_1`;
    /// `failed` members are failed over.
    static func threeMembers(_ registry: NodeRegistry, epoch: Int64, rev: Int64, failed: Set<String> = []) throws
        -> [UInt8]
    {
        var doc = try #require(try jsonObject(registry.clusterDocument()))
        let mine = try #require((doc["members"] as? [[String: Any]])?.first)
        var members = [mine]
        for (i, name) in ["n_1@127.0.0.1", "n_2@127.0.0.1"].enumerated() {
            var node = try #require(mine["node"] as? [String: Any])
            node["otpNode"] = name
            node["nodeUUID"] = String(repeating: "\(i + 1)", count: 32)
            node["adminPort"] = 9001 + i
            node["kvPort"] = 12001 + i
            node["viewsPort"] = 9501 + i
            members.append(["node": node, "membership": failed.contains(name) ? "inactiveFailed" : "active"])
        }
        doc["members"] = members
        doc["revEpoch"] = Int(epoch)
        doc["lastRev"] = Int(rev)
        doc["orchestrator"] = "n_1@127.0.0.1"
        return Array(try JSONSerialization.data(withJSONObject: doc))
    }

    /// Proves the hold on an unconfirmed epoch reaches the node's vBuckets: a node of three adopting a config of a
    /// later epoch that fails a member over fences itself (the registry's fence, so its actives are pending) before
    /// it stores the config. Before ADR 0130 the brain set this hold inside itself while the registry's mirror ran,
    /// the `.fence` directive was dropped, and the registry's fence never went up.
    @Test func anUnconfirmedEpochsHoldReachesTheRegistry() async throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try Self.initialized(dir)
        defer { _ = registry.shutdown() }
        let held = registry.clusterStamp
        try registry.storeClusterDocument(
            try Self.threeMembers(registry, epoch: held.epoch + 1, rev: held.rev + 1), promise: nil)
        let cluster = ClusterManager(registry: registry, logger: testLogger)
        // Three active members: the node starts fenced, until a majority answered its heartbeats.
        #expect(registry.fenceReason != nil)
        let stamp = cluster.brain.withLock { $0.config.stamp }
        let everyone: Set<NodeID> = [registry.node.otpNode, NodeID("n_1@127.0.0.1"), NodeID("n_2@127.0.0.1")]
        for peer in ["n_1@127.0.0.1", "n_2@127.0.0.1"] {
            cluster.feed(
                .heartbeatAnswered(
                    from: NodeID(peer), sent: cluster.brainNow, stamp: stamp, promised: 0, sees: everyone))
        }
        await cluster.tickOnce()
        #expect(registry.fenceReason == nil)

        let failover = try Self.threeMembers(
            registry, epoch: held.epoch + 2, rev: held.rev + 2, failed: ["n_2@127.0.0.1"])
        #expect(try cluster.offerDocument(failover))
        #expect(registry.clusterStamp.epoch == held.epoch + 2)
        let reason = try #require(registry.fenceReason)
        #expect(reason.contains("Confirming cluster epoch \(held.epoch + 2)"), "\(reason)")
        await cluster.shutdown()
    }
}
