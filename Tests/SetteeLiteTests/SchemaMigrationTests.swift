import Foundation
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeSQLite
import SetteeTestSupport
import Testing

/// Opening files written by older versions of Lite (schema version 1, before ADR 0041 moved the winner's
/// body into `docs.body`; version 2, before ADR 0043 made the sequence the row id), and the body moves a
/// changing winner makes in the current format.
@Suite struct SchemaMigrationTests {
    /// Version 1's tables as that version created them (only those the migration reads or writes, plus
    /// `meta`; `Store` creates the index tables it finds missing).
    static let version1DDL = """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
        CREATE TABLE docs (
            doc_id INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            seq INTEGER NOT NULL,
            winner TEXT NOT NULL,
            deleted INTEGER NOT NULL,
            type TEXT,
            tree BLOB NOT NULL
        );
        CREATE UNIQUE INDEX docs_by_seq ON docs(seq);
        CREATE TABLE revs (
            doc_id INTEGER NOT NULL,
            rev TEXT NOT NULL,
            body BLOB NOT NULL,
            PRIMARY KEY (doc_id, rev)
        ) WITHOUT ROWID;
        CREATE TABLE attachments (digest TEXT PRIMARY KEY, length INTEGER NOT NULL, data BLOB NOT NULL);
        """

    /// Writes a version-1 file: "a" with two generations, "b" with two conflicting leaves, "c" deleted,
    /// and "d" whose body names an attachment. Every revision has its body in `revs`, as version 1 kept them.
    static func writeVersion1File(at path: String) throws {
        var options = Connection.Options()
        options.synchronous = .normal
        options.pageSize = 4096
        let c = try Connection(path: path, options: options)
        defer { c.close() }
        try c.execute(version1DDL)
        let digest = AttachmentInfo.digest(of: Array("hello".utf8))
        var sql = """
            INSERT INTO meta VALUES ('schema_version', 1), ('last_seq', 4), ('uuid', 'old-uuid');
            INSERT INTO docs VALUES
              (1, 'a', 1, '2-aa', 0, 'note', '{"revs":["1-a","2-aa"],"parents":[-1,0],"deleted":[],"bodies":{}}'),
              (2, 'b', 2, '2-bz', 0, 'pair', '{"revs":["1-b","2-by","2-bz"],"parents":[-1,0,0],"deleted":[],"bodies":{}}'),
              (3, 'c', 3, '2-cc', 1, 'gone', '{"revs":["1-c","2-cc"],"parents":[-1,0],"deleted":[1],"bodies":{}}'),
              (4, 'd', 4, '1-d', 0, 'pic', '{"revs":["1-d"],"parents":[-1],"deleted":[],"bodies":{}}');
            INSERT INTO revs VALUES
              (1, '1-a', '{"type":"note","n":1}'), (1, '2-aa', '{"type":"note","n":2}'),
              (2, '1-b', '{"type":"pair","v":0}'), (2, '2-by', '{"type":"pair","v":"y"}'),
              (2, '2-bz', '{"type":"pair","v":"z"}'),
              (3, '1-c', '{"type":"gone"}'), (3, '2-cc', '{}'),
            """
        sql += """
              (4, '1-d', '{"type":"pic","_attachments":{"f":{"content_type":"text/plain","digest":"\(digest)",\
            "length":5,"revpos":1,"stub":true}}}');
            INSERT INTO attachments VALUES ('\(digest)', 5, X'68656c6c6f');
            """
        try c.execute(sql)
    }

    static func query(_ path: String, _ sql: String) throws -> Int64? {
        var options = Connection.Options()
        options.readOnly = true
        options.create = false
        let c = try Connection(path: path, options: options)
        defer { c.close() }
        return try c.queryInt64(sql)
    }

