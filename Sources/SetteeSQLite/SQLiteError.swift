import CSQLite

/// A failed SQLite call: the primary result code, the extended code, SQLite's message and what we
/// were doing. Operating error (disk full, I/O error, corruption, busy), so it is thrown, never trapped.
public struct SQLiteError: Error, Sendable, CustomStringConvertible {
    /// Extended result code (`sqlite3_extended_errcode`); `code & 0xff` is the primary code.
    public var extendedCode: Int32
    public var message: String
    /// What the wrapper was doing ("prepare", "step", "open", the SQL text of an exec...).
    public var context: String

    public init(extendedCode: Int32, message: String, context: String) {
        self.extendedCode = extendedCode
        self.message = message
        self.context = context
    }

    /// Primary result code (`SQLITE_IOERR`, `SQLITE_CORRUPT`, `SQLITE_FULL`, ...).
    public var code: Int32 { extendedCode & 0xff }

    public var isBusy: Bool { code == SQLITE_BUSY || code == SQLITE_LOCKED }

    /// SQLite cannot read the file as a database: a damaged page (`SQLITE_CORRUPT`) or not a database at all
    /// (`SQLITE_NOTADB`). Not a full disk, an I/O error or a lock.
    public var isUnreadableFile: Bool { code == SQLITE_CORRUPT || code == SQLITE_NOTADB }

    /// `SQLITE_CORRUPT` found by a check of ours rather than by SQLite on the way (a failed
    /// `Connection.checkIntegrity`): `message` says what is damaged.
    public static func corrupt(_ message: String, context: String) -> SQLiteError {
        SQLiteError(extendedCode: SQLITE_CORRUPT, message: message, context: context)
    }

    /// The machine, not the statement, failed: a full disk (`SQLITE_FULL`), an I/O error, a lock, no memory, a file
    /// that cannot be opened or written now. The same statement can succeed later; a caller that would record the
    /// failure against the data (and move past it) must retry instead.
    public var isEnvironmental: Bool {
        switch code {
        case SQLITE_FULL, SQLITE_IOERR, SQLITE_BUSY, SQLITE_LOCKED, SQLITE_NOMEM, SQLITE_CANTOPEN, SQLITE_READONLY,
            SQLITE_PROTOCOL, SQLITE_INTERRUPT:
            true
        default: false
        }
    }

    public var description: String { "SQLite error \(extendedCode) (\(message)) during \(context)" }

    @usableFromInline
    static func from(_ db: OpaquePointer?, _ rc: Int32, _ context: String) -> SQLiteError {
        let ext = db.map { sqlite3_extended_errcode($0) } ?? rc
        let msg: String
        if let db, let c = sqlite3_errmsg(db) {
            msg = String(cString: c)
        } else if let c = sqlite3_errstr(rc) {
            msg = String(cString: c)
        } else {
            msg = "unknown"
        }
        return SQLiteError(extendedCode: ext == 0 ? rc : ext, message: msg, context: context)
    }
}
