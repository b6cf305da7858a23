import Foundation
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeSQLite
import SetteeTestSupport
import Testing

/// Issue 71 item 5 (ADR 0153): `compact()` gives space back with figures, the gateway's `revs_limit` rule, and the
/// `DatabaseStats` figures.
@Suite struct BoundedMetadataLiteTests {
    /// A free-page count read through a connection of its own (not the database's).
    static func pragma(_ db: Database, _ name: String) throws -> Int64 {
        try SchemaMigrationTests.query(db.path, "PRAGMA \(name)") ?? -1
    }

    @Test func compactionAfterLargeDeletesAndPurgesShrinksTheFile() throws {
        // Proves that after 400 documents with 4 KB bodies and 8 KB attachments are edited, deleted and purged,
        // `compact()` drops the old bodies and every attachment, returns the free pages to the file system (page count
        // down to a fraction, no free page left, as a separate connection sees), reports it, and the figures agree.
        let db = try Database(name: "big", directory: TemporaryDirectory.make("lite-compact"))
        defer { try? db.delete() }
        let filler = String(repeating: "x", count: 4_000)
        var docs: [Document] = []
        for i in 0..<400 {
            // Distinct bytes per document (its number first), so no two share a stored attachment.
            var bytes = [UInt8](repeating: 0, count: 8_000)
            let tag = Array("attachment \(i)".utf8)
            bytes.replaceSubrange(0..<tag.count, with: tag)
            docs.append(
                Document(
                    id: "d\(i)", properties: ["n": .number(Double(i)), "pad": .string(filler)],
                    attachments: ["a": Blob(data: bytes, contentType: "application/octet-stream")]))
        }
        var saved = try db.saveAll(docs)
        for i in saved.indices { saved[i]["n"] = .number(Double(i + 1_000)) }
        _ = try db.saveAll(saved)
        let full = try db.stats()
        #expect(full.total.documents == 400 && full.total.storedRevisions == 800 && full.attachments == 400)
        #expect(full.total.storedBodies == 800 && full.attachmentBytes == 400 * 8_000)
        for i in 0..<300 { try db.delete("d\(i)") }
        for i in 0..<300 { #expect(try db.purge("d\(i)")) }
        let before = try Self.pragma(db, "page_count")
        let r = try db.compact()
        #expect(r.attachmentsDropped == 300 && r.attachmentBytesDropped == 300 * 8_000)
        #expect(r.revisionBodiesDropped == 100)  // the remaining documents' first revisions
        #expect(r.pageCountBefore == Int(before) && r.pageSize == 4_096)
        #expect(r.pageCountAfter * 3 < r.pageCountBefore)
        #expect(r.freePagesAfter == 0)
        #expect(try Self.pragma(db, "freelist_count") == 0)
        #expect(try Self.pragma(db, "page_count") == Int64(r.pageCountAfter))
        let after = try db.stats()
        #expect(after.total.documents == 100 && after.total.tombstones == 0 && after.total.storedBodies == 100)
        #expect(after.attachments == 100 && after.freePages == 0 && after.walBytes == 0)
        #expect(after.fileBytes == r.pageCountAfter * r.pageSize)
        // What is left reads back whole.
        let d399 = try #require(try db.document("d399"))
        #expect(try db.content(of: try #require(d399.attachments["a"])).count == 8_000)
    }

    @Test func aFileWithoutIncrementalVacuumIsRewrittenOnceAndThenShrinks() throws {
        // Proves a file made before incremental vacuum (auto_vacuum NONE, as files of older builds may be) gets its
        // free pages back from the first `compact()` (a `VACUUM`), and is incremental from then on.
        let dir = TemporaryDirectory.make("lite-compact")
        var db = try Database(name: "old", directory: dir)
        let path = db.path
        db.close()
        do {
            let c = try Connection(path: path, options: Connection.Options())
            defer { c.close() }
            try c.execute("PRAGMA auto_vacuum=NONE; VACUUM")
        }
        #expect(try SchemaMigrationTests.query(path, "PRAGMA auto_vacuum") == 0)
        db = try Database(name: "old", directory: dir)
        defer { try? db.delete() }
        let pad = String(repeating: "y", count: 3_000)
        _ = try db.saveAll((0..<300).map { Document(id: "d\($0)", properties: ["pad": .string(pad)]) })
        for i in 0..<300 { try db.purge("d\(i)") }
        let r = try db.compact()
        #expect(r.pageCountAfter * 5 < r.pageCountBefore && r.freePagesAfter == 0)
        #expect(try SchemaMigrationTests.query(path, "PRAGMA auto_vacuum") == 2)
    }

    @Test func revsLimitIsTheGatewaysRule() throws {
        // Proves Lite applies Sync Gateway's rule through the one `RevTree.prune`: a limit below 20 is refused (conflicts
        // always replicate in); a live branch keeps `revsLimit` revisions; a tombstoned conflict branch goes whole
        // once the live branch is `revsLimit` generations past it; the stats count what the trees keep.
        var small = DatabaseOptions()
        small.revsLimit = 19
        #expect(throws: LiteError.self) {
            try Database(name: "small", directory: TemporaryDirectory.make("lite-revs"), options: small)
        }
        var options = DatabaseOptions()
        options.revsLimit = 20
        let db = try Database(name: "revs", directory: TemporaryDirectory.make("lite-revs"), options: options)
        defer { try? db.delete() }
        var doc = try db.put(Document(id: "a", properties: ["v": 0]))
        // A conflicting branch from generation 1 (the higher digest wins), resolved by deleting ours.
        let root = try #require(doc.revision)
        doc["v"] = "mine"
        let mine = try #require(try db.put(doc).revision)
        let other = RevID(generation: 2, digest: "ffffffffffffffffffffffffffffffff")
        _ = try db.insertRevisions([
            (
                body: .object([
                    ("_id", "a"), ("_rev", .string(other.description)),
                    (
                        "_revisions",
                        .object([("start", 2), ("ids", .array([.string(other.digest), .string(root.digest)]))])
                    ),
                    ("v", "theirs"),
                ]), attachments: [:]
            )
        ])
        #expect(try db.conflicts(of: "a").count == 2)
        doc = try #require(try db.document("a"))
        doc = try db.resolve(doc)
        #expect(try db.conflicts(of: "a").count == 1)
        #expect(try db.stats().total.liveRevisions == 1)
        for v in 1...40 {
            doc["v"] = .number(Double(v))
            doc = try db.put(doc)
        }
        let tree = try #require(try db.revisionTree(of: "a"))
        #expect(tree.count == 20 && tree.leaves.count == 1)
        #expect(tree.contains(other) == false && tree.contains(mine) == false)
        let stats = try db.stats().total
        #expect(stats.storedRevisions == 20 && stats.liveRevisions == 1 && stats.documents == 1)
    }

