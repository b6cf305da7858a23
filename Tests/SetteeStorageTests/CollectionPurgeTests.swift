import Foundation
import SetteeCore
import SetteeSQLite
import SetteeTestSupport
import Testing

@testable import SetteeStorage

/// Dropped collections' items leave memory and the data file in the background (ADR 0138): in bounded batches, the
/// default collection and live collections untouched, resumed at warmup by a node restarted mid-purge.
@Suite(.onTestThreads) struct CollectionPurgeTests {
    let dir = TemporaryDirectory("storage")

    func open(_ manifest: CollectionsManifest, background: Bool) throws -> BucketEngine {
        var settings = testSettings(vbuckets: 4)
        settings.collections = manifest
        var options = testOptions()
        options.backgroundCollectionPurge = background
        return try BucketEngine(
            settings: settings, directory: dir.path, clock: SystemWallClock(), options: options, logger: quietLogger())
    }

    /// Rows of the data file whose key starts with `prefix`.
    func rows(prefix: [UInt8]) throws -> Int64 {
        var options = Connection.Options()
        options.readOnly = true
        let c = try Connection(path: dir.path + "/data.sqlite", options: options)
        let hex = prefix.map { String(format: "%02x", $0) }.joined()
        return try c.queryInt64("SELECT COUNT(*) FROM items WHERE substr(key, 1, \(prefix.count)) = x'\(hex)'") ?? -1
    }

    /// Polls `rows(prefix:)` until it is `expected` (the flusher deletes purged rows with its next batch, which no
    /// persistence waiter asks for), or 30 s pass; the last count.
    func rows(prefix: [UInt8], becoming expected: Int64) throws -> Int64 {
        let deadline = Date().addingTimeInterval(30)
        var n = try rows(prefix: prefix)
        while n != expected && Date() < deadline {
            usleep(10_000)
            n = try rows(prefix: prefix)
        }
        return n
    }

    func store(_ e: BucketEngine, collection: UInt32, _ k: String) throws {
        let logical = key(k)
        let vb = VBucketHash.vbucket(forKey: logical, count: 4)
        _ = try e.store(
            .set, vb, CollectionKey.engineKey(collection: collection, logicalKey: logical), value: bytes("v"), flags: 0,
            expiry: 0, datatype: .raw, cas: .zero)
    }

    /// Proves a drop purges only the dropped collection's items (a tombstone too), `maxPerVBucket` at a time per
    /// vBucket, from memory and from the file's rows; the items-to-purge stat counts what is left; a restart mid-purge
    /// finishes it at warmup from the manifest alone; a collection created later with the same name is empty.
    @Test func dropPurgesMemoryAndDiskAndResumesAfterRestart() throws {
        var created = CollectionsManifest.initial
        try created.createScope("s")
        try created.createCollection("c", inScope: "s")  // id 8
        try created.createCollection("keep", inScope: "s")  // id 9
        var dropped = created
        try dropped.dropCollection("c", inScope: "s")

        let e = try open(created, background: false)
        for i in 0..<200 { try store(e, collection: 8, "doc\(i)") }
        for i in 0..<30 { try store(e, collection: 9, "doc\(i)") }
        for i in 0..<50 { try store(e, collection: 0, "doc\(i)") }
        let gone = key("doc0")
        _ = try e.delete(
            VBucketHash.vbucket(forKey: gone, count: 4), CollectionKey.engineKey(collection: 8, logicalKey: gone),
            cas: .zero)
        try waitAllPersisted(e)
        #expect(try rows(prefix: [0xff, 8]) == 200)  // 199 documents and a tombstone
        let before = e.stats()
        #expect(before.currItems == 279)

        e.setCollections(dropped)
        let first = e.runCollectionPurge(maxPerVBucket: 10)
        #expect(first.purged == 40 && first.left == 160)
        #expect(e.collectionItemsToPurge == 160 && e.stats().collectionItemsToPurge == 160)
        try waitAllPersisted(e)
        #expect(try rows(prefix: [0xff, 8], becoming: 160) == 160)
        #expect(e.stats().memUsed < before.memUsed)
        e.shutdown()

        // Restarted mid-purge: the manifest says what is dropped, and the purger finishes at warmup.
        let again = try open(dropped, background: true)
        defer { again.shutdown() }
        let deadline = Date().addingTimeInterval(30)
        while again.collectionItemsToPurge != 0 && Date() < deadline { usleep(10_000) }
        #expect(again.collectionItemsToPurge == 0)
        try waitAllPersisted(again)
        #expect(try rows(prefix: [0xff, 8], becoming: 0) == 0)
        #expect(try rows(prefix: [0xff, 9]) == 30)
        let after = again.stats()
        #expect(after.currItems == 80 && after.tombstones == 0)
        #expect(after.collectionItemsPurged == 160)

        // Created again under the same name: a new id, nothing in it.
        var recreated = dropped
        try recreated.createCollection("c", inScope: "s")
        #expect(recreated.collection(id: 10)?.name == "c")
        again.setCollections(recreated)
        for v in 0..<4 {
            let batch = try again.changes(VBucketID(UInt16(v)), since: .zero, limit: 1000)
            for r in batch.records {
                // Collection 1 holds the scope and collection event items (ADR 0143), written by the purger's thread.
                let id = CollectionKey.split(engineKey: r.key)?.collection
                #expect(id == 0 || id == 9 || id == CollectionSystemEvent.systemCollectionID)
            }
        }
    }
}
