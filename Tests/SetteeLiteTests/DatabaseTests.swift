import Foundation
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeSQLite
import SetteeTestSupport
import Testing

/// Rows of `table` in the database file, read through a separate read-only connection.
func rowCount(_ db: Database, _ table: String) throws -> Int64 {
    var options = Connection.Options()
    options.readOnly = true
    options.create = false
    let c = try Connection(path: db.path, options: options)
    defer { c.close() }
    return try c.queryInt64("SELECT count(*) FROM \(table)") ?? -1
}

@Suite struct DatabaseTests {
    @Test func saveReadUpdateAndStaleConflict() throws {
        // Proves a save creates generation 1 with a deterministic rev id, an update based on it creates
        // generation 2, and an update based on the stale revision is refused with 409.
        let db = try Database(name: "jane", directory: TemporaryDirectory.make("lite"))
        defer { try? db.delete() }
        let id = try db.save(Document(id: "doc1", properties: ["type": "image", "n": 1]))
        #expect(id == "doc1")
        let first = try #require(try db.document("doc1"))
        let rev1 = try #require(first.revision)
        #expect(rev1.generation == 1)
        #expect(rev1 == RevID.next(parent: nil, deleted: false, body: ["type": "image", "n": 1]))
        #expect(first["n"] == .number(1))
        var edit = first
        edit["n"] = 2
        let second = try db.put(edit)
        #expect(second.revision?.generation == 2)
        #expect(try db.document("doc1")?["n"] == .number(2))
        #expect(throws: LiteError.self) { try db.put(edit) }
        do {
            _ = try db.put(edit)
        } catch {
            #expect(error.status == 409)
        }
        // A new document with a taken id conflicts too; a generated id is 32 hex characters.
        #expect(throws: LiteError.self) { try db.save(Document(id: "doc1")) }
        let generated = try db.save(Document(properties: ["a": true]))
        #expect(generated.count == 32)
        #expect(db.documentCount == 2)
    }

