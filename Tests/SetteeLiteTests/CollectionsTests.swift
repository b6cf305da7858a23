import Foundation
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeReplication
import SetteeSQLite
import SetteeTestSupport
import Testing

/// Collections in a Lite database (issue 70 item 5, docs/adr/0150): the schema, the API, queries, full-text
/// search, live queries and replication per collection.
@Suite struct CollectionsTests {
    static func db(_ name: String = "coll") throws -> Database {
        try Database(name: name, directory: TemporaryDirectory.make("lite-coll"))
    }

    static func doc(_ id: String, _ props: [(String, JSON)]) -> Document {
        var d = Document(id: id)
        for (k, v) in props { d[k] = v }
        return d
    }

    @Test func collectionsAreCreatedListedAndDeleted() throws {
        // Proves the Couchbase Lite 3.1 shape: the default collection exists, create returns the existing one on a
        // second call, scopes and collections list what exists, names follow Couchbase's rule, the default
        // collection cannot be deleted, and a handle of a deleted collection throws notFound.
        let db = try Self.db()
        defer { try? db.delete() }
        #expect(try db.scopes() == ["_default"])
        #expect(try db.collections().map(\.name) == ["_default"])
        #expect(db.defaultCollection().isDefault && db.defaultCollection().fullName == "_default._default")
        let c1 = try db.createCollection("c1", scope: "tenant")
        let again = try db.createCollection("c1", scope: "tenant")
        #expect(c1 == again)
        try db.createCollection("c2", scope: "tenant")
        try db.createCollection("other")
        #expect(try db.scopes() == ["_default", "tenant"])
        #expect(try db.collections(scope: "tenant").map(\.name) == ["c1", "c2"])
        #expect(try db.collections().map(\.name) == ["_default", "other"])
        #expect(try db.collection("c1", scope: "tenant") == c1)
        #expect(try db.collection("nope", scope: "tenant") == nil)
        for bad in ["", "_x", "%x", "a.b", "a b", String(repeating: "a", count: 252)] {
            #expect(throws: LiteError.self) { try db.createCollection(bad, scope: "tenant") }
            #expect(throws: LiteError.self) { try db.createCollection("ok", scope: bad) }
        }
        #expect(throws: LiteError.self) { try db.createCollection("_default", scope: "tenant") }
        #expect(Database.validCollectionName(String(repeating: "a", count: 251)))
        #expect(Database.validCollectionName("A-z_0%9"))
        #expect(throws: LiteError.self) { try db.deleteCollection("_default") }

        try c1.save(Self.doc("x", [("n", 1)]))
        #expect(try db.deleteCollection("c1", scope: "tenant"))
        #expect(try !db.deleteCollection("c1", scope: "tenant"))
        #expect(try db.collections(scope: "tenant").map(\.name) == ["c2"])
        #expect(throws: LiteError.notFound("collection tenant.c1")) { try c1.document("x") }
        // Re-created, it is a new, empty collection.
        let fresh = try db.createCollection("c1", scope: "tenant")
        #expect(try fresh.document("x") == nil && fresh.documentCount == 0)
    }

    @Test func documentsLiveInTheirOwnCollection() throws {
        // Proves the same id holds different documents in different collections, counts, all-docs, changes,
        // conflicts/resolution and purge act on one collection, sequences are shared and increase across
        // collections, a reopened database finds everything where it was, and deleting a collection drops its
        // rows and tables.
        let dir = TemporaryDirectory.make("lite-coll")
        var db = try Database(name: "keep", directory: dir)
        defer { try? db.delete() }
        let c1 = try db.createCollection("c1", scope: "s")
        let c2 = try db.createCollection("c2", scope: "s")
        try db.save(Self.doc("k", [("where", "default")]))
        try c1.save(Self.doc("k", [("where", "c1")]))
        try c2.save(Self.doc("k", [("where", "c2")]))
        _ = try c1.saveAll((0..<5).map { Self.doc("c1-\($0)", [("n", .number(Double($0)))]) })
        #expect(try db.document("k")?["where"] == "default")
        #expect(try c1.document("k")?["where"] == "c1")
        #expect(try c2.document("k")?["where"] == "c2")
        #expect(db.documentCount == 1 && c1.documentCount == 6 && c2.documentCount == 1)
        #expect(try c1.allDocuments().map(\.id) == ["c1-0", "c1-1", "c1-2", "c1-3", "c1-4", "k"])
        #expect(try db.changes(since: .zero).map(\.id) == ["k"])
        let c1Changes = try c1.changes(since: .zero)
        #expect(c1Changes.map(\.id) == ["k", "c1-0", "c1-1", "c1-2", "c1-3", "c1-4"])
        #expect(try c2.changes(since: .zero).map(\.sequence) == [SeqNo(3)])
        #expect(db.lastSequence == SeqNo(8))

        let k2 = try #require(try c2.document("k"))
        try c2.delete("k", revision: k2.revision)
        #expect(try c2.document("k") == nil && db.document("k") != nil && c1.document("k") != nil)
        #expect(try c1.purge("c1-0"))
        #expect(try c1.document("c1-0") == nil && c1.documentCount == 5)

        db.close()
        db = try Database(name: "keep", directory: dir)
        let r1 = try #require(try db.collection("c1", scope: "s"))
        #expect(try r1.document("k")?["where"] == "c1")
        #expect(db.lastSequence == SeqNo(10))
        try r1.save(Self.doc("late", []))
        #expect(db.lastSequence == SeqNo(11))

        // Dropping c1 removes its tables; the last sequence survives it (its `docs` held it).
        #expect(try db.deleteCollection("c1", scope: "s"))
        let c1Tables = "SELECT count(*) FROM sqlite_master WHERE name LIKE 'c1\\_%' ESCAPE '\\'"
        #expect(try SchemaMigrationTests.query(db.path, c1Tables) == 0)
        #expect(db.lastSequence >= SeqNo(11))
        try db.save(Self.doc("after", []))
        #expect(db.lastSequence > SeqNo(11))
    }

