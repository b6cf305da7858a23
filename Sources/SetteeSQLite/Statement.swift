import CSQLite

/// A prepared statement. Bind, `step()` until it returns false, `reset()`, repeat.
/// Owned by one thread, like its `Connection`. Parameter and column indexes follow SQLite:
/// parameters count from 1, columns from 0.
public final class Statement {
    // Keeps the connection open while the statement lives (sqlite3_close_v2 would defer anyway).
    private let connection: Connection
    @usableFromInline let stmt: OpaquePointer
    private var finalized = false

    init(connection: Connection, stmt: OpaquePointer) {
        self.connection = connection
        self.stmt = stmt
    }

    deinit { finalize() }

    /// Releases the statement; called by `Connection.close()` for every statement still alive, so the
    /// database is really closed (locks released) when `close()` returns, not when the last
    /// statement happens to be deallocated. Using the statement afterwards is a programmer error.
    func finalize() {
        if finalized { return }
        finalized = true
        sqlite3_finalize(stmt)
    }

    // SQLITE_TRANSIENT: SQLite copies the bytes before bind returns.
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    @inlinable
    public func bind(_ value: Int64, at index: Int32) throws(SQLiteError) {
        let rc = sqlite3_bind_int64(stmt, index, value)
        if rc != SQLITE_OK { throw SQLiteError.from(sqlite3_db_handle(stmt), rc, "bind int64") }
    }

    public func bindDouble(_ value: Double, at index: Int32) throws(SQLiteError) {
        let rc = sqlite3_bind_double(stmt, index, value)
        if rc != SQLITE_OK { throw SQLiteError.from(sqlite3_db_handle(stmt), rc, "bind double") }
    }

    public func bindNull(at index: Int32) throws(SQLiteError) {
        let rc = sqlite3_bind_null(stmt, index)
        if rc != SQLITE_OK { throw SQLiteError.from(sqlite3_db_handle(stmt), rc, "bind null") }
    }

    /// Binds `bytes` WITHOUT copying (SQLITE_STATIC): the memory must stay valid and unchanged until
    /// the statement is stepped to completion, reset or rebound. Use inside `withUnsafeBytes` around
    /// the `step()`.
    public func bindBlobNoCopy(_ bytes: UnsafeRawBufferPointer, at index: Int32) throws(SQLiteError) {
        // A zero-length blob must still be a blob, not NULL: SQLite treats a nil pointer as NULL.
        let rc: Int32
        if bytes.isEmpty {
            rc = sqlite3_bind_zeroblob(stmt, index, 0)
        } else {
            rc = sqlite3_bind_blob64(stmt, index, bytes.baseAddress, sqlite3_uint64(bytes.count), nil)
        }
        if rc != SQLITE_OK { throw SQLiteError.from(sqlite3_db_handle(stmt), rc, "bind blob") }
    }

    /// Binds `bytes` without copying for the duration of `body`: step and read the columns inside
    /// `body`. When `body` returns the statement is reset and the parameter rebound to NULL, so no
    /// pointer outlives the array's scope (SQLite refuses rebinding a statement that is mid-run,
    /// hence the reset). Other bindings stay as they are.
    public func withBlobBound<R>(
        _ bytes: [UInt8], at index: Int32, _ body: () throws(SQLiteError) -> R
    ) throws(SQLiteError) -> R {
        let r = bytes.withUnsafeBytes { b in
            Result { () throws(SQLiteError) -> R in try withBlobBound(b, at: index, body) }
        }
        return try r.get()
    }

    /// `withBlobBound` for bytes the caller keeps valid for the whole call (e.g. borrowed from an object it holds).
    public func withBlobBound<R>(
        _ bytes: UnsafeRawBufferPointer, at index: Int32, _ body: () throws(SQLiteError) -> R
    ) throws(SQLiteError) -> R {
        try bindBlobNoCopy(bytes, at: index)
        defer {
            sqlite3_reset(stmt)
            sqlite3_bind_null(stmt, index)
        }
        return try body()
    }

    /// Binds a copy of `bytes` (one copy, made by SQLite); safe whatever the caller does afterwards.
    public func bindBlob(_ bytes: [UInt8], at index: Int32) throws(SQLiteError) {
        let rc = bytes.withUnsafeBytes { b -> Int32 in
            if b.isEmpty { return sqlite3_bind_zeroblob(stmt, index, 0) }
            return sqlite3_bind_blob64(stmt, index, b.baseAddress, sqlite3_uint64(b.count), Self.transient)
        }
        if rc != SQLITE_OK { throw SQLiteError.from(sqlite3_db_handle(stmt), rc, "bind blob") }
    }

    public func bindText(_ text: String, at index: Int32) throws(SQLiteError) {
        let rc = sqlite3_bind_text(stmt, index, text, -1, Self.transient)
        if rc != SQLITE_OK { throw SQLiteError.from(sqlite3_db_handle(stmt), rc, "bind text") }
    }

    /// Binds `bytes` as UTF-8 text of exactly that length (SQLite copies them), for text written in a
    /// temporary buffer (a rev id on every save). Unlike `bindText(_:at:)` a NUL byte does not end it.
    public func bindText(utf8 bytes: UnsafeRawBufferPointer, at index: Int32) throws(SQLiteError) {
        let rc: Int32
        if let base = bytes.baseAddress {
            rc = sqlite3_bind_text64(
                stmt, index, base.assumingMemoryBound(to: CChar.self), sqlite3_uint64(bytes.count), Self.transient,
                UInt8(SQLITE_UTF8))
        } else {
            // A nil pointer would bind NULL; empty text stays text.
            rc = sqlite3_bind_text(stmt, index, "", 0, Self.transient)
        }
        if rc != SQLITE_OK { throw SQLiteError.from(sqlite3_db_handle(stmt), rc, "bind text") }
    }

    /// Advances: true when a row is available, false when done.
    @inlinable
    public func step() throws(SQLiteError) -> Bool {
        let rc = sqlite3_step(stmt)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        throw SQLiteError.from(sqlite3_db_handle(stmt), rc, "step")
    }

    /// Makes the statement reusable and drops bindings (so no dangling no-copy blob stays bound).
    public func reset() {
        sqlite3_reset(stmt)
        sqlite3_clear_bindings(stmt)
    }

    @inlinable
    public func int64(at column: Int32) -> Int64 { sqlite3_column_int64(stmt, column) }

    @inlinable
    public func double(at column: Int32) -> Double { sqlite3_column_double(stmt, column) }

    @inlinable
    public func isNull(at column: Int32) -> Bool { sqlite3_column_type(stmt, column) == SQLITE_NULL }

    /// Reads a blob column in place; the buffer is valid only inside `body` (until the next step).
    @inlinable
    public func withBlob<R, E: Error>(at column: Int32, _ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R
    {
        let p = sqlite3_column_blob(stmt, column)
        let n = Int(sqlite3_column_bytes(stmt, column))
        return try body(UnsafeRawBufferPointer(start: p, count: p == nil ? 0 : n))
    }

    /// A copy of a blob column.
    public func blob(at column: Int32) -> [UInt8] {
        withBlob(at: column) { Array($0) }
    }

    public func text(at column: Int32) -> String {
        guard let c = sqlite3_column_text(stmt, column) else { return "" }
        return String(cString: c)
    }
}