    @Test func version1FileIsMigratedWithoutLosingABody() throws {
        // Proves a version-1 file opens as the current version (6) with every document, winner and older revision
        // readable (winner bodies now in the document row, the others still in `revs`), indexes and
        // compaction see the moved bodies, edits work on migrated documents, and a reopen is a no-op.
        let dir = TemporaryDirectory.make("lite")
        try Self.writeVersion1File(at: dir + "/old.sqlite3")
        let db = try Database(name: "old", directory: dir)
        defer { try? db.delete() }
        #expect(db.uuid == "old-uuid")
        #expect(db.lastSequence.rawValue == 4)
        #expect(try Self.query(db.path, "SELECT value FROM meta WHERE key = 'schema_version'") == 6)
        #expect(try Self.query(db.path, "SELECT count(*) FROM sqlite_master WHERE name = 'docs_by_seq'") == 0)
        #expect(try Self.query(db.path, "SELECT count(*) FROM docs WHERE body IS NULL") == 0)
        // The four winners' bodies moved; 1-a, 1-b, 2-by and 1-c stay in `revs`.
        #expect(try Self.query(db.path, "SELECT count(*) FROM revs") == 4)

        #expect(try db.document("a")?["n"] == .number(2))
        #expect(try db.document("a", revision: RevID("1-a")!)?["n"] == .number(1))
        #expect(try db.conflicts(of: "b").map { $0["v"]?.stringValue } == ["z", "y"])
        #expect(try db.document("c") == nil)
        #expect(try db.document("c", revision: RevID("1-c")!)?.type == "gone")
        let d = try #require(try db.document("d"))
        #expect(try db.content(of: try #require(d.attachments["f"])) == Array("hello".utf8))
        #expect(db.documentCount == 3)
        #expect(try db.allDocuments().map(\.id) == ["a", "b", "d"])
        let types = db.view("types", version: "1") { doc, emit in emit(doc["type"], nil) }
        #expect(try types.query().run().map(\.documentID) == ["a", "b", "d"])

        // The winner's body lives in the row; compaction drops non-leaf bodies and keeps the attachment.
        let compacted = try db.compact()
        #expect(compacted.revisionBodiesDropped == 3)  // 1-a, 1-b and 1-c: not leaves
        #expect(compacted.attachmentsDropped == 0)
        var a = try #require(try db.document("a"))
        a["n"] = 3
        let saved = try db.put(a)
        #expect(saved.revision?.generation == 3)
        #expect(try db.document("a", revision: RevID("2-aa")!)?["n"] == .number(2))
        #expect(try db.document("a")?["n"] == .number(3))
        db.close()

        let again = try Database(name: "old", directory: dir)
        defer { again.close() }
        #expect(try again.document("a")?["n"] == .number(3))
        #expect(try again.conflicts(of: "b").count == 2)
    }

    /// Version 2's tables as that version created them (those the version-3 migration reads or writes).
    static let version2DDL = """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
        CREATE TABLE docs (
            doc_id INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            seq INTEGER NOT NULL,
            winner TEXT NOT NULL,
            deleted INTEGER NOT NULL,
            type TEXT,
            tree BLOB NOT NULL,
            body BLOB
        );
        CREATE UNIQUE INDEX docs_by_seq ON docs(seq);
        CREATE TABLE revs (
            doc_id INTEGER NOT NULL,
            rev TEXT NOT NULL,
            body BLOB NOT NULL,
            PRIMARY KEY (doc_id, rev)
        ) WITHOUT ROWID;
        CREATE TABLE attachments (digest TEXT PRIMARY KEY, length INTEGER NOT NULL, data BLOB NOT NULL);
        CREATE TABLE fts_indexes (
            idx_id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            properties TEXT NOT NULL,
            last_seq INTEGER NOT NULL
        );
        CREATE VIRTUAL TABLE fts USING fts5(body, tokenize = 'unicode61 remove_diacritics 2');
        """

