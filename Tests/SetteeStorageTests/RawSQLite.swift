import CSQLite

/// Direct sqlite3 access to the bucket file, bypassing the engine and SetteeSQLite, so tests check
/// what is really on disk.
final class RawSQLite {
    let db: OpaquePointer
    init(_ path: String) throws {
        var h: OpaquePointer?
        guard sqlite3_open_v2(path, &h, SQLITE_OPEN_READWRITE, nil) == SQLITE_OK, let h else {
            throw RawError(message: "open \(path)")
        }
        db = h
    }
    deinit { sqlite3_close_v2(db) }

    struct RawError: Error { var message: String }

    /// Rows of (int column 0, blob column 1).
    func rows(_ sql: String) throws -> [(Int64, [UInt8])] {
        var s: OpaquePointer?
        guard sqlite3_prepare_v2(db, sql, -1, &s, nil) == SQLITE_OK else {
            throw RawError(message: sql + ": " + String(cString: sqlite3_errmsg(db)))
        }
        defer { sqlite3_finalize(s) }
        var out: [(Int64, [UInt8])] = []
        while sqlite3_step(s) == SQLITE_ROW {
            let n = Int(sqlite3_column_bytes(s, 1))
            let p = sqlite3_column_blob(s, 1)
            out.append((sqlite3_column_int64(s, 0), p == nil ? [] : Array(UnsafeRawBufferPointer(start: p, count: n))))
        }
        return out
    }

    func exec(_ sql: String) throws {
        guard sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK else {
            throw RawError(message: String(cString: sqlite3_errmsg(db)))
        }
    }

    /// Replaces the stored value blob of the row with `rowid`.
    func setValue(rowid: Int64, _ value: [UInt8]) throws {
        var s: OpaquePointer?
        guard sqlite3_prepare_v2(db, "UPDATE items SET value = ?1 WHERE rowid = ?2", -1, &s, nil) == SQLITE_OK else {
            throw RawError(message: "prepare update")
        }
        defer { sqlite3_finalize(s) }
        let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
        _ = value.withUnsafeBytes { sqlite3_bind_blob(s, 1, $0.baseAddress, Int32($0.count), transient) }
        sqlite3_bind_int64(s, 2, rowid)
        guard sqlite3_step(s) == SQLITE_DONE else { throw RawError(message: "update") }
    }
}
