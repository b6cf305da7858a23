import Foundation
import SetteeCore
import SetteeDocument
import SetteeGateway
import SetteeJSON
import Testing

/// A KV client (an SDK) writing or deleting a document the gateway already holds: the import continues
/// the document's history instead of forking or losing it.
@Suite struct KVImportHistoryTests {
    @Test func sdkUpsertOfAGatewayDocumentBecomesAChildOfTheWinner() async throws {
        // Proves: an SDK upsert replaces the whole value (the `_sync` history is gone), yet the import is
        // `3-…` with parent `2-…` (the winner the gateway held), not a new `1-…` root beside it, so
        // `open_revs=all` shows one leaf and `_revisions` ends in the old winner. Failed before: `1-…`.
        let f = try await Fixture.open(DatabaseOptions(name: "db", importDocs: true))
        let r1 = try await f.db.put("doc", body: json(#"{"channels":["a"],"v":1}"#), user: nil)
        let r2 = try await f.db.put("doc", body: json(#"{"_rev":"\#(r1)","channels":["a"],"v":2}"#), user: nil)
        #expect(r2.generation == 2)
        _ = try await f.bucket.upsert("doc", value: Array(#"{"channels":["a"],"v":3}"#.utf8), expiry: 0)
        let imported = await eventually {
            (try? await f.db.get("doc", user: nil).body["v"]?.intValue) == 3
        }
        #expect(imported)
        let (body, _) = try await f.db.get("doc", revs: true, user: nil)
        let rev = try #require(body["_rev"]?.stringValue)
        #expect(rev.hasPrefix("3-"))
        #expect(body["_revisions"]?["start"]?.intValue == 3)
        let history = body["_revisions"]?["ids"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(history.count >= 2 && history.dropFirst().first == r2.digest)
        let leaves = try await f.db.openRevs("doc", revs: nil, revs: true, user: nil)
        #expect(leaves.count == 1)
        let page = try await f.db.changes(ChangesQuery(styleAllDocs: true), user: nil)
        #expect(page.rows.filter { $0.id == "doc" }.map { $0.changes.map(\.description) } == [[rev]])
        // A gateway update on top of the import is an ordinary child: no conflict appears.
        let r4 = try await f.db.put("doc", body: json(#"{"_rev":"\#(rev)","channels":["a"],"v":4}"#), user: nil)
        #expect(r4.generation == 4)
        await f.close()
    }

    @Test func kvDeleteOfAGatewayDocumentReachesClientsAsATombstone() async throws {
        // Proves: a KV delete of a gateway document becomes a `_deleted` child of its winner, listed in
        // `_changes` (deleted, in the channel it left) and kept in the bucket, instead of the document
        // silently vanishing from the index and from every feed. A purge still leaves no tombstone.
        let f = try await Fixture.open(DatabaseOptions(name: "db", importDocs: true))
        let r1 = try await f.db.put("gone", body: json(#"{"channels":["a"],"v":1}"#), user: nil)
        let r2 = try await f.db.put("gone", body: json(#"{"_rev":"\#(r1)","channels":["a"],"v":2}"#), user: nil)
        try await f.bucket.remove("gone", cas: .zero)
        let tombstoned = await eventually {
            let rows = try await f.db.changes(ChangesQuery(), user: nil).rows.filter { $0.id == "gone" }
            return rows.count == 1 && rows[0].deleted && rows[0].changes.first?.generation == 3
        }
        #expect(tombstoned)
        let leaves = try await f.db.openRevs("gone", revs: nil, revs: true, user: nil)
        let tomb = try #require(leaves.compactMap { if case .ok(let b) = $0 { b } else { nil } }.first)
        #expect(leaves.count == 1 && tomb["_deleted"]?.boolValue == true)
        let history = tomb["_revisions"]?["ids"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(history.dropFirst().first == r2.digest)
        // The channel's feed carries the deletion too.
        let inA = try await f.db.changes(ChangesQuery(channels: ["a"]), user: nil).rows.filter { $0.id == "gone" }
        #expect(inA.count == 1 && inA.first?.deleted == true)
        // A purge is not an import: it leaves nothing behind.
        _ = try await f.db.put("purged", body: json(#"{"v":1}"#), user: nil)
        _ = try await f.db.purge(["purged": ["*"]])
        // Not a sleep: an application's document on the purged one's vBucket, written after the purge, is imported
        // only once the stream has brought the purged document's entries (its write and the purge's deletion).
        let vbs = Limits.gatewayEmbeddedVBuckets
        let vb = VBucketHash.vbucket(forKey: Array("purged".utf8), count: vbs)
        let marker = try #require(
            (0..<10_000).lazy.map { "marker\($0)" }.first {
                VBucketHash.vbucket(forKey: Array($0.utf8), count: vbs) == vb
            })
        _ = try await f.bucket.upsert(marker, value: Array(#"{"v":2}"#.utf8), expiry: 0)
        let caughtUp = await eventually {
            try await f.db.changes(ChangesQuery(), user: nil).rows.contains { $0.id == marker }
        }
        #expect(caughtUp)
        #expect(try await f.bucket.get("purged") == nil)
        #expect(try await f.db.changes(ChangesQuery(), user: nil).rows.allSatisfy { $0.id != "purged" })
        await f.close()
    }
}