    @Test func viewsFullTextAndLiveQueriesArePerCollection() async throws {
        // Proves a view of one collection maps only its documents (the same view name in two collections is two
        // indexes), a full-text index searches one collection, and a live query of a collection yields again
        // after a change to it, not after one to another collection.
        let db = try Self.db()
        defer { try? db.delete() }
        let c1 = try db.createCollection("c1", scope: "s")
        let c2 = try db.createCollection("c2", scope: "s")
        try c1.save(Self.doc("a", [("type", "note"), ("text", "the quick brown fox")]))
        try c2.save(Self.doc("b", [("type", "note"), ("text", "a lazy brown dog")]))
        try c2.save(Self.doc("c", [("type", "memo"), ("text", "quick thinking")]))
        try db.save(Self.doc("d", [("type", "note"), ("text", "quick default")]))
        let types1 = c1.view("types", version: "1") { d, emit in emit(d["type"], nil) }
        let types2 = c2.view("types", version: "1", reduce: .count) { d, emit in emit(d["type"], nil) }
        #expect(try types1.query().run().map(\.documentID) == ["a"])
        #expect(try types2.query(reduce: false).run().map(\.documentID) == ["c", "b"])
        #expect(try types2.query().run().first?.value == .number(2))
        #expect(db.existingView("types") == nil && c1.existingView("types") != nil)

        try c1.createFullTextIndex("text", properties: ["text"])
        try c2.createFullTextIndex("text", properties: ["text"])
        try db.createFullTextIndex("text", properties: ["text"])
        #expect(try c1.search("text", "quick").map(\.documentID) == ["a"])
        #expect(try c2.search("text", "quick").map(\.documentID) == ["c"])
        #expect(try c2.search("text", "brown").map(\.documentID) == ["b"])
        #expect(try db.search("text", "quick").map(\.documentID) == ["d"])

        var rows = types1.query().live().makeAsyncIterator()
        #expect(await rows.next()?.map(\.documentID) == ["a"])
        // A change to c2 alone does not wake c1's live query; the next change to c1 does, and it is the next
        // result (a wake-up by c2 would have yielded nothing new, so the order proves only c1's change counted).
        try c2.save(Self.doc("e", [("type", "note")]))
        try c1.save(Self.doc("f", [("type", "note")]))
        #expect(await rows.next()?.map(\.documentID) == ["a", "f"])
        var c2Changes = c2.changes.makeAsyncIterator()
        try c1.save(Self.doc("g", []))
        try c2.save(Self.doc("h", []))
        let change = await c2Changes.next()
        #expect(change?.documentIDs == ["h"] && change?.scope == "s" && change?.collection == "c2")
    }

    @Test func aVersion4FileOpensWithItsDocumentsInTheDefaultCollection() throws {
        // Proves the upgrade to collections (schema 5) moves no row: a file as version 4 wrote it (no
        // `collections` table) opens with its documents, views and full-text rows as `_default._default`'s, and
        // takes collections after.
        let dir = TemporaryDirectory.make("lite-coll")
        var db = try Database(name: "v4", directory: dir)
        try db.save(Self.doc("a", [("text", "hello world")]))
        try db.save(Self.doc("b", [("text", "other")]))
        try db.createFullTextIndex("text", properties: ["text"])
        #expect(try db.search("text", "hello").map(\.documentID) == ["a"])
        let path = db.path
        db.close()
        do {
            let c = try Connection(path: path, options: Connection.Options())
            defer { c.close() }
            try c.execute("DROP TABLE collections; UPDATE meta SET value = 4 WHERE key = 'schema_version'")
        }
        let before = try SchemaMigrationTests.query(path, "SELECT sum(seq) + count(*) FROM docs")
        db = try Database(name: "v4", directory: dir)
        defer { try? db.delete() }
        #expect(try SchemaMigrationTests.query(path, "SELECT value FROM meta WHERE key = 'schema_version'") == 6)
        #expect(try SchemaMigrationTests.query(path, "SELECT count(*) FROM collections WHERE id = 0") == 1)
        #expect(try SchemaMigrationTests.query(path, "SELECT sum(seq) + count(*) FROM docs") == before)
        #expect(try db.defaultCollection().allDocuments().map(\.id) == ["a", "b"])
        #expect(try db.search("text", "hello").map(\.documentID) == ["a"])
        let c = try db.createCollection("c", scope: "s")
        try c.save(Self.doc("a", [("text", "in c")]))
        #expect(try db.document("a")?["text"] == "hello world")
        #expect(db.lastSequence == SeqNo(3))
    }

