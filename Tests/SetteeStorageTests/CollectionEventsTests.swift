import Foundation
import SetteeCore
import SetteeTestSupport
import Testing

@testable import SetteeStorage

/// Collection and scope events as items of each active vBucket (ADR 0143): one seqno each, written once, rewritten by
/// a drop, left out of item counts, none on a replica, reloaded at warmup.
@Suite(.onTestThreads) struct CollectionEventsTests {
    let dir = TemporaryDirectory("storage")

    func open(_ manifest: CollectionsManifest) throws -> BucketEngine {
        var settings = testSettings(vbuckets: 4)
        settings.collections = manifest
        var options = testOptions()
        options.backgroundCollectionPurge = false
        return try BucketEngine(
            settings: settings, directory: dir.path, clock: SystemWallClock(), options: options, logger: quietLogger())
    }

    /// The events of vBucket `vb`'s change feed from 0, in seqno order, with their seqnos.
    func events(_ e: BucketEngine, _ vb: VBucketID) throws -> [(SeqNo, CollectionSystemEvent)] {
        try e.changes(vb, since: .zero, limit: 1_000).records.compactMap { r in
            CollectionSystemEvent.isSystemKey(r.key)
                ? CollectionSystemEvent.decode(r.value).map { (r.meta.bySeqno, $0) } : nil
        }
    }

    /// Proves each active vBucket gets a create-scope and a begin-collection event at seqnos after its items, once
    /// (a second pass writes nothing), that they are no items (`curr_items`, the default collection's count), that a
    /// drop rewrites them as end / drop events with new seqnos stamped with the new manifest's uid on the last, that a
    /// replica vBucket writes none, and that a restart reloads them without counting them.
    @Test func eventsAreItemsWithTheirOwnSeqnos() throws {
        var manifest = CollectionsManifest.initial
        try manifest.createScope("s")  // scope 8, uid 1
        try manifest.createCollection("c", inScope: "s", maxTTL: 60)  // collection 8, uid 2
        let e = try open(.initial)
        e.setVBucketState(VBucketID(3), .replica)
        let vb = VBucketID(0)
        _ = try e.store(.set, vb, key("plain"), value: bytes("v"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)

        e.setCollections(manifest)
        #expect(e.writeCollectionEvents() == 6)  // 2 in each of the 3 active vBuckets
        #expect(e.writeCollectionEvents() == 0)
        let written = try events(e, vb)
        #expect(written.map(\.0) == [SeqNo(2), SeqNo(3)])
        #expect(
            written.map(\.1) == [
                CollectionSystemEvent(kind: .createScope, manifestUID: 0, scopeID: 8, name: "s"),
                CollectionSystemEvent(
                    kind: .beginCollection, manifestUID: 2, scopeID: 8, collectionID: 8, maxTTL: 60, name: "c"),
            ])
        #expect(try events(e, VBucketID(3)).isEmpty)
        #expect(e.stats().currItems == 1)
        #expect(e.collectionItemCounts(vb) == [0: 1])

        var dropped = manifest
        try dropped.dropScope("s")  // uid 3
        e.setCollections(dropped)
        #expect(e.writeCollectionEvents() == 6)
        let after = try events(e, vb)
        #expect(after.map(\.0) == [SeqNo(4), SeqNo(5)])
        #expect(
            after.map(\.1) == [
                CollectionSystemEvent(kind: .endCollection, manifestUID: 2, scopeID: 8, collectionID: 8),
                CollectionSystemEvent(kind: .dropScope, manifestUID: 3, scopeID: 8),
            ])
        #expect(e.stats().currItems == 1)
        try waitAllPersisted(e)
        e.shutdown()

        let reopened = try open(dropped)
        #expect(reopened.stats().currItems == 1)
        #expect(reopened.collectionItemCounts(vb) == [0: 1])
        #expect(try events(reopened, vb).map(\.0) == [SeqNo(4), SeqNo(5)])
        #expect(reopened.writeCollectionEvents() == 0)
        reopened.shutdown()
    }
}
