import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeReplication
import SetteeSQLite
import SetteeTestSupport
import Testing

@Suite struct HostileInputTests {
    @Test func storedSequencesOutOfRangeAreStorageErrors() throws {
        // Proves a database file naming sequences this database never writes (tampered, or another program's)
        // throws `LiteError.storage` instead of trapping: a document whose sequence is negative, read; a last
        // sequence at Int64.max, at open (the next save converted 2^63 back to Int64 and trapped).
        let dir = TemporaryDirectory.make("lite")
        var db: Database? = try Database(name: "seqs", directory: dir)
        let path = try #require(db).path
        try db?.save(Document(id: "d", properties: ["v": 1]))
        db?.close()
        db = nil
        var conn = try Connection(path: path)
        try conn.execute("UPDATE docs SET seq = -5 WHERE id = 'd'")
        conn.close()
        let reopened = try Database(name: "seqs", directory: dir)
        #expect(throws: LiteError.self) { _ = try reopened.document("d") }
        reopened.close()
        conn = try Connection(path: path)
        try conn.execute("UPDATE docs SET seq = 1 WHERE id = 'd'")
        try conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('last_seq', 9223372036854775807)")
        conn.close()
        #expect(throws: LiteError.self) { _ = try Database(name: "seqs", directory: dir) }
        try? Database.delete(name: "seqs", directory: dir)
    }

    @Test func documentsDeeperThanTheDocumentBoundAreRefusedAtSave() throws {
        // Proves a local save is held to the document bound every entry point shares (`Limits.maxDocumentDepth`,
        // ADR 0121): a document exactly at it saves and reads back, one level deeper throws `badRequest` and stores
        // nothing. Before, Lite saved it and its push then failed at the gateway (the fidelity property test's
        // finding: "Lite saved doc-23 of depth 514").
        let db = try Database(name: "deep", directory: TemporaryDirectory.make("lite"))
        defer { try? db.delete() }
        func nested(_ levels: Int) -> JSON {
            var v: JSON = 1
            for _ in 0..<levels { v = .array([v]) }
            return .object([("deep", v)])
        }
        let bound = Limits.maxDocumentDepth
        try db.save(Document(id: "at", properties: nested(bound - 1)))
        #expect(try db.document("at")?.properties == nested(bound - 1))
        #expect(throws: LiteError.self) { try db.save(Document(id: "past", properties: nested(bound))) }
        #expect(try db.document("past") == nil)
    }

    @Test func pulledRevisionGenerationsAreBoundedAndTheNextEditIsRefused() throws {
        // Proves a pulled revision above `Limits.maxRevGeneration` is refused, and a local edit of one at
        // the limit throws `badRequest` instead of trapping on `generation + 1` (before, a peer could
        // hand over `9223372036854775807-a` and the next local edit crashed the app).
        let db = try Database(name: "hostile", directory: TemporaryDirectory.make("lite"))
        defer { try? db.delete() }
        #expect(throws: LiteError.self) {
            try db.insertRevisions([(body: ["_id": "d", "_rev": "9223372036854775807-a", "v": 1], attachments: [:])])
        }
        let top = "\(Limits.maxRevGeneration)-a"
        #expect(
            try db.insertRevisions([(body: ["_id": "e", "_rev": .string(top), "v": 1], attachments: [:])]) == [true])
        var doc = try #require(try db.document("e"))
        doc["v"] = 2
        do {
            _ = try db.put(doc)
            Issue.record("an edit above the generation limit was accepted")
        } catch {
            guard case .badRequest = error else {
                Issue.record("expected badRequest, got \(error)")
                return
            }
        }
        #expect(try db.document("e")?.revision?.description == top)
    }

    @Test func aPulledRevisionsDigestWithASpaceIsRefusedAndTheDocumentStaysReadable() throws {
        // Proves a pulled revision whose `_revisions.ids` holds a digest no `_rev` could hold ("x y") comes back
        // as a `bad_request` row and stores nothing: the document still reads and takes an edit. Before, the
        // history was grafted and every later read of the document failed with "corrupt revision tree".
        let db = try Database(name: "digests", directory: TemporaryDirectory.make("lite"))
        defer { try? db.delete() }
        let first = try db.put(Document(id: "d", properties: ["v": 1]))
        let leaf = try #require(first.revision)
        let bad: JSON = [
            "_id": "d", "_rev": "3-z", "v": 3,
            "_revisions": ["start": 3, "ids": ["z", "x y", .string(leaf.digest)]],
        ]
        let rows = try db.bulkInsert([ReplicatedRevision(body: bad)])
        #expect(rows.first?["error"] == "bad_request", "\(rows)")
        var doc = try #require(try db.document("d"))
        #expect(doc.revision == leaf)
        doc["v"] = 2
        #expect(try db.put(doc).revision?.generation == 2)
    }

    @Test func changesSinceOutOfRangeIsA400() async throws {
        // Proves the listener's `_changes?since=` refuses values no sequence can have (`1e20` trapped in
        // `UInt64(Double)`, `2^64-1` in `Int(UInt64)`), and still takes integers written as `5.0`.
        let db = try Database(name: "since", directory: TemporaryDirectory.make("lite"))
        defer { try? db.delete() }
        try db.save(Document(id: "a", properties: ["v": 1]))
        let endpoint = LocalEndpoint(db)
        for bad in ["1e20", "18446744073709551615", "-1", "nan", "inf", "x"] {
            do {
                _ = try await endpoint.changes(since: bad, limit: 10, feed: .normal, filter: nil, heartbeatMs: nil)
                Issue.record("since=\(bad) accepted")
            } catch let ReplicationError.http(status, _, _) {
                #expect(status == 400)
            }
        }
        let all = try await endpoint.changes(since: "0.0", limit: 10, feed: .normal, filter: nil, heartbeatMs: nil)
        #expect(all.rows.map(\.id) == ["a"])
        let none = try await endpoint.changes(
            since: String(Int.max), limit: 10, feed: .normal, filter: nil, heartbeatMs: nil)
        #expect(none.rows.isEmpty)
    }
}
