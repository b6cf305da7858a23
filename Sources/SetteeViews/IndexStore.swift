import SetteeCore
import SetteeJSON
import SetteeSQLite

/// The SQLite file of one design document's index (all its views), beside the bucket's data.
///
/// Tables:
/// - `rows(view, sk, doc, n, vb, key, value, num)`, primary key `(view, sk, doc, n)` WITHOUT ROWID:
///   the view B-tree. `sk` is the collation sort key (`Collation.encode`), so SQLite's memcmp BLOB
///   order is view order; ties break on the doc id bytes, then emission order `n`. `num` is the
///   value when it is a number (NULL otherwise), so `_sum`/`_stats`/`_count` over a range run as one
///   SQL aggregate over the range without decoding rows.
/// - index `rows_by_doc(vb, doc)`: the back-index (doc id → its rows), used to remove a document's
///   old rows when it changes or is deleted, and all rows of a vBucket that stops being active.
/// - `totals(view, vb, count)`: stored reductions: the row count per view and vBucket, so
///   `total_rows` and a whole-range `_count` cost O(vBuckets), not O(rows).
/// - `expiring(vb, doc, exp)`: indexed documents with a TTL, so a pass can ask the change feed to
///   expire them once it passed even when nothing else changed in their vBucket.
/// - `vbuckets(vb, seqno, uuid)`: the last indexed seqno per vBucket and the history (failover-log uuid) it
///   belongs to; indexing resumes there after a restart, or rebuilds the vBucket when that history ended
///   below it (ADR 0088).
/// - `meta(k, v)`: `signature` (of the design document's functions) and `format`.
///
/// Invariant: a vBucket's rows, totals and seqno change in the same transaction, so after a crash
/// the index is exactly "everything up to `seqno`" for every vBucket.
enum IndexStore {
    /// 2: `vbuckets` carries the history uuid (ADR 0088). A file of another format is rebuilt.
    static let format: Int64 = 2
    static let createVBuckets =
        "CREATE TABLE IF NOT EXISTS vbuckets (vb INTEGER PRIMARY KEY, seqno INTEGER NOT NULL, uuid INTEGER NOT NULL);"

    static func open(path: String, signature: UInt32) throws(SQLiteError) -> Connection {
        var options = Connection.Options()
        // The index can be rebuilt from the data, and its seqno commits with its rows: NORMAL (no
        // fsync per commit) cannot make it inconsistent, only lose the last batches, which are
        // re-indexed from the change stream.
        options.synchronous = .normal
        // Free pages can be given back a step at a time by a compaction (ADR 0154).
        options.incrementalVacuum = true
        let db = try Connection(path: path, options: options)
        // One transaction each for the tables and for a reset: a reader never sees some of the tables without the
        // others, nor the `vbuckets` table dropped and not yet made again.
        try db.execute(
            """
            BEGIN IMMEDIATE;
            CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL) WITHOUT ROWID;
            \(createVBuckets)
            CREATE TABLE IF NOT EXISTS rows (
                view INTEGER NOT NULL, sk BLOB NOT NULL, doc BLOB NOT NULL, n INTEGER NOT NULL,
                vb INTEGER NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL, num REAL,
                PRIMARY KEY (view, sk, doc, n)) WITHOUT ROWID;
            CREATE INDEX IF NOT EXISTS rows_by_doc ON rows (vb, doc);
            CREATE TABLE IF NOT EXISTS expiring (
                vb INTEGER NOT NULL, doc BLOB NOT NULL, exp INTEGER NOT NULL,
                PRIMARY KEY (vb, doc)) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS totals (
                view INTEGER NOT NULL, vb INTEGER NOT NULL, count INTEGER NOT NULL,
                PRIMARY KEY (view, vb)) WITHOUT ROWID;
            COMMIT;
            """)
        let stored = try db.queryInt64("SELECT v FROM meta WHERE k = 'signature'")
        let storedFormat = try db.queryInt64("SELECT v FROM meta WHERE k = 'format'")
        if stored != Int64(signature) || storedFormat != format {
            // A different design (or a file from another format): start from scratch.
            try db.execute(
                """
                BEGIN IMMEDIATE;
                DELETE FROM rows; DELETE FROM totals; DELETE FROM expiring;
                DROP TABLE vbuckets; \(createVBuckets)
                INSERT OR REPLACE INTO meta VALUES ('signature', \(Int64(signature)));
                INSERT OR REPLACE INTO meta VALUES ('format', \(format));
                COMMIT;
                """)
        }
        return db
    }

