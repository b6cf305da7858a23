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
