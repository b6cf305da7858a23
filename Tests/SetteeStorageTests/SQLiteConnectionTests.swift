import Foundation
import SetteeSQLite
import SetteeTestSupport
import Synchronization
import Testing

@Suite(.onTestThreads) struct SQLiteConnectionTests {
    /// Opening a connection sets the PRAGMAs we rely on explicitly: WAL, synchronous=FULL, 16 KiB pages.
    @Test func pragmasAreExplicit() throws {
        let dir = TemporaryDirectory("storage")
        let c = try Connection(path: dir.path + "/t.sqlite")
        try c.execute("CREATE TABLE t(x)")
        #expect(try c.queryText("PRAGMA journal_mode") == "wal")
        #expect(try c.queryInt64("PRAGMA synchronous") == 2)
        #expect(try c.queryInt64("PRAGMA page_size") == 16384)
        #expect(try c.queryInt64("PRAGMA wal_autocheckpoint") == 4096)
        #expect(try c.queryInt64("PRAGMA busy_timeout") == 10_000)
        #expect(try c.queryInt64("PRAGMA journal_size_limit") == 4096 * 16384)
    }

    /// Regression (ADR 0159 amendment): every repack run starts from rowid 0, and shifted the rows by the table's last
    /// rowid, so each run doubled the rowids; a long run's auto-compactions (one every 30 s) exhausted them after some
    /// sixty runs ("rowids exhausted", the repack refused from then on). Each run now adds the span it moved: 200 runs
    /// over 1,000 rows leave the last rowid near 200,000, every row there once.
    @Test func repeatedRepacksGrowRowidsByTheSpanMoved() throws {
        let dir = TemporaryDirectory("storage")
        let c = try Connection(path: dir.path + "/t.sqlite")
        try c.execute("CREATE TABLE t(k INTEGER NOT NULL UNIQUE, v BLOB)")
        try c.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000) "
                + "INSERT INTO t(k, v) SELECT i, zeroblob(100) FROM n")
        for run in 0..<200 {
            var after: Int64 = 0
            var upTo: Int64? = nil
            var steps = 0
            while true {
                let step = try c.repackRows("t", after: after, upTo: upTo, maxRows: 300)
                if step.moved == 0 { break }
                (after, upTo) = (step.through, step.upTo)
                steps += 1
                // 1,000 rows at 300 a step: four steps a run; more means a step moved rows it had moved already.
                try #require(steps <= 4, "run \(run): step \(steps)")
            }
        }
        let last = try c.queryInt64("SELECT max(rowid) FROM t") ?? 0
        #expect(last <= 201 * 1000, "last rowid \(last)")
        #expect(try c.queryInt64("SELECT count(*) FROM t") == 1000)
        #expect(try c.queryInt64("SELECT count(DISTINCT k) FROM t") == 1000)
    }

    /// A checkpoint held back by a reader lets the WAL grow past its checkpoint size; once the reader is gone and a
    /// checkpoint lets the WAL start over, the file is truncated back to `walSizeLimitBytes` (without
    /// `journal_size_limit` SQLite keeps the WAL file at its largest size for good).
    @Test func aWALThatGrewBehindAReaderShrinksToItsLimit() throws {
        let dir = TemporaryDirectory("storage")
        let path = dir.path + "/t.sqlite"
        var options = Connection.Options()
        options.pageSize = 4096
        options.walAutoCheckpointPages = 64  // 256 KiB
        let writer = try Connection(path: path, options: options)
        #expect(try writer.queryInt64("PRAGMA journal_size_limit") == 64 * 4096)
        try writer.execute("CREATE TABLE t(x BLOB)")
        let reader = try Connection(path: path)
        try reader.execute("BEGIN")
        #expect(try reader.queryInt64("SELECT count(*) FROM t") == 0)  // the read snapshot is now held
        let insert = try writer.prepare("INSERT INTO t(x) VALUES(?)")
        func writeMiB(_ mib: Int) throws {
            for _ in 0..<(mib * 64) {
                try writer.transaction { () throws(SQLiteError) in
                    try insert.bindBlob([UInt8](repeating: 7, count: 16 * 1024), at: 1)
                    _ = try insert.step()
                    insert.reset()
                }
            }
        }
        let walPath = path + "-wal"
        func walBytes() -> Int { (try? FileManager.default.attributesOfItem(atPath: walPath)[.size] as? Int) ?? -1 }
        try writeMiB(4)
        let grown = walBytes()
        #expect(grown > 4 << 20, "the WAL behind a reader: \(grown) bytes")
        try reader.execute("COMMIT")
        // The next commits checkpoint (the WAL is past 64 pages) and then start the WAL over, truncating it.
        try writeMiB(1)
        try writer.checkpoint()
        try writeMiB(1)
        let after = walBytes()
        #expect(after <= 2 << 20, "the WAL after the reader left: \(after) bytes (was \(grown))")
    }

    /// Regression (README's `settee-lite --db ./phone start` and `list --live` started together failed with
    /// "database is locked"): connections opening one new file at the same moment all switch it to WAL. SQLite
    /// answers one of two concurrent switches SQLITE_BUSY at once, without the busy handler; the open retries it.
    @Test func concurrentFirstOpensOfANewFileAllSucceed() throws {
        let dir = TemporaryDirectory("storage")
        let failures = Mutex<[String]>([])
        for round in 0..<40 {
            let path = dir.path + "/new-\(round).sqlite"
            DispatchQueue.concurrentPerform(iterations: 4) { _ in
                do {
                    let c = try Connection(path: path)
                    let mode = try c.queryText("PRAGMA journal_mode")
                    if mode != "wal" { failures.withLock { $0.append("round \(round): mode \(mode)") } }
                    c.close()
                } catch {
                    failures.withLock { $0.append("round \(round): \(error)") }
                }
            }
        }
        let seen = failures.withLock { $0 }
        #expect(seen.isEmpty, "\(seen.count) opens failed: \(seen.prefix(3))")
    }

    /// Int64 and blob binds round-trip (incl. an empty blob and a no-copy bind), and a rolled-back
    /// transaction leaves nothing behind.
    @Test func bindStepColumnAndTransactions() throws {
        let dir = TemporaryDirectory("storage")
        let c = try Connection(path: dir.path + "/t.sqlite")
        try c.execute("CREATE TABLE t(a INTEGER, b BLOB)")
        let ins = try c.prepare("INSERT INTO t(a, b) VALUES(?1, ?2)")
        try c.transaction { () throws(SQLiteError) in
            try ins.bind(Int64.min, at: 1)
            try ins.bindBlob([1, 2, 3], at: 2)
            _ = try ins.step()
            ins.reset()
            let payload: [UInt8] = [9, 8, 7, 6]
            let r = payload.withUnsafeBytes { p in
                Result { () throws(SQLiteError) in
                    try ins.bind(42, at: 1)
                    try ins.bindBlobNoCopy(p, at: 2)
                    _ = try ins.step()
                }
            }
            ins.reset()
            try r.get()
            try ins.bind(7, at: 1)
            try ins.bindBlob([], at: 2)
            _ = try ins.step()
            ins.reset()
            try ins.bind(8, at: 1)
            _ = try ins.withBlobBound([5, 5], at: 2) { () throws(SQLiteError) in try ins.step() }
            ins.reset()
        }
        let sel = try c.prepare("SELECT a, b, typeof(b) FROM t ORDER BY rowid")
        var rows: [(Int64, [UInt8], String)] = []
        while try sel.step() { rows.append((sel.int64(at: 0), sel.blob(at: 1), sel.text(at: 2))) }
        #expect(rows.count == 4)
        #expect(rows[3].0 == 8 && rows[3].1 == [5, 5])
        #expect(rows[0].0 == Int64.min && rows[0].1 == [1, 2, 3])
        #expect(rows[1].0 == 42 && rows[1].1 == [9, 8, 7, 6])
        #expect(rows[2].1 == [] && rows[2].2 == "blob")

        struct Boom: Error {}
        #expect(throws: TransactionError<Boom>.self) {
            try c.transaction { () throws(Boom) in
                try? c.execute("INSERT INTO t(a, b) VALUES(1, x'00')")
                throw Boom()
            }
        }
        #expect(try c.queryInt64("SELECT count(*) FROM t") == 4)
    }

    /// SQLite failures surface as `SQLiteError` with SQLite's code and message.
    @Test func errorsAreTyped() throws {
        let dir = TemporaryDirectory("storage")
        let c = try Connection(path: dir.path + "/t.sqlite")
        do {
            _ = try c.prepare("SELECT * FROM missing_table")
            Issue.record("prepare of a missing table succeeded")
        } catch {
            #expect(error.code == 1)  // SQLITE_ERROR
            #expect(error.message.contains("missing_table"))
        }
        var ro = Connection.Options()
        ro.readOnly = true
        ro.create = false
        #expect(throws: SQLiteError.self) { try Connection(path: dir.path + "/absent.sqlite", options: ro) }
    }
}