    /// Writes a version-2 file: "a" (row 1, changed last at sequence 6) with two generations, "b" (row 2,
    /// sequence 5) with two conflicting leaves, "c" deleted (row 3, sequence 4), "x" (row 9: a row id above
    /// every sequence, which version 2 never wrote, to prove new documents' numbers cannot meet it), and
    /// the full-text index "t" over `text`, built up to sequence 6 in the version-2 row shape.
    static func writeVersion2File(at path: String) throws {
        var options = Connection.Options()
        options.synchronous = .normal
        options.pageSize = 4096
        let c = try Connection(path: path, options: options)
        defer { c.close() }
        try c.execute(version2DDL)
        try c.execute(
            """
            INSERT INTO meta VALUES ('schema_version', 2), ('last_seq', 3), ('uuid', 'v2-uuid');
            INSERT INTO docs VALUES
              (1, 'a', 6, '2-aa', 0, 'note', '{"revs":["1-a","2-aa"],"parents":[-1,0],"deleted":[],"bodies":{}}',
               '{"type":"note","n":2,"text":"apple pie"}'),
              (2, 'b', 5, '2-bz', 0, 'pair', '{"revs":["1-b","2-by","2-bz"],"parents":[-1,0,0],"deleted":[],"bodies":{}}',
               '{"type":"pair","v":"z","text":"banana"}'),
              (3, 'c', 4, '2-cc', 1, 'gone', '{"revs":["1-c","2-cc"],"parents":[-1,0],"deleted":[1],"bodies":{}}', '{}'),
              (9, 'x', 2, '1-x', 0, 'old', '{"revs":["1-x"],"parents":[-1],"deleted":[],"bodies":{}}',
               '{"type":"old","text":"apple tree"}');
            INSERT INTO revs VALUES
              (1, '1-a', '{"type":"note","n":1}'), (2, '2-by', '{"type":"pair","v":"y"}');
            INSERT INTO fts_indexes VALUES (1, 't', '["text"]', 6);
            INSERT INTO fts (rowid, body) VALUES (257, 'apple pie'), (513, 'banana'), (2305, 'apple tree');
            """)
    }

    @Test func version2FileIsMigratedToSequenceRowIDs() throws {
        // Proves a version-2 file opens as the current version (6) (sequence as row id, no `docs_by_seq`) with every
        // document, revision and sequence as it was, changes in sequence order, the full-text index rebuilt
        // with document ids, the last sequence raised above every kept row number, and new documents,
        // edits and purges working beside the migrated ones; a reopen is a no-op.
        let dir = TemporaryDirectory.make("lite")
        try Self.writeVersion2File(at: dir + "/v2.sqlite3")
        let db = try Database(name: "v2", directory: dir)
        defer { try? db.delete() }
        #expect(db.uuid == "v2-uuid")
        #expect(try Self.query(db.path, "SELECT value FROM meta WHERE key = 'schema_version'") == 6)
        #expect(try Self.query(db.path, "SELECT count(*) FROM sqlite_master WHERE name = 'docs_by_seq'") == 0)
        #expect(try Self.query(db.path, "SELECT count(*) FROM docs WHERE seq = rowid") == 4)
        // Row 9 is above the last sequence 6: the migration raised it so no new document takes number 9.
        #expect(db.lastSequence.rawValue == 9)
        #expect(try db.changes(since: .zero).map(\.id) == ["x", "c", "b", "a"])
        #expect(try db.changes(since: SeqNo(4)).map(\.id) == ["b", "a"])
        #expect(try db.document("a")?["n"] == .number(2))
        #expect(try db.document("a", revision: RevID("1-a")!)?["n"] == .number(1))
        #expect(try db.conflicts(of: "b").map { $0["v"]?.stringValue } == ["z", "y"])
        #expect(try db.document("c") == nil)
        #expect(try db.allDocuments().map(\.id) == ["a", "b", "x"])
        #expect(Set(try db.search("t", "apple").map(\.documentID)) == ["a", "x"])

        // New documents take numbers above every migrated one; each reads its own body.
        for i in 0..<4 {
            _ = try db.save(Document(id: "n\(i)", properties: ["type": "new", "text": .string("apple \(i)")]))
        }
        #expect(try db.document("x")?["text"] == .string("apple tree"))
        #expect(try db.document("n3")?["text"] == .string("apple 3"))
        #expect(try Self.query(db.path, "SELECT count(*) FROM docs WHERE id LIKE 'n%' AND doc_id <= 9") == 0)
        var a = try #require(try db.document("a"))
        a["n"] = 3
        let saved = try db.put(a)
        #expect(try db.document("a", revision: RevID("2-aa")!)?["n"] == .number(2))
        #expect(try db.changes(since: SeqNo(13)).map(\.id) == ["a"])
        #expect(db.lastSequence.rawValue == 14)
        #expect(Set(try db.search("t", "apple").map(\.documentID)) == ["a", "x", "n0", "n1", "n2", "n3"] as Set)
        #expect(try db.purge("x"))
        #expect(Set(try db.search("t", "apple").map(\.documentID)) == ["a", "n0", "n1", "n2", "n3"] as Set)
        #expect(try db.document("x") == nil)
        db.close()

        let again = try Database(name: "v2", directory: dir)
        defer { again.close() }
        #expect(again.lastSequence.rawValue == 15)
        #expect(try again.document("a")?.revision == saved.revision)
        #expect(try again.conflicts(of: "b").count == 2)
        #expect(try again.changes(since: .zero).map(\.id) == ["c", "b", "n0", "n1", "n2", "n3", "a"])
    }

