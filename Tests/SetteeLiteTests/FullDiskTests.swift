import SetteeJSON
import SetteeSQLite
import SetteeTestSupport
import Testing

@testable import SetteeLite

/// A database whose file may not grow past a few pages: SQLite answers SQLITE_FULL, as on a full disk.
@Suite struct FullDiskTests {
    private func cappedDatabase(_ name: String, extraPages: Int64) throws -> Database {
        let db = try Database(name: name, directory: TemporaryDirectory.make("lite"))
        try db.writer.with { s in
            let pages = try s.connection.queryInt64("PRAGMA page_count") ?? 0
            try s.connection.execute("PRAGMA max_page_count=\(pages + extraPages)")
        }
        return db
    }

    private func revision(_ id: String, bytes: Int) -> ReplicatedRevision {
        ReplicatedRevision(body: [
            "_id": .string(id), "_rev": "1-a", "pad": .string(String(repeating: "x", count: bytes)),
            "_revisions": ["start": 1, "ids": ["a"]],
        ])
    }

    // Proves a full disk met while `_bulk_docs new_edits=false` stores revisions one at a time (the batch held a
    // refused revision) is thrown as `.unavailable` (503), not written as that revision's error row. A row is
    // counted by the replicator and checkpointed past, so the revision would never be pulled again; thrown, the
    // batch is retried once the disk has room. Before, the full disk came back as an `internal_server_error` row.
    @Test func aFullDiskInTheOneAtATimeFallbackIsThrown() throws {
        let db = try cappedDatabase("fallback", extraPages: 8)
        defer { try? db.delete() }
        let refused = ReplicatedRevision(body: [
            "_id": "bad", "_rev": "1-a", "_revisions": ["start": 1, "ids": ["a b"]],
        ])
        let batch = [refused] + (0..<16).map { revision("d\($0)", bytes: 16 << 10) }
        do {
            let rows = try db.bulkInsert(batch)
            Issue.record("a full disk came back as rows: \(rows.compactMap { $0["error"] })")
        } catch {
            guard case .unavailable = error else {
                Issue.record("expected .unavailable, got \(error)")
                return
            }
            #expect(error.status == 503 && error.errorName == "service_unavailable")
        }
    }

    // Proves a full disk in a plain save is `.unavailable` too, and that the refusal of one revision (not the
    // machine's state) is still a row.
    @Test func aFullDiskIsUnavailableAndARefusedRevisionStaysARow() throws {
        let db = try cappedDatabase("plain", extraPages: 4)
        defer { try? db.delete() }
        let refused = ReplicatedRevision(body: [
            "_id": "bad", "_rev": "1-a", "_revisions": ["start": 1, "ids": ["a b"]],
        ])
        #expect(try db.bulkInsert([refused, revision("small", bytes: 10)]).first?["error"] == "bad_request")
        do {
            _ = try db.put(Document(id: "big", properties: ["pad": .string(String(repeating: "y", count: 1 << 20))]))
            Issue.record("a 1 MiB document was stored in a file capped at a few pages")
        } catch {
            guard case .unavailable = error else {
                Issue.record("expected .unavailable, got \(error)")
                return
            }
        }
    }
}