    @Test func rejectsUnderscorePropertiesAndReservedIDs() throws {
        // Proves the CouchDB body rules hold at the edge: `_` members and `_` ids are 400s.
        let db = try Database(name: "rules", directory: TemporaryDirectory.make("lite"))
        defer { try? db.delete() }
        #expect(
            throws: LiteError.badRequest(
                "user defined top level properties beginning with '_' are not allowed: _x")
        ) {
            try db.save(Document(id: "a", properties: ["_x": 1]))
        }
        #expect(throws: LiteError.self) { try db.save(Document(id: "_bad")) }
        #expect(throws: LiteError.self) { try Database(name: "Bad Name", directory: TemporaryDirectory.make("lite")) }
    }

    @Test func attachmentsAreStoredOncePerDigestAndCompactedWhenUnreferenced() throws {
        // Proves two documents attaching the same bytes share one stored copy, the bytes read back
        // identical, and compaction drops them only once no kept revision names them.
        let db = try Database(name: "blobs", directory: TemporaryDirectory.make("lite"))
        defer { try? db.delete() }
        let jpeg: [UInt8] = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let blob = Blob(data: jpeg, contentType: "image/jpeg")
        try db.save(Document(id: "p1", properties: ["type": "image"], attachments: ["image": blob]))
        try db.save(Document(id: "p2", properties: ["type": "image"], attachments: ["image": blob]))
        #expect(try rowCount(db, "attachments") == 1)
        let read = try #require(try db.document("p1")?.attachments["image"])
        #expect(read.digest == AttachmentInfo.digest(of: jpeg))
        #expect(read.length == jpeg.count && read.contentType == "image/jpeg" && read.revpos == 1)
        #expect(try db.content(of: read) == jpeg)
        // Updating keeps the attachment by digest without re-sending bytes.
        var p1 = try #require(try db.document("p1"))
        p1["caption"] = "hello"
        let p1b = try db.put(p1)
        #expect(try db.document("p1")?.attachments["image"]?.revpos == 1)
        // Remove the attachment from p1 and delete p2: after compaction nobody names the bytes.
        var p1c = try #require(try db.document("p1"))
        #expect(p1c.revision == p1b.revision)
        p1c.attachments = [:]
        try db.save(p1c)
        try db.delete("p2")
        let result = try db.compact()
        #expect(result.attachmentsDropped == 1)
        #expect(result.revisionBodiesDropped >= 3)
        #expect(try rowCount(db, "attachments") == 0)
        #expect(try db.document("p1", revision: p1b.revision!) == nil)  // ancestor body compacted
    }

    @Test func deleteRecreateAndTombstones() throws {
        // Proves a deletion hides the document, keeps a tombstone in the tree, and a save without a
        // revision re-creates the document as a child of the tombstone.
        let db = try Database(name: "tomb", directory: TemporaryDirectory.make("lite"))
        defer { try? db.delete() }
        try db.save(Document(id: "d", properties: ["v": 1]))
        let tomb = try db.delete("d")
        #expect(tomb.generation == 2)
        #expect(try db.document("d") == nil)
        #expect(try db.document("d", revision: tomb)?.isDeleted == true)
        #expect(throws: LiteError.notFound("d is already deleted")) { try db.delete("d") }
        let again = try db.put(Document(id: "d", properties: ["v": 2]))
        #expect(again.revision?.generation == 3)
        #expect(try db.revisionTree(of: "d")?.count == 3)
    }

    @Test func conflictsAreKeptExposedAndResolved() throws {
        // Proves replicated branches make a conflict visible through `conflicts(of:)` with the CouchDB
        // winner first, and `resolve` merges onto one leaf and tombstones the other in one step.
        let db = try Database(name: "conflicts", directory: TemporaryDirectory.make("lite"))
        defer { try? db.delete() }
        let base = try db.put(Document(id: "c", properties: ["v": 0]))
        let r1 = base.revision!
        let a = try #require(RevID.next(parent: r1, deleted: false, body: ["v": "a"]))
        let b = try #require(RevID.next(parent: r1, deleted: false, body: ["v": "b"]))
        let added = try db.insertRevisions([
            (
                body: [
                    "_id": "c", "_rev": .string(a.description), "v": "a",
                    "_revisions": ["start": 2, "ids": [.string(a.digest), .string(r1.digest)]],
                ], attachments: [:]
            ),
            (
                body: [
                    "_id": "c", "_rev": .string(b.description), "v": "b",
                    "_revisions": ["start": 2, "ids": [.string(b.digest), .string(r1.digest)]],
                ], attachments: [:]
            ),
        ])
        #expect(added == [true, true])
        let leaves = try db.conflicts(of: "c")
        #expect(leaves.count == 2)
        let winner = max(a, b)
        #expect(leaves.first?.revision == winner)
        #expect(try db.document("c")?.revision == winner)
        // Inserting a known revision again changes nothing.
        #expect(
            try db.insertRevisions([(body: ["_id": "c", "_rev": .string(a.description)], attachments: [:])]) == [false])
        var merged = leaves[1]
        merged["v"] = "merged"
        let resolved = try db.resolve(merged)
        #expect(resolved.revision?.generation == 3)
        #expect(try db.conflicts(of: "c").count == 1)
        #expect(try db.document("c")?["v"] == "merged")
    }

    @Test func localDocumentsPurgeAndReopen() throws {
        // Proves `_local` docs get 0-N revisions and never appear in changes, purge removes a document
        // and its history, and everything committed survives close and reopen.
        let dir = TemporaryDirectory.make("lite")
        var db = try Database(name: "persist", directory: dir)
        #expect(try db.putLocalDocument("checkpoint", ["last": 5]) == "0-1")
        #expect(try db.putLocalDocument("_local/checkpoint", ["last": 7]) == "0-2")
        #expect(try db.localDocument("checkpoint")?["last"] == .number(7))
        #expect(try db.localDocument("checkpoint")?["_rev"] == "0-2")
        try db.save(Document(id: "keep", properties: ["x": 1]))
        try db.save(Document(id: "gone", properties: ["x": 2]))
        #expect(try db.purge("gone"))
        #expect(try db.revisionTree(of: "gone") == nil)
        #expect(try !db.purge("gone"))
        let seq = db.lastSequence
        #expect(seq == SeqNo(3))
        db.close()
        #expect(throws: LiteError.closed) { try db.document("keep") }
        db = try Database(name: "persist", directory: dir)
        defer { try? db.delete() }
        #expect(db.lastSequence == seq)
        #expect(try db.document("keep")?["x"] == .number(1))
        #expect(try db.localDocument("checkpoint")?["last"] == .number(7))
        #expect(try db.changes(since: .zero).map(\.id) == ["keep"])
        #expect(try db.deleteLocalDocument("checkpoint"))
        #expect(try db.localDocument("checkpoint") == nil)
    }

    @Test func batchIsAllOrNothing() throws {
        // Proves `saveAll` is one transaction: an invalid document rolls back the valid ones and the
        // sequence, and a valid batch commits every document.
        let db = try Database(name: "batch", directory: TemporaryDirectory.make("lite"))
        defer { try? db.delete() }
        let bad = [Document(id: "a"), Document(id: "b"), Document(id: "_c")]
        #expect(throws: LiteError.self) { try db.saveAll(bad) }
        #expect(db.documentCount == 0)
        #expect(db.lastSequence == .zero)
        let saved = try db.saveAll((0..<100).map { Document(id: "d\($0)", properties: ["i": .number(Double($0))]) })
        #expect(saved.count == 100)
        #expect(db.documentCount == 100)
        #expect(db.lastSequence == SeqNo(100))
    }

    @Test func manyTasksWriteConcurrently() async throws {
        // Proves the database is usable from many tasks at once: 8 writers x 50 saves all commit, with
        // unique sequences, while readers read.
        let db = try Database(name: "tasks", directory: TemporaryDirectory.make("lite"))
        defer { try? db.delete() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for t in 0..<8 {
                group.addTask {
                    for i in 0..<50 {
                        try await db.perform { db throws(LiteError) in
                            _ = try db.save(Document(id: "t\(t)-\(i)", properties: ["t": .number(Double(t))]))
                        }
                        _ = try db.document("t\(t)-0")
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(db.documentCount == 400)
        let entries = try db.changes(since: .zero)
        #expect(entries.count == 400)
        #expect(Set(entries.map(\.sequence)).count == 400)
    }

    @Test func changeStreamReportsLocalAndExternalWrites() async throws {
        // Proves `changes` delivers each committed transaction with its document ids, the sequence and
        // whether a replicator made it, and `changes(since:)` lists each document at its latest change.
        let db = try Database(name: "feed", directory: TemporaryDirectory.make("lite"))
        defer { try? db.delete() }
        let stream = db.changes
        try db.save(Document(id: "a", properties: ["v": 1]))
        let rev = try #require(RevID.next(parent: nil, deleted: false, body: ["v": 2]))
        _ = try db.insertRevisions([(body: ["_id": "b", "_rev": .string(rev.description), "v": 2], attachments: [:])])
        try db.delete("a")
        var it = stream.makeAsyncIterator()
        let c1 = try #require(await it.next())
        #expect(c1.documentIDs == ["a"] && !c1.isExternal && c1.lastSequence == SeqNo(1))
        #expect(c1.documents.first?.isNew == true)
        let c2 = try #require(await it.next())
        #expect(c2.documentIDs == ["b"] && c2.isExternal)
        let c3 = try #require(await it.next())
        #expect(c3.documents.first?.isDeleted == true && c3.lastSequence == SeqNo(3))
        let since = try db.changes(since: SeqNo(1))
        #expect(since.map(\.id) == ["b", "a"])
        #expect(since.last?.isDeleted == true)
        #expect(since.first?.leaves == [rev])
    }
}
