import Foundation
import SetteeClusterMap
import SetteeCore
import SetteeRegistry
import SetteeStorage
import SetteeTestSupport
import Testing

/// A peer's cluster document cannot change the vBucket count of a bucket this node has open.
@Suite struct ClusterDocumentVBucketCountTests {
    /// The node's own document with bucket `demo` at `numVBuckets` and its chains repeated to match, at a
    /// higher revision from the same publisher: every other rule of adoption would take it.
    static func resized(_ registry: NodeRegistry, numVBuckets: Int) throws -> [UInt8] {
        var doc = try #require(
            try JSONSerialization.jsonObject(with: Data(registry.clusterDocument())) as? [String: Any])
        var buckets = try #require(doc["buckets"] as? [[String: Any]])
        var settings = try #require(buckets[0]["settings"] as? [String: Any])
        var placement = try #require(buckets[0]["placement"] as? [String: Any])
        let chains = try #require(placement["chains"] as? [Any])
        settings["numVBuckets"] = numVBuckets
        placement["chains"] = (0..<numVBuckets).map { chains[$0 % chains.count] }
        buckets[0]["settings"] = settings
        buckets[0]["placement"] = placement
        doc["buckets"] = buckets
        doc["lastRev"] = ((doc["lastRev"] as? Int) ?? 1) + 10
        return Array(try JSONSerialization.data(withJSONObject: doc))
    }

    /// Proves a document that gives the open 64-vBucket bucket `demo` 128 vBuckets is refused and changes
    /// nothing. Before, it was adopted: the registry then set the state of vBucket 64 on a 64-vBucket engine
    /// (a precondition trap in `setVBucketState`), and a KV request for vBucket 100 passed the registry's
    /// range check and reached `failoverLog` / `seqnoInfo`'s preconditions. The same document with the count
    /// unchanged is adopted, so the refusal is about the count alone.
    @Test func changedVBucketCountOfAnOpenBucketIsRefused() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try makeRegistry(dir)
        defer { _ = registry.shutdown() }
        try registry.initialize(username: "Administrator", password: "password")
        try registry.createBucket(settings("demo", vbuckets: 64))
        let before = registry.clusterStamp

        let grown = try Self.resized(registry, numVBuckets: 128)
        #expect(throws: RegistryError.self) { try registry.storeClusterDocument(grown, promise: registry.epochPromise) }
        #expect(registry.bucketSettings(named: "demo")?.numVBuckets == 64)
        #expect(registry.clusterStamp == before)

        let same = try Self.resized(registry, numVBuckets: 64)
        try registry.storeClusterDocument(same, promise: registry.epochPromise)
        #expect(registry.clusterStamp.rev > before.rev)
        let engine = try #require(registry.bucket(named: "demo"))
        #expect(engine.failoverLog(VBucketID(63)).isEmpty == false)
    }

    /// Proves the document an adoption checks once (`checkedDocument`: the snapshot the brain is offered) is the one
    /// stored, with the brain's promise and not decoded again (ADR 0139's amendment: a second decode of every
    /// published config slowed a rebalance under load), and that the checks still refuse before anything is stored.
    @Test func aCheckedDocumentIsStoredAsItWasChecked() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try makeRegistry(dir)
        defer { _ = registry.shutdown() }
        try registry.initialize(username: "Administrator", password: "password")
        try registry.createBucket(settings("demo", vbuckets: 64))
        let before = registry.clusterStamp

        #expect(throws: RegistryError.self) {
            try registry.checkedDocument(try Self.resized(registry, numVBuckets: 128))
        }
        let checked = try registry.checkedDocument(try Self.resized(registry, numVBuckets: 64))
        #expect(checked.snapshot.revision.rev == before.rev + 10)
        #expect(registry.clusterStamp == before)

        let promise = EpochPromise(epoch: before.epoch, candidate: NodeID("n9@127.0.0.1"))
        try registry.storeClusterDocument(checked, promise: promise)
        #expect(registry.clusterSnapshot.revision == checked.snapshot.revision)
        #expect(registry.epochPromise == promise)
        let stored = try #require(registry.clusterSnapshot.buckets.first { $0.settings.name == "demo" })
        let offered = try #require(checked.snapshot.buckets.first { $0.settings.name == "demo" })
        #expect(stored.settings == offered.settings)
        #expect(stored.placement == offered.placement)
    }
}
