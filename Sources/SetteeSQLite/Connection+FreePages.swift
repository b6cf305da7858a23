/// A database file's pages as SQLite counts them (`PRAGMA page_size`, `page_count`, `freelist_count`): the figures
/// behind a bucket's or a view index's `couch_*_data_size` and `couch_*_fragmentation` (ADR 0154).
public struct PageFigures: Sendable, Equatable {
    /// Bytes per page.
    public var pageSize: Int
    /// Pages of the database as of the last commit (the WAL's newer pages included).
    public var pageCount: Int
    /// Of those, pages on the free list: no table or index uses them; a write reuses them before growing the file.
    public var freePages: Int
    /// The file's `auto_vacuum` mode is INCREMENTAL: `releaseFreePages` gives pages back without rewriting the file.
    public var incremental: Bool

    public init(pageSize: Int, pageCount: Int, freePages: Int, incremental: Bool) {
        self.pageSize = pageSize
        self.pageCount = pageCount
        self.freePages = freePages
        self.incremental = incremental
    }

    /// Bytes of the pages in use.
    public var usedBytes: Int { max(0, pageCount - freePages) * pageSize }
    /// Bytes of the free pages.
    public var freeBytes: Int { max(0, freePages) * pageSize }
}

/// What one `releaseFreePages` call did.
public struct FreePagesReleased: Sendable, Equatable {
    /// Free pages removed from the end of the file by this call.
    public var released: Int
    /// Free pages left (0 once everything was given back).
    public var remaining: Int
    /// The call rewrote the whole file with `VACUUM` to make it incremental (its first compaction).
    public var rewroteFile: Bool

    public init(released: Int, remaining: Int, rewroteFile: Bool) {
        self.released = released
        self.remaining = remaining
        self.rewroteFile = rewroteFile
    }
}

extension Connection {
    /// The file's page figures; cheap (page 1 and the pragma answers only).
    public func pageFigures() throws(SQLiteError) -> PageFigures {
        PageFigures(
            pageSize: Int(try queryInt64("PRAGMA page_size") ?? 0),
            pageCount: Int(try queryInt64("PRAGMA page_count") ?? 0),
            freePages: Int(try queryInt64("PRAGMA freelist_count") ?? 0),
            incremental: try queryInt64("PRAGMA auto_vacuum") == 2)
    }

    /// Gives at most `maxPages` free pages back to the file system, as one transaction of its own (so a crash leaves
    /// the file as before or after it, never between): `PRAGMA incremental_vacuum(maxPages)` moves the pages in use
    /// from the file's end into free slots and truncates. A file not in `auto_vacuum=INCREMENTAL` mode (created
    /// before ADR 0154) is first rewritten by one `VACUUM` in that mode, which frees every page at once and holds the
    /// write lock for the whole rewrite (its temporary copy goes to a file, not memory). In WAL mode the freed pages
    /// leave the main file at the next checkpoint (`checkpoint(truncate: true)`). Must not run inside a transaction.
    public func releaseFreePages(maxPages: Int) throws(SQLiteError) -> FreePagesReleased {
        let before = try pageFigures()
        guard before.freePages > 0 else { return FreePagesReleased(released: 0, remaining: 0, rewroteFile: false) }
        if !before.incremental {
            // VACUUM's temporary database follows temp_store; the rewrite must not hold a copy of the file in RAM.
            try execute("PRAGMA temp_store=FILE")
            defer { try? execute("PRAGMA temp_store=MEMORY") }
            try execute("PRAGMA auto_vacuum=INCREMENTAL")
            try execute("VACUUM")
            let after = try pageFigures()
            return FreePagesReleased(
                released: max(0, before.pageCount - after.pageCount), remaining: after.freePages, rewroteFile: true)
        }
        try execute("PRAGMA incremental_vacuum(\(max(1, maxPages)))")
        let after = try pageFigures()
        return FreePagesReleased(
            released: max(0, before.freePages - after.freePages), remaining: after.freePages, rewroteFile: false)
    }
}

/// How full a table's b-tree pages are (SQLite's `dbstat` table, aggregated): the figure behind a compaction's
/// decision to repack a bucket's rows (ADR 0158). A rowid table whose rows are rewritten in place with sizes that swing
/// (a document's value and `_sync` growing and shrinking) keeps pages split by the larger versions, each holding a
/// row or two: `freelist_count` says nothing of those (no page is free), yet most of their bytes are unused.
public struct TableFill: Sendable, Equatable {
    /// Bytes of the table's pages (leaves, interior and overflow pages).
    public var pageBytes: Int
    /// Of those, bytes no cell uses.
    public var unusedBytes: Int

