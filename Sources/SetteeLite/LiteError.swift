import SetteeSQLite

/// Why a Lite operation failed. Operating errors (input, conflicts, disk) are thrown, never trapped.
public enum LiteError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No such document, revision, attachment, view or index (404).
    case notFound(String)
    /// The edit is not based on a current leaf revision, or the document already exists (409).
    case conflict(String)
    /// The input is malformed: a bad body, id, revision or attachment (400).
    case badRequest(String)
    /// SQLite failed on this data (500): a damaged file, a value it cannot hold. The write was rolled back.
    case storage(String)
    /// The machine could not take the write now (503): a full disk, an I/O error, a lock. The write was rolled back
    /// and the same call can succeed later, so a replicator stops and retries instead of recording it as one
    /// revision's failure.
    case unavailable(String)
    /// The database was closed or deleted.
    case closed

    /// The HTTP status a REST shell would answer with.
    public var status: Int {
        switch self {
        case .notFound: 404
        case .conflict: 409
        case .badRequest: 400
        case .storage, .closed: 500
        case .unavailable: 503
        }
    }

    /// CouchDB's `error` member for this case.
    public var errorName: String {
        switch self {
        case .notFound: "not_found"
        case .conflict: "conflict"
        case .badRequest: "bad_request"
        case .storage, .closed: "internal_server_error"
        case .unavailable: "service_unavailable"
        }
    }

    public var description: String {
        switch self {
        case .notFound(let s): "not found: \(s)"
        case .conflict(let s): "conflict: \(s)"
        case .badRequest(let s): "bad request: \(s)"
        case .storage(let s): "storage error: \(s)"
        case .unavailable(let s): "storage unavailable: \(s)"
        case .closed: "database is closed"
        }
    }

    /// Maps any error raised inside a store operation onto a `LiteError`.
    static func wrap(_ error: any Error) -> LiteError {
        if let e = error as? LiteError { return e }
        if let e = error as? SQLiteError {
            return e.isEnvironmental ? .unavailable(e.description) : .storage(e.description)
        }
        return .storage(String(describing: error))
    }
}
