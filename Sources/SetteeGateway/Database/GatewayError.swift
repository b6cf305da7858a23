import SetteeJSON

/// An error the gateway answers a request with: an HTTP status, CouchDB's lowercase error name and a
/// reason for people (`{"error": ..., "reason": ...}`).
public struct GatewayError: Error, Sendable, Equatable, CustomStringConvertible {
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

    public static func badRequest(_ reason: String) -> GatewayError {
        GatewayError(status: 400, error: "bad_request", reason: reason)
    }
    public static func unauthorized(_ reason: String) -> GatewayError {
        GatewayError(status: 401, error: "unauthorized", reason: reason)
    }
    public static func forbidden(_ reason: String) -> GatewayError {
        GatewayError(status: 403, error: "forbidden", reason: reason)
    }
    public static func notFound(_ reason: String) -> GatewayError {
        GatewayError(status: 404, error: "not_found", reason: reason)
    }
    public static func conflict(_ reason: String) -> GatewayError {
        GatewayError(status: 409, error: "conflict", reason: reason)
    }
    public static func preconditionFailed(_ reason: String) -> GatewayError {
        GatewayError(status: 412, error: "file_exists", reason: reason)
    }
    public static func tooLarge(_ reason: String) -> GatewayError {
        GatewayError(status: 413, error: "too_large", reason: reason)
    }
    public static func internalError(_ reason: String) -> GatewayError {
        GatewayError(status: 500, error: "internal_server_error", reason: reason)
    }
    public static func unavailable(_ reason: String) -> GatewayError {
        GatewayError(status: 503, error: "service_unavailable", reason: reason)
    }

    /// A bucket failure in HTTP terms (Sync Gateway's `ErrorAsHTTPStatus`).
    static func bucket(_ error: GatewayBucketError) -> GatewayError {
        switch error {
        case .notFound: return .notFound("missing")
        case .exists: return .conflict("Document update conflict")
        case .tooBig: return .tooLarge("Document too large")
        case .temporary(let m): return .unavailable("Bucket temporarily unavailable: \(m)")
        case .failed(let m): return .internalError("Internal error: \(m)")
        }
    }
}

/// Runs a bucket call, answering its failure as a `GatewayError`.
@inline(__always)
func bucketCall<T>(_ op: () async throws(GatewayBucketError) -> T) async throws(GatewayError) -> T {
    do { return try await op() } catch { throw GatewayError.bucket(error) }
}
