import CSQLite

#if canImport(Glibc)
    import Glibc
#endif

/// One SQLite database connection with every setting that matters made explicit.
///
/// Not thread-safe by design: the connection is opened with `SQLITE_OPEN_NOMUTEX` and must be used by
/// one thread at a time (the engine gives each of its threads its own connection). WAL mode lets one
/// writer and many readers (each with its own connection) run concurrently.
public final class Connection {
    /// The PRAGMAs we never leave to SQLite's compile-time defaults.
    public struct Options: Sendable {
        public enum Synchronous: String, Sendable {
            case off = "OFF", normal = "NORMAL", full = "FULL", extra = "EXTRA"
        }
        /// Open read-only (a background reader). Read-only connections skip the settings that write.
        public var readOnly: Bool = false
        /// Create the file if it does not exist.
        public var create: Bool = true
        /// `FULL`: every commit fsyncs the WAL, so "committed" means "durable". The engine's
        /// persistence acknowledgement depends on this; never weaken it silently.
        public var synchronous: Synchronous = .full
        /// Page size for a new database; only effective before the first table is created.
        /// 16 KiB measured ~2x faster than 4 KiB for SQLite alone inserting random keys (docs/adr/0002); a
        /// bucket's data file asks for 4 KiB (`StorageSchema.newFilePageSize`, docs/adr/0072).
        public var pageSize: Int = 16384
        /// How long a statement waits for a lock held by another connection before SQLITE_BUSY.
        public var busyTimeoutMilliseconds: Int32 = 10_000
        /// WAL pages after which a commit checkpoints. Larger than SQLite's 1000 (16 MiB at 16 KiB
        /// pages) so checkpoints are rarer and amortised over many flusher batches, small enough that
        /// the WAL (and the time to replay it on open) stays bounded at ~64 MiB.
        public var walAutoCheckpointPages: Int = 4096
        /// The size (bytes) SQLite truncates the WAL file back to whenever a checkpoint has let it start over
        /// (`PRAGMA journal_size_limit`); nil: the checkpoint's own size, `walAutoCheckpointPages` pages of the file's
        /// page size. Without it the WAL file never shrinks: a checkpoint held back by a long read (a backfill, a
        /// backup's snapshot) lets it grow past the checkpoint size, and it keeps that size for good.
        public var walSizeLimitBytes: Int? = nil
        /// Page cache per connection in KiB (negative `cache_size` semantics).
        public var cacheSizeKiB: Int = 16 * 1024
        /// `auto_vacuum=INCREMENTAL` for a new file (only effective before its first table, like `pageSize`): free
        /// pages can then be given back to the file system a few at a time (`releaseFreePages`, ADR 0154). An
        /// existing file keeps its mode until a `VACUUM` changes it.
        public var incrementalVacuum: Bool = false
        public init() {}
    }

    @usableFromInline let db: OpaquePointer
    public let path: String
    private var closed = false
    /// Statements prepared here and possibly still alive, finalized by `close()`.
    private var statements: [WeakStatement] = []

    private final class WeakStatement {
        weak var statement: Statement?
        init(_ s: Statement) { statement = s }
    }

    /// Opens `path` with explicit flags and applies `options`. Throws on any failing PRAGMA, including
    /// a journal mode that did not switch to WAL (e.g. unsupported filesystem).
    public init(path: String, options: Options = Options()) throws(SQLiteError) {
        var flags: Int32 = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_PRIVATECACHE
        if options.readOnly {
            flags |= SQLITE_OPEN_READONLY
        } else {
            flags |= SQLITE_OPEN_READWRITE
            if options.create { flags |= SQLITE_OPEN_CREATE }
        }
        var handle: OpaquePointer?
        let rc = sqlite3_open_v2(path, &handle, flags, nil)
        guard rc == SQLITE_OK, let handle else {
            let err = SQLiteError.from(handle, rc, "open \(path)")
            if let handle { sqlite3_close_v2(handle) }
            throw err
        }
        self.db = handle
        self.path = path
        sqlite3_extended_result_codes(handle, 1)
        do throws(SQLiteError) {
            let brc = sqlite3_busy_timeout(handle, options.busyTimeoutMilliseconds)
            if brc != SQLITE_OK { throw SQLiteError.from(handle, brc, "busy_timeout") }
            if !options.readOnly {
                // page_size must precede journal_mode=WAL and the first table to take effect.
                try execute("PRAGMA page_size=\(options.pageSize)")
                if options.incrementalVacuum { try execute("PRAGMA auto_vacuum=INCREMENTAL") }
                let mode = try switchToWAL(waitingUpTo: options.busyTimeoutMilliseconds)
                guard mode.lowercased() == "wal" else {
                    throw SQLiteError(
                        extendedCode: SQLITE_ERROR, message: "journal_mode is \(mode), wanted wal",
                        context: "journal_mode")
                }
                try execute("PRAGMA wal_autocheckpoint=\(options.walAutoCheckpointPages)")
                let pageBytes = Int(try queryInt64("PRAGMA page_size") ?? Int64(options.pageSize))
                try limitWALSize(bytes: options.walSizeLimitBytes ?? options.walAutoCheckpointPages * pageBytes)
            }
            try execute("PRAGMA synchronous=\(options.synchronous.rawValue)")
            try execute("PRAGMA cache_size=-\(options.cacheSizeKiB)")
            // Temporary b-trees (sorts) in memory: the flusher never needs big ones.
            try execute("PRAGMA temp_store=MEMORY")
        } catch {
            sqlite3_close_v2(handle)
            closed = true
            throw error
        }
    }