    static func openReader(path: String) throws(SQLiteError) -> Connection {
        var options = Connection.Options()
        options.readOnly = true
        options.synchronous = .normal
        options.cacheSizeKiB = 4 * 1024
        return try Connection(path: path, options: options)
    }
}

/// The writer's prepared statements, on the index's worker thread.
final class IndexWriter {
    let db: Connection
    let selectDocRows: Statement
    let deleteDocRows: Statement
    let insertRow: Statement
    let setSeqno: Statement
    let addTotal: Statement
    let deleteVB: Statement
    let deleteVBTotals: Statement
    let deleteVBSeqno: Statement
    let deleteVBExpiring: Statement
    let upsertExpiring: Statement
    let deleteExpiring: Statement

    init(db: Connection) throws(SQLiteError) {
        self.db = db
        selectDocRows = try db.prepare("SELECT view FROM rows INDEXED BY rows_by_doc WHERE vb = ?1 AND doc = ?2")
        deleteDocRows = try db.prepare("DELETE FROM rows WHERE vb = ?1 AND doc = ?2")
        insertRow = try db.prepare(
            "INSERT OR REPLACE INTO rows (view, sk, doc, n, vb, key, value, num) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
        )
        setSeqno = try db.prepare("INSERT OR REPLACE INTO vbuckets (vb, seqno, uuid) VALUES (?1, ?2, ?3)")
        addTotal = try db.prepare(
            "INSERT INTO totals (view, vb, count) VALUES (?1, ?2, ?3) "
                + "ON CONFLICT (view, vb) DO UPDATE SET count = count + excluded.count")
        deleteVB = try db.prepare("DELETE FROM rows WHERE vb = ?1")
        deleteVBTotals = try db.prepare("DELETE FROM totals WHERE vb = ?1")
        deleteVBSeqno = try db.prepare("DELETE FROM vbuckets WHERE vb = ?1")
        deleteVBExpiring = try db.prepare("DELETE FROM expiring WHERE vb = ?1")
        upsertExpiring = try db.prepare("INSERT OR REPLACE INTO expiring (vb, doc, exp) VALUES (?1, ?2, ?3)")
        deleteExpiring = try db.prepare("DELETE FROM expiring WHERE vb = ?1 AND doc = ?2")
    }

    /// Stored position per vBucket.
    func loadPositions() throws(SQLiteError) -> [Int: IndexPosition] {
        let s = try db.prepare("SELECT vb, seqno, uuid FROM vbuckets")
        var out: [Int: IndexPosition] = [:]
        while try s.step() {
            out[Int(s.int64(at: 0))] = IndexPosition(
                seqno: UInt64(bitPattern: s.int64(at: 1)), uuid: VBucketUUID(UInt64(bitPattern: s.int64(at: 2))))
        }
        return out
    }

    /// Indexed documents with a TTL, per vBucket.
    func loadExpiring() throws(SQLiteError) -> [Int: [[UInt8]: UInt32]] {
        let s = try db.prepare("SELECT vb, doc, exp FROM expiring")
        var out: [Int: [[UInt8]: UInt32]] = [:]
        while try s.step() {
            out[Int(s.int64(at: 0)), default: [:]][s.blob(at: 1)] = UInt32(truncatingIfNeeded: s.int64(at: 2))
        }
        return out
    }

    /// Records (expiry != 0) or forgets (0) a document's TTL.
    func setExpiring(vb: Int, doc: [UInt8], expiry: UInt32) throws(SQLiteError) {
        let s = expiry == 0 ? deleteExpiring : upsertExpiring
        try s.bind(Int64(vb), at: 1)
        try s.bindBlob(doc, at: 2)
        if expiry != 0 { try s.bind(Int64(expiry), at: 3) }
        _ = try s.step()
        s.reset()
    }

