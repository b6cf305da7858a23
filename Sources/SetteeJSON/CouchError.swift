/// An error in CouchDB's vocabulary, as Sync Gateway, Couchbase Lite and CouchDB answer it: an HTTP status, the
/// lowercase error name and a reason for people. The one `{status, error, reason}` value of the codebase: a
/// document that fails validation (`DocumentError`), a request the gateway refuses (`GatewayError`) and a revision
/// a `_bulk_get` could not return (`RevisionError`) are all this type.
public struct CouchError: Error, Sendable, Equatable, CustomStringConvertible {
    public var status: Int
    public var error: String
    public var reason: String

    public init(status: Int, error: String, reason: String) {
        self.status = status
        self.error = error
        self.reason = reason
    }

    public var description: String { "\(status) \(error): \(reason)" }

    /// `{"error": ..., "reason": ...}`.
    public var json: JSON { .errorBody(error, reason: reason) }

    /// A `_bulk_docs` / `_bulk_get` row: `{"id", "rev", "error", "reason", "status"}`.
    public func row(id: String?, rev: String? = nil) -> JSON {
        .errorBody(error, reason: reason, status: status, id: id, rev: rev)
    }

    /// An error with CouchDB's lowercase name for `status`.
    public static func status(_ status: Int, _ reason: String) -> CouchError {
        CouchError(status: status, error: couchName(status), reason: reason)
    }

    public static func badRequest(_ reason: String) -> CouchError { .status(400, reason) }
    public static func unauthorized(_ reason: String) -> CouchError { .status(401, reason) }
    public static func forbidden(_ reason: String) -> CouchError { .status(403, reason) }
    public static func notFound(_ reason: String) -> CouchError { .status(404, reason) }
    public static func conflict(_ reason: String) -> CouchError { .status(409, reason) }
    public static func preconditionFailed(_ reason: String) -> CouchError { .status(412, reason) }
    public static func tooLarge(_ reason: String) -> CouchError { .status(413, reason) }
    public static func internalError(_ reason: String) -> CouchError { .status(500, reason) }
    public static func unavailable(_ reason: String) -> CouchError { .status(503, reason) }

    /// The HTTP status CouchDB's error `name` stands for, for answers that give the name without a status; nil for a
    /// name `couchName` never gives (a validation function's own, or a peer's).
    public static func status(named name: String) -> Int? {
        switch name {
        case "bad_request": 400
        case "unauthorized": 401
        case "forbidden": 403
        case "not_found": 404
        case "conflict": 409
        case "too_large": 413
        case "internal_server_error": 500
        case "service_unavailable": 503
        default: nil
        }
    }

    /// Whether the failure is the server's state, not the request's (5xx, 408 timeout, 429 too many requests): the
    /// same request can succeed later, so a replicator retries it instead of recording it against the document.
    public var isTransient: Bool { status >= 500 || status == 408 || status == 429 }

    /// Whether a failure of one document (a `_bulk_docs` row, a `_bulk_get` part) says the peer cannot do it now, not
    /// that it refuses the document: 503, 504, 408, 429. Not 500: settee-gateway and Sync Gateway answer a sync
    /// function's exception on one document with 500, which would come back every time.
    public var isPeerUnavailable: Bool { status == 503 || status == 504 || status == 408 || status == 429 }

    /// CouchDB's error name for an HTTP status (lowercase everywhere, as the Sync Gateway reference recommends).
    public static func couchName(_ status: Int) -> String {
        switch status {
        case 400: return "bad_request"
        case 401: return "unauthorized"
        case 403: return "forbidden"
        case 404: return "not_found"
        case 405: return "method_not_allowed"
        case 406: return "not_acceptable"
        case 409: return "conflict"
        case 410: return "gone"
        case 412: return "file_exists"
        case 413: return "too_large"
        case 415: return "bad_content_type"
        case 416: return "requested_range_not_satisfiable"
        case 501: return "not_implemented"
        case 503: return "service_unavailable"
        default: return status >= 500 ? "internal_server_error" : "error"
        }
    }
}