    deinit { close() }

    /// `PRAGMA journal_mode=WAL`, retried while SQLite answers SQLITE_BUSY, for up to `milliseconds`. Switching a
    /// new file to WAL takes its exclusive lock from a shared one; when two connections do it at once (two
    /// processes opening one new Lite database, as the README's `start` and `list --live` do) one of them is
    /// answered SQLITE_BUSY at once, without the busy handler (SQLite's deadlock avoidance). Once the file is in WAL
    /// mode the pragma is a no-op, so only the first opens of a new file can meet this.
    private func switchToWAL(waitingUpTo milliseconds: Int32) throws(SQLiteError) -> String {
        let deadline = ContinuousClock.now + .milliseconds(Int(max(0, milliseconds)))
        while true {
            do {
                return try queryText("PRAGMA journal_mode=WAL")
            } catch  where error.isBusy && ContinuousClock.now < deadline {
                usleep(2_000)
            }
        }
    }

    /// Finalizes every statement still alive and closes the connection, releasing its file locks now.
    public func close() {
        if closed { return }
        closed = true
        for w in statements { w.statement?.finalize() }
        statements = []
        sqlite3_close_v2(db)
    }

    /// Runs one or more statements that return no rows we need.
    public func execute(_ sql: String) throws(SQLiteError) {
        var err: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(db, sql, nil, nil, &err)
        if rc != SQLITE_OK {
            let msg = err.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(rc))
            sqlite3_free(err)
            throw SQLiteError(extendedCode: sqlite3_extended_errcode(db), message: msg, context: sql)
        }
    }

    /// Compiles `sql` once; reuse the statement for every row.
    public func prepare(_ sql: String) throws(SQLiteError) -> Statement {
        precondition(!closed, "prepare on a closed connection to \(path)")
        var stmt: OpaquePointer?
        let rc = sqlite3_prepare_v3(db, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &stmt, nil)
        guard rc == SQLITE_OK, let stmt else { throw SQLiteError.from(db, rc, "prepare \(sql)") }
        let s = Statement(connection: self, stmt: stmt)
        statements.removeAll { $0.statement == nil }
        statements.append(WeakStatement(s))
        return s
    }

    /// First column of the first row as text (PRAGMA answers).
    public func queryText(_ sql: String) throws(SQLiteError) -> String {
        let s = try prepare(sql)
        guard try s.step() else { return "" }
        return s.text(at: 0)
    }

    /// First column of the first row as an integer, or nil without rows.
    public func queryInt64(_ sql: String) throws(SQLiteError) -> Int64? {
        let s = try prepare(sql)
        guard try s.step() else { return nil }
        return s.int64(at: 0)
    }

    /// `BEGIN IMMEDIATE` (take the write lock now, not at the first write, so a busy error cannot
    /// surface halfway through a batch), run `body`, `COMMIT`; `ROLLBACK` if anything throws.
    public func transaction<T, E: Error>(_ body: () throws(E) -> T) throws(TransactionError<E>) -> T {
        do { try execute("BEGIN IMMEDIATE") } catch { throw .sqlite(error) }
        let result: T
        do {
            result = try body()
        } catch {
            try? execute("ROLLBACK")
            throw .body(error)
        }
        do { try execute("COMMIT") } catch {
            // After a failed COMMIT the transaction may still be open; roll it back so the
            // connection is usable, but the caller must treat the batch as not durable.
            if sqlite3_get_autocommit(db) == 0 { try? execute("ROLLBACK") }
            throw .sqlite(error)
        }
        return result
    }

    /// Rows changed by the last INSERT/UPDATE/DELETE.
    public var changes: Int { Int(sqlite3_changes64(db)) }

    /// The rowid of the last row this connection inserted (cheaper than `INSERT ... RETURNING`).
    public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(db) }

    /// `PRAGMA journal_size_limit`: the WAL file is truncated to `bytes` each time a checkpoint lets it start over
    /// (see `Options.walSizeLimitBytes`).
    public func limitWALSize(bytes: Int) throws(SQLiteError) {
        try execute("PRAGMA journal_size_limit=\(max(0, bytes))")
    }

    /// How a checkpoint treats the WAL (`sqlite3_wal_checkpoint_v2`'s modes).
    public enum CheckpointMode: Sendable {
        /// Copies what no reader still needs into the database file; never waits.
        case passive
        /// Copies everything (waiting for readers, up to the busy timeout) so the next write starts the WAL over;
        /// the file keeps its size, down to `Options.walSizeLimitBytes` at that write.
        case restart
        /// `restart`, then the WAL file truncated to nothing.
        case truncate
    }

    /// Checkpoints the WAL into the database file (a database file whose last commit shrank it is truncated when
    /// every frame has been copied).
    public func checkpoint(_ mode: CheckpointMode = .passive) throws(SQLiteError) {
        let code =
            switch mode {
            case .passive: SQLITE_CHECKPOINT_PASSIVE
            case .restart: SQLITE_CHECKPOINT_RESTART
            case .truncate: SQLITE_CHECKPOINT_TRUNCATE
            }
        let rc = sqlite3_wal_checkpoint_v2(db, nil, code, nil, nil)
        if rc != SQLITE_OK { throw SQLiteError.from(db, rc, "wal_checkpoint") }
    }
}

/// Why `Connection.transaction` failed: SQLite itself (BEGIN/COMMIT) or the body.
public enum TransactionError<E: Error>: Error {
    case sqlite(SQLiteError)
    case body(E)
}
