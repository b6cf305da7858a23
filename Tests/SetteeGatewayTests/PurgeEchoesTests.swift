import SetteeCore
import SetteeDocument
import SetteeJSON
import Synchronization
import Testing

@testable import SetteeGateway

/// `_purge` against the change stream's echoes of the purged document (PurgeEchoes).
@Suite struct PurgeEchoesTests {
    @Test func entriesUpToThePurgesDeletionAreEchoes() {
        var echoes = PurgeEchoes()
        let r1 = echoes.begin("d")
        #expect(r1)
        // While the delete is in flight every entry is an echo (an older version, or the deletion itself).
        let r2 = echoes.admits("d", cas: CAS(5))
        #expect(!r2)
        let r3 = echoes.end("d", deletedWith: CAS(9))
        #expect(!r3)
        let r4 = echoes.admits("d", cas: CAS(7))  // an older version still in the stream
        #expect(!r4)
        let r5 = echoes.admits("other", cas: CAS(7))
        #expect(r5)
        let r6 = echoes.admits("d", cas: CAS(9))  // the purge's own deletion ends the watch
        #expect(!r6)
        #expect(echoes.count == 0)
        let r7 = echoes.admits("d", cas: CAS(10))
        #expect(r7)
    }

    @Test func isEchoAsksWithoutEndingTheWatch() {
        // Proves the check made again where a version is indexed (a purge may begin between an entry's admission and
        // its indexing): every version while the delete is in flight, and those up to the deletion after it, are
        // echoes; a newer one is not; asking changes nothing (the watch ends only by `admits`).
        var echoes = PurgeEchoes()
        #expect(!echoes.isEcho("d", cas: CAS(5)))
        let began = echoes.begin("d")
        #expect(began)
        #expect(echoes.isEcho("d", cas: CAS(5)) && echoes.isEcho("d", cas: CAS(50)))
        let newerSwallowed = echoes.end("d", deletedWith: CAS(9))
        #expect(!newerSwallowed)
        #expect(echoes.isEcho("d", cas: CAS(7)) && echoes.isEcho("d", cas: CAS(9)))
        #expect(!echoes.isEcho("d", cas: CAS(10)) && !echoes.isEcho("other", cas: CAS(1)))
        #expect(echoes.count == 1)
    }

    @Test func aLaterWriteIsNewsAndEndsTheWatch() {
        var echoes = PurgeEchoes()
        let r8 = echoes.begin("d")
        #expect(r8)
        let r9 = echoes.end("d", deletedWith: CAS(9))
        #expect(!r9)
        // The stream deduplicated the deletion away: the next entry is another writer's, after the purge.
        let r10 = echoes.admits("d", cas: CAS(12))
        #expect(r10)
        #expect(echoes.count == 0)
    }

    @Test func anEntrySwallowedWhileTheDeleteWasInFlightIsReadAgain() {
        var echoes = PurgeEchoes()
        let r11 = echoes.begin("d")
        #expect(r11)
        let r12 = echoes.admits("d", cas: CAS(9))  // the deletion, seen before the delete's answer
        #expect(!r12)
        let r13 = echoes.admits("d", cas: CAS(11))  // another writer's, just after it
        #expect(!r13)
        let r14 = echoes.end("d", deletedWith: CAS(9))  // so the caller handles the item as it is now
        #expect(r14)
        #expect(echoes.count == 0)
        // Nothing deleted: whatever was swallowed is read again; nothing swallowed, nothing to read.
        let r15 = echoes.begin("e")
        #expect(r15)
        let r16 = echoes.admits("e", cas: CAS(3))
        #expect(!r16)
        let r17 = echoes.end("e", deletedWith: nil)
        #expect(r17)
        let r18 = echoes.begin("f")
        #expect(r18)
        let r19 = echoes.end("f", deletedWith: nil)
        #expect(!r19)
        #expect(echoes.count == 0)
    }

    @Test func watchesAreBounded() {
        var echoes = PurgeEchoes(bound: 2)
        let a20 = echoes.begin("a"), b20 = echoes.begin("b")
        #expect(a20 && b20)
        let r21 = echoes.begin("c")
        #expect(!r21)
        let r22 = echoes.admits("c", cas: CAS(1))
        #expect(r22)
        let r23 = echoes.begin("a")  // a document already watched is watched again
        #expect(r23)
        let r24 = echoes.end("a", deletedWith: CAS(4))
        #expect(!r24)
        let r25 = echoes.admits("a", cas: CAS(4))
        #expect(!r25)
        let r26 = echoes.begin("c")
        #expect(r26)
    }