    @Test func compactPrunesTreesWrittenUnderALargerLimit() throws {
        // Proves a tree written while the limit was 100 is pruned to the new limit by `compact()` (not only by its
        // next write), with the pruned revisions' bodies, and the document still reads and updates.
        let dir = TemporaryDirectory.make("lite-revs")
        var db = try Database(name: "wide", directory: dir)
        var doc = try db.put(Document(id: "a", properties: ["v": 0]))
        for v in 1..<60 {
            doc["v"] = .number(Double(v))
            doc = try db.put(doc)
        }
        db.close()
        var options = DatabaseOptions()
        options.revsLimit = 20
        db = try Database(name: "wide", directory: dir, options: options)
        defer { try? db.delete() }
        #expect(try db.stats().total.storedRevisions == 60)
        let r = try db.compact()
        #expect(r.revisionsPruned == 40 && r.revisionBodiesDropped == 59)
        let stats = try db.stats().total
        #expect(stats.storedRevisions == 20 && stats.storedBodies == 1)
        #expect(try db.document("a")?["v"] == 59)
        doc["v"] = 60
        #expect(try db.put(doc).revision?.generation == 61)
    }

    @Test func statsCountEachKindOfMetadata() throws {
        // Proves each figure: live documents, tombstones, live revisions with a conflict, stored bodies, attachments and
        // their bytes, `_local` documents, per collection and in total.
        let db = try Database(name: "stats", directory: TemporaryDirectory.make("lite-stats"))
        defer { try? db.delete() }
        let notes = try db.createCollection("notes", scope: "app")
        try db.save(
            Document(
                id: "live", properties: ["v": 1],
                attachments: ["f": Blob(data: Array("hello".utf8), contentType: "text/plain")]))
        try db.save(Document(id: "gone", properties: [:]))
        try db.delete("gone")
        let base = try db.put(Document(id: "pair", properties: ["v": 0]))
        var mine = base
        mine["v"] = 1
        _ = try db.put(mine)
        _ = try db.insertRevisions([
            (
                body: .object([
                    ("_id", "pair"), ("_rev", "2-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
                    (
                        "_revisions",
                        .object([
                            ("start", 2),
                            ("ids", .array(["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", .string(base.revision!.digest)])),
                        ])
                    ),
                ]), attachments: [:]
            )
        ])
        try notes.save(Document(id: "n", properties: [:]))
        try db.putLocalDocument("checkpoint", ["seq": 1])
        let s = try db.stats()
        let d = try #require(s.collections["_default._default"])
        #expect(d.documents == 2 && d.tombstones == 1 && d.liveRevisions == 3)
        // live: 1 body; gone: 2 revisions, its tombstone's body in the row and gen 1's in `revs`; pair: 3 revisions.
        #expect(d.storedRevisions == 1 + 2 + 3 && d.storedBodies == 1 + 2 + 3)
        #expect(s.collections["app.notes"] == (try notes.stats()))
        #expect(s.collections["app.notes"]?.documents == 1 && s.total.documents == 3)
        #expect(s.attachments == 1 && s.attachmentBytes == 5 && s.localDocuments == 1)
        #expect(s.pageSize == 4_096 && s.pageCount > 0 && s.fileBytes > 0)
        #expect(s.json["total"]?["tombstones"] == 1)
    }
}