    @Test func aNewerVersionIsRefusedAndLeftAlone() throws {
        // Proves a file of a schema version this code does not know is refused, not rewritten.
        let dir = TemporaryDirectory.make("lite")
        let path = dir + "/future.sqlite3"
        try Self.writeVersion1File(at: path)
        do {
            let c = try Connection(path: path, options: Connection.Options())
            defer { c.close() }
            try c.execute("UPDATE meta SET value = 99 WHERE key = 'schema_version'")
        }
        #expect(throws: LiteError.self) { _ = try Database(name: "future", directory: dir) }
        #expect(try Self.query(path, "SELECT value FROM meta WHERE key = 'schema_version'") == 99)
        #expect(try Self.query(path, "SELECT count(*) FROM revs") == 8)
    }

    @Test func winnerBodiesMoveWhenTheWinnerChanges() throws {
        // Proves the body bookkeeping of ADR 0041: when a conflict's winning leaf is deleted the other
        // leaf wins and its body is served from the row; the deleted leaf and the common ancestor stay
        // readable; a purge removes the row with its body.
        let db = try Database(name: "moves", directory: TemporaryDirectory.make("lite"))
        defer { try? db.delete() }
        let base = try db.put(Document(id: "m", properties: ["type": "t", "v": 0]))
        let r1 = try #require(base.revision)
        var revs: [RevID] = []
        for v in ["x", "y"] {
            let body: JSON = ["type": "t", "v": .string(v)]
            let rev = try #require(RevID.next(parent: r1, deleted: false, body: body))
            revs.append(rev)
            let added = try db.insertRevisions([
                (
                    body: [
                        "_id": "m", "_rev": .string(rev.description), "type": "t", "v": .string(v),
                        "_revisions": ["start": 2, "ids": [.string(rev.digest), .string(r1.digest)]],
                    ], attachments: [:]
                )
            ])
            #expect(added == [true])
        }
        let winner = try #require(revs.max())
        let loser = try #require(revs.min())
        #expect(try db.document("m")?.revision == winner)
        try db.delete("m", revision: winner)
        let now = try #require(try db.document("m"))
        #expect(now.revision == loser)
        #expect(now["v"] == .string(loser == revs[0] ? "x" : "y"))
        #expect(try db.document("m", revision: winner)?["v"] == .string(winner == revs[0] ? "x" : "y"))
        #expect(try db.document("m", revision: r1)?["v"] == .number(0))
        // Every kept body is in exactly one place: 3 in revs (r1, winner, the tombstone), 1 in the row.
        #expect(try rowCount(db, "revs") == 3)
        #expect(try db.purge("m"))
        #expect(try rowCount(db, "revs") == 0)
        #expect(try rowCount(db, "docs") == 0)
    }
}