    public init(pageBytes: Int, unusedBytes: Int) {
        self.pageBytes = pageBytes
        self.unusedBytes = unusedBytes
    }

    /// Unused bytes' share of the pages, percent (0 for an empty table).
    public var unusedPercent: Int { pageBytes <= 0 ? 0 : min(100, max(0, unusedBytes) * 100 / pageBytes) }
}

/// What one `repackRows` call did.
public struct RowsRepacked: Sendable, Equatable {
    /// Rows moved by this call.
    public var moved: Int
    /// The highest rowid moved (or passed): the next call's `after`.
    public var through: Int64
    /// The last rowid of the table when the repack began (the first call's answer): rows above it were appended since,
    /// into pages already full.
    public var upTo: Int64
}

extension Connection {
    /// `table`'s fill (`dbstat`, aggregated); reads every page of the table, so a compaction asks it once per run, not
    /// per stats request. Nil when the SQLite library lacks `dbstat` (built without `SQLITE_ENABLE_DBSTAT_VTAB`).
    public func tableFill(_ table: String) -> TableFill? {
        guard let s = try? prepare("SELECT pgsize, unused FROM dbstat('main', 1) WHERE name = ?1"),
            (try? s.bindText(table, at: 1)) != nil, (try? s.step()) == true
        else { return nil }
        return TableFill(pageBytes: Int(s.int64(at: 0)), unusedBytes: Int(s.int64(at: 1)))
    }

    /// Repacks the rows of rowid table `table` with rowids in `(after, upTo]`, at most `maxRows` of them, by moving them
    /// to the end of the table in rowid order (new rowids past the current last one, gaps and order kept): appended
    /// rows fill new pages completely, and pages left without rows go to the free list for `releaseFreePages` to give
    /// back (ADR 0158). `upTo` nil: the table's last rowid now (the first call of a repack). One statement, so one
    /// transaction of its own: a crash leaves every row where it was or where it went, each exactly once (the table's
    /// unique indexes follow the rowids). Rows are only moved, never changed. Must not run inside a transaction.
    public func repackRows(_ table: String, after: Int64, upTo: Int64?, maxRows: Int) throws(SQLiteError)
        -> RowsRepacked
    {
        let last = try queryInt64("SELECT max(rowid) FROM \(table)") ?? 0
        let end = upTo ?? last
        guard after < end, maxRows > 0 else { return RowsRepacked(moved: 0, through: max(after, end), upTo: end) }
        // The highest rowid of this step: the maxRows-th row after `after`, or `end` when fewer are left.
        let find = try prepare(
            "SELECT rowid FROM \(table) WHERE rowid > ?1 AND rowid <= ?2 ORDER BY rowid LIMIT 1 OFFSET ?3")
        try find.bind(after, at: 1)
        try find.bind(end, at: 2)
        try find.bind(Int64(maxRows - 1), at: 3)
        let through = try find.step() ? find.int64(at: 0) : end
        // The rows land right after the table's last one: shifted by the distance from the step's first row (not
        // from `after`, which is 0 at each run's start: shifting by the last rowid itself doubled the rowids at every
        // run, and a long run's compactions every 30 s exhausted them after some sixty runs, ADR 0159 amendment).
        // So each run adds the span it moved to the rowids, gaps kept.
        let first = try queryInt64("SELECT min(rowid) FROM \(table) WHERE rowid > \(after)") ?? through
        let from = max(after, first > Int64.min ? first - 1 : after)
        let (offset, overflow) = last.subtractingReportingOverflow(from)
        guard !overflow, offset > 0, Int64.max - offset > through else {
            throw SQLiteError(extendedCode: 0, message: "rowids exhausted", context: "repack \(table)")
        }
        let move = try prepare("UPDATE \(table) SET rowid = rowid + ?1 WHERE rowid > ?2 AND rowid <= ?3")
        try move.bind(offset, at: 1)
        try move.bind(from, at: 2)
        try move.bind(through, at: 3)
        _ = try move.step()
        return RowsRepacked(moved: changes, through: through, upTo: end)
    }
}
