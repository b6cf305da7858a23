import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import SetteeJSON

/// What a handler answers: a buffered body the responder may still gzip and decorate, or a finished
/// streaming `Response` (changes feeds) it passes through with its headers added.
enum GatewayReply: Sendable {
    case buffered(status: Int, headers: HTTPFields, body: [UInt8])
    case stream(Response)

    static let jsonType = "application/json"

    static func json(_ status: Int, _ value: JSON, headers: HTTPFields = [:]) -> GatewayReply {
        var h = headers
        h[.contentType] = jsonType
        var body = value.serialized()
        body.append(UInt8(ascii: "\n"))
        return .buffered(status: status, headers: h, body: body)
    }

    static func bytes(_ status: Int, _ body: [UInt8], contentType: String, headers: HTTPFields = [:]) -> GatewayReply {
        var h = headers
        h[.contentType] = contentType
        return .buffered(status: status, headers: h, body: body)
    }

    static func error(_ e: GatewayError, headers: HTTPFields = [:]) -> GatewayReply {
        json(e.status, e.json, headers: headers)
    }

    /// `{"ok": true, "id": ..., "rev": ...}` with an `Etag` of the revision.
    static func ok(_ status: Int, id: String, rev: String) -> GatewayReply {
        var h = HTTPFields()
        h[.eTag] = "\"\(rev)\""
        return json(status, .object([("ok", .bool(true)), ("id", .string(id)), ("rev", .string(rev))]), headers: h)
    }
}

extension GatewayError {
    /// An error with CouchDB's lowercase name for `status`.
    static func status(_ status: Int, _ reason: String) -> GatewayError {
        GatewayError(status: status, error: couchName(status), reason: reason)
    }

    /// CouchDB's error name for an HTTP status (the reference's recommendation: lowercase everywhere).
    static func couchName(_ status: Int) -> String {
        switch status {
        case 400: return "bad_request"
        case 401: return "unauthorized"
        case 403: return "forbidden"
        case 404: return "not_found"
        case 405: return "method_not_allowed"
        case 406: return "not_acceptable"
        case 409: return "conflict"
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

extension HTTPField.Name {
    static let syncServer = HTTPField.Name("Server")!
    static let wwwAuthenticate = HTTPField.Name("WWW-Authenticate")!
    static let accessControlAllowOrigin = HTTPField.Name("Access-Control-Allow-Origin")!
    static let accessControlAllowCredentials = HTTPField.Name("Access-Control-Allow-Credentials")!
    static let accessControlAllowHeaders = HTTPField.Name("Access-Control-Allow-Headers")!
    static let accessControlAllowMethods = HTTPField.Name("Access-Control-Allow-Methods")!
    static let accessControlMaxAge = HTTPField.Name("Access-Control-Max-Age")!
    static let xDocID = HTTPField.Name("X-Doc-ID")!
    static let xRevID = HTTPField.Name("X-Rev-ID")!
}

/// HTTP dates for cookies (`Expires=`).
enum HTTPDate {
    static func format(_ date: Date) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "GMT")
        f.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return f.string(from: date)
    }

    static func iso8601(_ date: Date) -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return f.string(from: date)
    }
}