    @Test(arguments: [false, true]) func aPurgedDocumentStaysPurgedWhenTheStreamCatchesUpLate(shared: Bool) async throws
    {
        // Proves: the stream's entries of a document written and then purged, read only after the purge, neither
        // index the document again nor (import_docs) bring it back as a tombstone revision. Failed before (not
        // shared): the put's entry indexed it again and the purge's deletion was imported as `2-…` deleted, so the
        // bucket held a tombstone and `_changes` listed it (KVImportHistoryTests saw this as a timing flake).
        let bucket = try EmbeddedBucket(server: "walrus:", name: "test", logger: quietLogger())
        let gate = FeedGate()
        var options = DatabaseOptions(name: "db", importDocs: true)
        options.sharedBucketAccess = shared
        let db = try await GatewayDatabase(
            options: options,
            bucket: StalledFeedBucket(inner: bucket, gate: gate), logger: quietLogger())
        gate.hold(at: "purged")
        _ = try await db.put("purged", body: json(#"{"v":1}"#), user: nil)
        // The put's entry has left the bucket's stream and waits at the gate: the purge comes before it is read.
        let taken = await eventually { gate.isHolding }
        #expect(taken)
        _ = try await db.purge(["purged": ["*"]])
        // An application's document on the same vBucket, written after the purge: imported only after the
        // stream has brought the purged document's entries.
        let vbs = Limits.gatewayEmbeddedVBuckets
        let vb = VBucketHash.vbucket(forKey: Array("purged".utf8), count: vbs)
        let marker = try #require(
            (0..<10_000).map { "marker\($0)" }.first { VBucketHash.vbucket(forKey: Array($0.utf8), count: vbs) == vb })
        _ = try await bucket.upsert(marker, value: Array(#"{"v":2}"#.utf8), expiry: 0)
        gate.release()
        // (`_changes`, not a GET: a GET would import the marker on demand, before the stream brings it.)
        let caughtUp = await eventually {
            try await db.changes(ChangesQuery(), user: nil).rows.contains { $0.id == marker }
        }
        #expect(caughtUp)
        #expect(try await db.changes(ChangesQuery(), user: nil).rows.allSatisfy { $0.id != "purged" })
        #expect((try? await db.get("purged", user: nil)) == nil)
        if !shared { #expect(try await bucket.get("purged") == nil) }
        // A document written again after the purge is news.
        _ = try await bucket.upsert("purged", value: Array(#"{"v":3}"#.utf8), expiry: 0)
        let back = await eventually { (try? await db.get("purged", user: nil).body["v"]?.intValue) == 3 }
        #expect(back)
        await db.close()
        await bucket.close()
    }

    @Test func aSecondGatewayDropsAPurgedDocumentWithoutATombstone() async throws {
        // Proves: gateway A's `_purge` reaches gateway B on the same bucket (`import_docs`, no shared bucket
        // access) as a purge, not as an application's KV delete: B forgets the document and writes nothing, so
        // the bucket holds no item and neither `_changes` lists it. Failed before ADR 0074: B imported the
        // deletion as a `2-…` tombstone revision, written back to the bucket and listed in both feeds.
        let bucket = try EmbeddedBucket(server: "walrus:", name: "test", logger: quietLogger())
        let options = DatabaseOptions(name: "db", importDocs: true)
        let a = try await GatewayDatabase(options: options, bucket: bucket, logger: quietLogger())
        let b = try await GatewayDatabase(options: options, bucket: bucket, logger: quietLogger())
        _ = try await a.put("purged", body: json(#"{"v":1}"#), user: nil)
        let seen = await eventually {
            try await b.changes(ChangesQuery(), user: nil).rows.contains { $0.id == "purged" }
        }
        #expect(seen)
        _ = try await a.purge(["purged": ["*"]])
        // A later write on the purged document's vBucket: once B lists it, B's stream is past the purge.
        let vbs = Limits.gatewayEmbeddedVBuckets
        let vb = VBucketHash.vbucket(forKey: Array("purged".utf8), count: vbs)
        let after = try #require(
            (0..<10_000).map { "after\($0)" }.first { VBucketHash.vbucket(forKey: Array($0.utf8), count: vbs) == vb })
        _ = try await a.put(after, body: json(#"{"v":2}"#), user: nil)
        for db in [a, b] {
            let caughtUp = await eventually {
                try await db.changes(ChangesQuery(), user: nil).rows.contains { $0.id == after }
            }
            #expect(caughtUp)
        }
        #expect(try await bucket.get("purged") == nil)
        for db in [a, b] {
            #expect(try await db.changes(ChangesQuery(), user: nil).rows.allSatisfy { $0.id != "purged" })
            #expect((try? await db.get("purged", user: nil)) == nil)
        }
        // A KV delete (no marker) of a gateway document is still imported as a tombstone revision.
        let kv = try await a.put("kv-deleted", body: json(#"{"v":1}"#), user: nil)
        let seenKV = await eventually {
            try await b.changes(ChangesQuery(), user: nil).rows.contains { $0.id == "kv-deleted" }
        }
        #expect(seenKV)
        try await bucket.remove("kv-deleted", cas: .zero)
        let tombstone = await eventually {
            try await b.changes(ChangesQuery(), user: nil).rows.contains {
                $0.id == "kv-deleted" && $0.changes.first?.description.hasPrefix("2-") == true
            }
        }
        #expect(tombstone, "the KV delete of \(kv) was not imported")
        await a.close()
        await b.close()
        await bucket.close()
    }

    @Test func aStreamedVersionAdmittedBeforeAPurgeBeganIsNotIndexedOnceItHas() async throws {
        // Proves the interleaving the rehearsal met under load (the purged document came back), forced in order: a
        // stream entry admitted while no purge was under way, then the purge begins and removes the document from
        // the index, then the entry's version is indexed: `indexDocument(streamed:)` sees the purge's watch and
        // leaves the document out; once the watch has ended with nothing deleted, the same version is indexed.
        let f = try await Fixture.open()
        _ = try await f.db.put("x", body: json(#"{"v":1}"#), user: nil)
        guard case .found(let doc) = try await f.db.load("x") else {
            Issue.record("the document just written did not load")
            await f.close()
            return
        }
        #expect(f.db.purgeEchoes.withLock { $0.admits("x", cas: doc.cas) })
        #expect(f.db.purgeEchoes.withLock { $0.begin("x") })
        _ = f.db.index.withLock { $0.remove("x") }
        f.db.indexDocument(doc, streamed: true)
        #expect(f.db.index.withLock { $0.docs["x"] } == nil)
        // The watch ended with nothing deleted (the purge did not happen): the same version is news again.
        _ = f.db.purgeEchoes.withLock { $0.end("x", deletedWith: nil) }
        f.db.indexDocument(doc, streamed: true)
        #expect(f.db.index.withLock { $0.docs["x"] }?.seq == doc.meta.sequence)
        await f.close()
    }
}
