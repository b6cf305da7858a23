import SetteeCore
import SetteeJSON

/// An error the gateway answers a request with: an HTTP status, CouchDB's lowercase error name and a
/// reason for people (`{"error": ..., "reason": ...}`).
public typealias GatewayError = CouchError

extension GatewayError {
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

extension GatewayError {
    /// A document nesting deeper than `Limits.maxDocumentDepth` (400): what every entry point answers for one, and
    /// the reason an import refusing one logs.
    static var documentTooDeep: GatewayError {
        .badRequest("Document nests deeper than \(Limits.maxDocumentDepth) levels")
    }
}

/// Runs a bucket call, answering its failure as a `GatewayError`.
@inline(__always)
func bucketCall<T>(_ op: () async throws(GatewayBucketError) -> T) async throws(GatewayError) -> T {
    do { return try await op() } catch { throw GatewayError.bucket(error) }
}