    @Test func compactionKeepsAttachmentsAnotherCollectionNames() throws {
        // Proves attachments are the database's: one named by a collection survives compaction after another
        // collection that named it is deleted; once nobody names it, compaction drops it.
        let db = try Self.db()
        defer { try? db.delete() }
        let c1 = try db.createCollection("c1")
        let c2 = try db.createCollection("c2")
        for c in [c1, c2] {
            var d = Document(id: "pic")
            d.attachments["f"] = Blob(data: Array("bytes".utf8), contentType: "text/plain")
            try c.save(d)
        }
        #expect(try db.deleteCollection("c1"))
        #expect(try db.compact().attachmentsDropped == 0)
        let blob = try #require(try c2.document("pic")?.attachments["f"])
        #expect(try db.content(of: blob) == Array("bytes".utf8))
        #expect(try db.deleteCollection("c2"))
        #expect(try db.compact().attachmentsDropped == 1)
    }

    @Test func aReplicatorOverTwoCollectionsFiltersEachItsOwnWay() async throws {
        // Proves `CollectionsReplicator` between two local databases: c1 pulls by channel and pushes everything,
        // c2 pushes and pulls only the listed ids; each database holds exactly what the filters allow, in the
        // right collection; checkpoints are per collection, so a second run writes nothing.
        let a = try Self.db("a")
        let b = try Self.db("b")
        defer {
            try? a.delete()
            try? b.delete()
        }
        let a1 = try a.createCollection("c1", scope: "s")
        let a2 = try a.createCollection("c2", scope: "s")
        let b1 = try b.createCollection("c1", scope: "s")
        let b2 = try b.createCollection("c2", scope: "s")
        for i in 0..<4 {
            try a1.save(Self.doc("a1-\(i)", [("channels", i % 2 == 0 ? "red" : "blue")]))
            try a2.save(Self.doc("a2-\(i)", []))
            try b1.save(Self.doc("b1-\(i)", [("channels", i % 2 == 0 ? "red" : "blue")]))
            try b2.save(Self.doc("b2-\(i)", []))
        }
        try a.save(Self.doc("default-only", []))
        var config = ReplicatorConfiguration(target: .database(b))
        config.addCollection(a1, configuration: CollectionConfiguration(channels: ["red"]))
        config.addCollection(a2, configuration: CollectionConfiguration(documentIDs: ["a2-1", "b2-2"]))
        let replicator = try CollectionsReplicator(config)
        #expect(replicator.replicators.count == 4)
        replicator.start()
        for s in await replicator.waitUntilStopped() {
            #expect(s.lastError == nil && s.docWriteFailures == 0, "\(s)")
        }
        let ids = { (c: DatabaseCollection) throws -> Set<String> in Set(try c.allDocuments().compactMap(\.id)) }
        let all1a = Set((0..<4).map { "a1-\($0)" })
        #expect(try ids(a1) == all1a.union(["b1-0", "b1-2"]))
        #expect(try ids(b1) == all1a.union((0..<4).map { "b1-\($0)" }))
        #expect(try ids(a2) == Set((0..<4).map { "a2-\($0)" }).union(["b2-2"]))
        #expect(try ids(b2) == Set((0..<4).map { "b2-\($0)" }).union(["a2-1"]))
        #expect(try b.document("default-only") == nil)

        let second = try CollectionsReplicator(config)
        second.start()
        for s in await second.waitUntilStopped() {
            #expect(s.lastError == nil && s.docsWritten == 0, "\(s)")
        }
        #expect(throws: ReplicationError.self) {
            _ = try CollectionsReplicator(
                ReplicatorConfiguration(
                    collections: [a1], configuration: CollectionConfiguration(channels: ["x"], documentIDs: ["y"]),
                    target: .database(b)))
        }
        #expect(
            CollectionsReplicator.keyspaceURL("http://gw:4984/db/", scope: "s", collection: "c1")
                == "http://gw:4984/db.s.c1")
        #expect(
            CollectionsReplicator.keyspaceURL("http://gw:4984/db", scope: "_default", collection: "_default")
                == "http://gw:4984/db")
        #expect(
            CollectionsReplicator.keyspaceURL("https://gw/db?cert=sha256:ab", scope: "s", collection: "c")
                == "https://gw/db.s.c?cert=sha256:ab")
    }
}
