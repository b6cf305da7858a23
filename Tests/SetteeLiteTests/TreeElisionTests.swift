import Foundation
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeSQLite
import SetteeTestSupport
import Testing

/// Schema version 4 (ADR 0052): a document of one revision stores an empty `docs.tree` (its `winner` and
/// `deleted` columns are the whole tree); full trees written by version 3 still open.
@Suite struct TreeElisionTests {
    static func treeLength(_ path: String, _ id: String) throws -> Int64? {
        try SchemaMigrationTests.query(path, "SELECT length(tree) FROM docs WHERE id = '\(id)'")
    }

    @Test func aOneRevisionDocumentStoresNoTree() throws {
        // Proves a new document's row has an empty tree, reads back with its revision, appears in the
        // changes feed with it, and gets a full tree at its second revision, after a reopen too.
        let dir = TemporaryDirectory.make("lite")
        let db = try Database(name: "elide", directory: dir)
        defer { try? db.delete() }
        _ = try db.save(Document(id: "one", properties: ["n": 1]))
        _ = try db.save(Document(id: "two", properties: ["n": 2]))
        let rev1 = try #require(try db.document("one")?.revision)
        #expect(rev1 == RevID.next(parent: nil, deleted: false, body: ["n": 1]))
        #expect(try Self.treeLength(db.path, "one") == 0)
        #expect(try Self.treeLength(db.path, "two") == 0)
        let feed = try db.changes(since: .zero)
        #expect(feed.map(\.id) == ["one", "two"])
        #expect(feed.first?.revision == rev1)
        #expect(feed.first?.leaves == [rev1])
        #expect(feed.first?.isDeleted == false)

        var edit = try #require(try db.document("one"))
        edit["n"] = 10
        let rev2 = try #require(try db.put(edit).revision)
        #expect(try #require(try Self.treeLength(db.path, "one")) > 0)
        #expect(try db.document("one", revision: rev1)?["n"] == .number(1))
        _ = try db.delete("two")
        #expect(try #require(try Self.treeLength(db.path, "two")) > 0)
        #expect(try db.compact().revisionBodiesDropped == 2)
        // A replicated revision without history is a root of any generation, live or deleted.
        #expect(
            try db.insertRevisions([
                (body: ["_id": "r", "_rev": "7-abc", "v": 7], attachments: [:]),
                (body: ["_id": "t", "_rev": "3-def", "_deleted": true], attachments: [:]),
            ]) == [true, true])
        #expect(try Self.treeLength(db.path, "r") == 0)
        #expect(try Self.treeLength(db.path, "t") == 0)
        #expect(try db.document("r")?.revision == RevID("7-abc"))
        #expect(try db.document("t") == nil)
        #expect(try db.changes(since: .zero).last?.isDeleted == true)  // 1-… of "one" and of "two": not leaves
        db.close()

        let again = try Database(name: "elide", directory: dir)
        defer { again.close() }
        #expect(try again.document("one")?.revision == rev2)
        #expect(try again.document("two") == nil)
        _ = try again.save(Document(id: "three", properties: ["n": 3]))
        #expect(try again.document("three")?["n"] == .number(3))
        #expect(try again.document("r")?["v"] == .number(7))
        #expect(try again.changes(since: .zero).map(\.id) == ["one", "two", "r", "t", "three"])
    }

    @Test func version3FullTreesStillOpen() throws {
        // Proves a version-3 file (one-revision documents with full trees) opens as the current version (5) without a
        // rewrite, its documents read and edit, and a new document in it gets an empty tree.
        let dir = TemporaryDirectory.make("lite")
        let db = try Database(name: "v3", directory: dir)
        let path = db.path
        _ = try db.save(Document(id: "old", properties: ["n": 1]))
        let rev1 = try #require(try db.document("old")?.revision)
        db.close()
        do {
            let c = try Connection(path: path, options: Connection.Options())
            defer { c.close() }
            try c.execute(
                """
                UPDATE docs SET tree = '{"revs":["\(rev1)"],"parents":[-1],"deleted":[],"bodies":{}}';
                UPDATE meta SET value = 3 WHERE key = 'schema_version';
                """)
        }
        #expect(try Self.treeLength(path, "old") == 53 + Int64(rev1.description.utf8.count))

        let reopened = try Database(name: "v3", directory: dir)
        defer { try? reopened.delete() }
        #expect(try SchemaMigrationTests.query(path, "SELECT value FROM meta WHERE key = 'schema_version'") == 6)
        #expect(try Self.treeLength(path, "old") == 53 + Int64(rev1.description.utf8.count))
        #expect(try reopened.document("old")?.revision == rev1)
        #expect(try reopened.changes(since: .zero).first?.leaves == [rev1])
        #expect(try reopened.compact().revisionBodiesDropped == 0)
        var edit = try #require(try reopened.document("old"))
        edit["n"] = 2
        #expect(try reopened.put(edit).revision?.generation == 2)
        #expect(try reopened.document("old", revision: rev1)?["n"] == .number(1))
        _ = try reopened.save(Document(id: "new", properties: ["n": 3]))
        #expect(try Self.treeLength(path, "new") == 0)
    }
}
