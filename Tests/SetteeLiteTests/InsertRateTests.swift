import Foundation
import SetteeJSON
import SetteeLite
import SetteeSQLite
import SetteeTestSupport
import Testing

/// Insert-rate measurement: Lite saves in one transaction and one at a time, next to
/// raw SQLite inserts of the same body bytes with the same PRAGMAs. Off by default (it takes a while in
/// debug builds); run with `SETTEE_LITE_BENCH=100000 swift test --filter InsertRate`.
@Suite struct InsertRateTests {
    static let count = Int(ProcessInfo.processInfo.environment["SETTEE_LITE_BENCH"] ?? "") ?? 0

    static func body(_ i: Int) -> JSON {
        ["type": "image", "timestamp_added": .number(Double(1_700_000_000 + i)), "title": .string("photo \(i)")]
    }

    @Test(.enabled(if: count > 0)) func insertRates() throws {
        // Proves nothing is lost at volume (every document is counted back) and prints the rates.
        let n = Self.count
        let dir = TemporaryDirectory.make("lite")
        func rate(_ label: String, _ body: () throws -> Void) rethrows -> Double {
            let start = ContinuousClock.now
            try body()
            let s = (ContinuousClock.now - start) / .seconds(1)
            print(String(format: "%@: %d docs in %.2f s = %.0f docs/s", label, n, s, Double(n) / s))
            return Double(n) / s
        }
        let batchDB = try Database(name: "batch", directory: dir)
        defer { try? batchDB.delete() }
        _ = try rate("lite, one transaction") {
            _ = try batchDB.saveAll((0..<n).map { Document(id: "doc\($0)", properties: Self.body($0)) })
        }
        #expect(batchDB.documentCount == n)
        let singleDB = try Database(name: "single", directory: dir)
        defer { try? singleDB.delete() }
        _ = try rate("lite, one transaction per save") {
            for i in 0..<n { try singleDB.save(Document(id: "doc\(i)", properties: Self.body(i))) }
        }
        #expect(singleDB.documentCount == n)
        var options = Connection.Options()
        options.synchronous = .normal
        options.pageSize = 4096
        for perRow in [false, true] {
            let raw = try Connection(path: dir + "/raw-\(perRow).sqlite3", options: options)
            try raw.execute("CREATE TABLE docs (id TEXT PRIMARY KEY, body BLOB NOT NULL)")
            let insert = try raw.prepare("INSERT INTO docs (id, body) VALUES (?, ?)")
            _ = try rate(perRow ? "raw SQLite, one transaction per row" : "raw SQLite, one transaction") {
                if !perRow { try raw.execute("BEGIN") }
                for i in 0..<n {
                    if perRow { try raw.execute("BEGIN") }
                    try insert.bindText("doc\(i)", at: 1)
                    try insert.bindBlob(Self.body(i).serialized(), at: 2)
                    _ = try insert.step()
                    insert.reset()
                    if perRow { try raw.execute("COMMIT") }
                }
                if !perRow { try raw.execute("COMMIT") }
            }
            #expect(try raw.queryInt64("SELECT count(*) FROM docs") == Int64(n))
            raw.close()
        }
    }
}
