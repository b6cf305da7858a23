import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeSubdoc
import Testing

@testable import SetteeGateway

/// A bucket written in the 1.x layout (`_sync` in the body, ADR 0011) opened by a database with
/// `enable_shared_bucket_access` (ADR 0037 amendment): each document's `_sync` moves into the XATTR on first touch,
/// with no new revision, and the body stops carrying it, as Sync Gateway 2.x migrates on import.
@Suite struct SharedBucketMigrationTests {
    @Test func legacyItemDecisions() throws {
        // Proves: a body carrying gateway metadata is a layout move (the 1.x digest recomputed without `_attachments`
        // when the gateway wrote the body, kept when an application edited it, so that edit is imported once
        // moved); a `_sync` member that is no metadata leaves the body an application's; a deleted winner moves
        // as a deletion.
        var meta = SyncMeta()
        try meta.tree.add(RevID("1-a")!, parent: nil, deleted: false, body: nil)
        let body: [(String, JSON)] = [("v", .integer(1)), ("_attachments", json(#"{"f":{"stub":true}}"#))]
        meta.bodyDigest = fnv1a(JSON.object(body).serialized())
        let item = JSON.object(body + [("_sync", meta.json())]).serialized()
        guard
            case .legacy(let moved, let sync, let deleted, let cas) = StoredDocument.parseShared(
                id: "d", body: item, sync: nil, cas: CAS(9), deleted: false)
        else {
            Issue.record("not a layout move")
            return
        }
        #expect(String(decoding: moved, as: UTF8.self) == #"{"v":1}"# && !deleted && cas == CAS(9))
        let xattr = try JSON.parse(sync)
        #expect(xattr["rev"]?.stringValue == "1-a" && xattr["attachments"]?["f"] != nil && xattr["cas"] == nil)
        #expect(xattr["body_digest"]?.stringValue == String(fnv1a(moved), radix: 16))

        let edited = JSON.object([("v", .integer(2)), ("_sync", meta.json())]).serialized()
        guard
            case .legacy(_, let editedSync, _, _) = StoredDocument.parseShared(
                id: "d", body: edited, sync: nil, cas: CAS(9), deleted: false)
        else {
            Issue.record("an edited 1.x body is a layout move too")
            return
        }
        #expect(try JSON.parse(editedSync)["body_digest"]?.stringValue == String(meta.bodyDigest, radix: 16))

        guard
            case .external(let b, nil, _) = StoredDocument.parseShared(
                id: "d", body: Array(#"{"_sync":"mine","v":1}"#.utf8), sync: nil, cas: CAS(9), deleted: false)
        else {
            Issue.record("a `_sync` that is no metadata is the application's")
            return
        }
        #expect(b.count == 2)

        let request = SharedBucketAccess.migrate(sync: sync, body: moved, winnerDeleted: true)
        #expect(request.specs.map(\.operation) == [.command(.dictUpsert), .wholeDocumentDelete])
        #expect(!request.specs.contains { $0.flags.contains(.expandMacros) })
    }

    @Test func aOneXBucketMovesToTheXattrLayout() async throws {
        // Proves, on one embedded bucket written first by a 1.x database: once a shared-access database reads
        // them, (1) a gateway document's body is the application's JSON alone and `_sync` (same winner, same
        // history, no new revision) is the XATTR; (2) a 1.x deleted document becomes a KV tombstone keeping `_sync`;
        // (3) a 1.x body an application edited (keeping the `_sync` member) is imported as a child of the 1.x
        // winner, its body without `_sync`; (4) later gateway writes continue the same history.
        let f = try await Fixture.open(DatabaseOptions(name: "db", importDocs: false))
        let r1 = try await f.db.put("a", body: json(#"{"v":1}"#), user: nil)
        let r2 = try await f.db.put("a", body: json(#"{"_rev":"\#(r1)","v":2}"#), user: nil)
        let d1 = try await f.db.put("gone", body: json(#"{"v":1}"#), user: nil)
        _ = try await f.db.delete("gone", rev: d1, user: nil)
        let e1 = try await f.db.put("edited", body: json(#"{"v":1}"#), user: nil)
        let legacy = try #require(try await f.bucket.get("edited"))
        #expect(String(decoding: legacy.value, as: UTF8.self).contains("\"_sync\""))
        var edited = try JSON.parse(legacy.value).objectValue ?? []
        edited = edited.map { $0.0 == "v" ? ("v", .integer(5)) : $0 }
        _ = try await f.bucket.upsert("edited", value: JSON.object(edited).serialized(), expiry: 0)
        await f.db.close()

        var options = DatabaseOptions(name: "db", importDocs: false)
        options.sharedBucketAccess = true
        let db = try await GatewayDatabase(options: options, bucket: f.bucket, logger: quietLogger())
        // (1)
        let a = try await db.get("a", revs: true, user: nil).body
        #expect(a["_rev"]?.stringValue == r2.description && a["_revisions"]?["ids"]?.arrayValue?.count == 2, "\(a)")
        #expect(String(decoding: try #require(try await f.bucket.get("a")).value, as: UTF8.self) == #"{"v":2}"#)
        let item = try #require(try await SharedBucketAccessTests.item(f, "a"))
        #expect(item.sync?["rev"]?.stringValue == r2.description && !item.deleted)
        // (2)
        await #expect(throws: GatewayError.self) { _ = try await db.get("gone", user: nil) }
        #expect(try await f.bucket.get("gone") == nil)
        let tomb = try #require(try await SharedBucketAccessTests.item(f, "gone"))
        #expect(tomb.deleted && tomb.sync?["deleted"]?.boolValue == true)
        // (3)
        let e = try await db.get("edited", revs: true, user: nil).body
        let ids = e["_revisions"]?["ids"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(e["v"]?.intValue == 5 && ids.count == 2 && "1-" + ids[1] == e1.description, "\(e)")
        #expect(String(decoding: try #require(try await f.bucket.get("edited")).value, as: UTF8.self) == #"{"v":5}"#)
        // (4)
        let r3 = try await db.put("a", body: json(#"{"_rev":"\#(r2)","v":3}"#), user: nil)
        #expect(r3.generation == 3)
        #expect(String(decoding: try #require(try await f.bucket.get("a")).value, as: UTF8.self) == #"{"v":3}"#)
        await db.close()
        await f.bucket.close()
    }
}
