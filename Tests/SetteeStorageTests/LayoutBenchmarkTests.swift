import Foundation
import SetteeSQLite
import SetteeTestSupport
import Testing

/// The measurements behind docs/adr/0002-storage-layout.md: the same stream of 1 KiB-ish rows
/// (random keys, batches of 1000 per transaction, synchronous=FULL, 16 KiB pages) into three layouts.
/// Run with `SETTEE_LARGE_TESTS=1 swift test -c release --filter LayoutBenchmarkTests`.
@Suite(.enabled(if: ProcessInfo.processInfo.environment["SETTEE_LARGE_TESTS"] == "1"), .onTestThreads)
struct LayoutBenchmarkTests {
    static let rows = 200_000
    static let batch = 1000

    static func payload(_ i: Int) -> [UInt8] { Array(jsonDoc(i, size: 1024).prefix(560)) }

    static func keys() -> [[UInt8]] {
        var rng = SystemRandomNumberGenerator()
        return (0..<rows).map { _ in Array("user::\(UInt64.random(in: 0...UInt64.max, using: &rng))".utf8) }
    }

    static func run(_ name: String, files: Int, schema: String, insert: String) throws -> Double {
        let dir = TemporaryDirectory("storage")
        let conns = try (0..<files).map { i in try Connection(path: dir.path + "/f\(i).sqlite") }
        for c in conns { try c.execute(schema) }
        let stmts = try conns.map { try $0.prepare(insert) }
        let ks = keys()
        let start = Date()
        var i = 0
        while i < rows {
            let end = min(rows, i + batch)
            // Group the batch by file, as a per-vBucket flusher would commit per vBucket file.
            var byFile: [Int: [Int]] = [:]
            for j in i..<end { byFile[j % files, default: []].append(j) }
            for (f, js) in byFile {
                try conns[f].transaction { () throws(SQLiteError) in
                    for j in js {
                        try stmts[f].bind(Int64(j % 1024), at: 1)
                        try stmts[f].bindBlob(ks[j], at: 2)
                        try stmts[f].bind(Int64(j), at: 3)
                        try stmts[f].bindBlob(payload(j & 255), at: 4)
                        _ = try stmts[f].step()
                        stmts[f].reset()
                    }
                }
            }
            i = end
        }
        let rate = Double(rows) / Date().timeIntervalSince(start)
        print("layout \(name): \(Int(rate)) rows/s")
        return rate
    }

    /// Rowid table in write order + UNIQUE(vb, key) index (the chosen layout) vs WITHOUT ROWID keyed
    /// by (vb, key) vs one file per vBucket (couchstore-like; 64 files here to keep the run short).
    @Test func compareLayouts() throws {
        let rowid = try Self.run(
            "rowid+unique index, 1 file", files: 1,
            schema:
                "CREATE TABLE items(vb INTEGER, key BLOB, seqno INTEGER, value BLOB); CREATE UNIQUE INDEX k ON items(vb, key);",
            insert: "INSERT OR REPLACE INTO items(vb, key, seqno, value) VALUES(?1, ?2, ?3, ?4)")
        let withoutRowid = try Self.run(
            "WITHOUT ROWID by (vb,key), 1 file", files: 1,
            schema:
                "CREATE TABLE items(vb INTEGER, key BLOB, seqno INTEGER, value BLOB, PRIMARY KEY(vb, key)) WITHOUT ROWID;",
            insert: "INSERT OR REPLACE INTO items(vb, key, seqno, value) VALUES(?1, ?2, ?3, ?4)")
        let perVB = try Self.run(
            "rowid+unique index, 64 files", files: 64,
            schema:
                "CREATE TABLE items(vb INTEGER, key BLOB, seqno INTEGER, value BLOB); CREATE UNIQUE INDEX k ON items(vb, key);",
            insert: "INSERT OR REPLACE INTO items(vb, key, seqno, value) VALUES(?1, ?2, ?3, ?4)")
        #expect(rowid > 0 && withoutRowid > 0 && perVB > 0)
    }
}