    /// Removes a document's rows in `vb`; adds the removed counts per view to `deltas` (negative).
    func removeDocument(vb: Int, doc: [UInt8], deltas: inout [Int: Int]) throws(SQLiteError) {
        try selectDocRows.bind(Int64(vb), at: 1)
        let found = try selectDocRows.withBlobBound(doc, at: 2) { () throws(SQLiteError) -> Bool in
            var any = false
            while try selectDocRows.step() {
                deltas[Int(selectDocRows.int64(at: 0)), default: 0] -= 1
                any = true
            }
            return any
        }
        selectDocRows.reset()
        guard found else { return }
        try deleteDocRows.bind(Int64(vb), at: 1)
        try deleteDocRows.withBlobBound(doc, at: 2) { () throws(SQLiteError) in _ = try deleteDocRows.step() }
        deleteDocRows.reset()
    }

    /// Inserts the staged rows in their key order (bound without copies from the staging arena; `reset` drops
    /// every binding before this returns).
    func insert(_ staged: StagedRows) throws(SQLiteError) {
        let order = staged.ordered()
        guard !order.isEmpty else { return }
        let result = staged.arena.withUnsafeBytes { bytes in
            staged.rows.withUnsafeBufferPointer { rows in
                Result { () throws(SQLiteError) in
                    defer { insertRow.reset() }
                    for i in order {
                        let row = rows[i]
                        try insertRow.bind(Int64(row.view), at: 1)
                        try insertRow.bindBlobNoCopy(UnsafeRawBufferPointer(rebasing: bytes[row.sortKey]), at: 2)
                        try insertRow.bindBlobNoCopy(UnsafeRawBufferPointer(rebasing: bytes[row.doc]), at: 3)
                        try insertRow.bind(Int64(row.n), at: 4)
                        try insertRow.bind(Int64(row.vb), at: 5)
                        try insertRow.bindBlobNoCopy(UnsafeRawBufferPointer(rebasing: bytes[row.key]), at: 6)
                        try insertRow.bindBlobNoCopy(UnsafeRawBufferPointer(rebasing: bytes[row.value]), at: 7)
                        if let d = row.number {
                            try insertRow.bindDouble(d, at: 8)
                        } else {
                            try insertRow.bindNull(at: 8)
                        }
                        _ = try insertRow.step()
                        insertRow.reset()
                    }
                }
            }
        }
        try result.get()
    }

    func commitVBucket(vb: Int, position: IndexPosition, deltas: [Int: Int]) throws(SQLiteError) {
        for (view, delta) in deltas where delta != 0 {
            try addTotal.bind(Int64(view), at: 1)
            try addTotal.bind(Int64(vb), at: 2)
            try addTotal.bind(Int64(delta), at: 3)
            _ = try addTotal.step()
            addTotal.reset()
        }
        try setSeqno.bind(Int64(vb), at: 1)
        try setSeqno.bind(Int64(bitPattern: position.seqno), at: 2)
        try setSeqno.bind(Int64(bitPattern: position.uuid.rawValue), at: 3)
        _ = try setSeqno.step()
        setSeqno.reset()
    }

    /// Drops every row, total and the seqno of `vb` (it stopped being active here).
    func dropVBucket(_ vb: Int) throws(SQLiteError) {
        for s in [deleteVB, deleteVBTotals, deleteVBSeqno, deleteVBExpiring] {
            try s.bind(Int64(vb), at: 1)
            _ = try s.step()
            s.reset()
        }
    }

    /// The value as a number when the JSON text is one.
    static func number(_ json: ArraySlice<UInt8>) -> Double? {
        guard let first = json.first, first == UInt8(ascii: "-") || (first >= 0x30 && first <= 0x39) else {
            return nil
        }
        return Double(String(decoding: json, as: UTF8.self))
    }
}
