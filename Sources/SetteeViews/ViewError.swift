import SetteeJSON

/// Why a views operation failed, in CouchDB's `{"error","reason"}` vocabulary. Operating errors
/// (user input, disk), thrown; the HTTP shell maps each to its status.
public enum ViewError: Error, Sendable, Equatable, CustomStringConvertible {
    /// 400 `query_parse_error`: a bad query parameter.
    case queryParse(String)
    /// 400 `bad_request`: a malformed body.
    case badRequest(String)
    /// 400 `invalid_design_document`: a design document that does not validate (JS that does not
    /// compile, unknown built-in reduce, ...).
    case invalidDesignDocument(String)
    /// 404 `not_found`: `missing` (design document) or `missing_named_view`, or `no_such_bucket`.
    case notFound(String)
    /// 500 `reduce_error` (built-in reduce on non-numbers, reduction too large, custom reduce threw).
    case reduce(String)
    /// 500 `timeout`: `stale=false` did not catch up in time.
    case timeout(String)
    /// 500 `error`: storage trouble (SQLite, engine).
    case storage(String)
    /// 413 `too_large`: the query's rows would pass `Limits.viewMaxQueryResultBytes` (`ViewQueryBudget`); the client
    /// pages with `limit` and `startkey`/`startkey_docid`. CouchDB's name for an entity over its size bound.
    case tooLarge(String)

    /// The CouchDB `error` member.
    public var error: String {
        switch self {
        case .queryParse: return "query_parse_error"
        case .badRequest: return "bad_request"
        case .invalidDesignDocument: return "invalid_design_document"
        case .notFound: return "not_found"
        case .reduce: return "reduce_error"
        case .timeout: return "timeout"
        case .storage: return "error"
        case .tooLarge: return "too_large"
        }
    }

    /// The CouchDB `reason` member.
    public var reason: String {
        switch self {
        case .queryParse(let r), .badRequest(let r), .invalidDesignDocument(let r), .notFound(let r), .reduce(let r),
            .timeout(let r), .storage(let r), .tooLarge(let r):
            return r
        }
    }

    /// The HTTP status code.
    public var status: Int {
        switch self {
        case .queryParse, .badRequest, .invalidDesignDocument: return 400
        case .notFound: return 404
        case .tooLarge: return 413
        case .reduce, .timeout, .storage: return 500
        }
    }

    /// `{"error":...,"reason":...}`.
    public var json: JSON { .errorBody(error, reason: reason) }

    public var description: String { "\(error): \(reason)" }
}
