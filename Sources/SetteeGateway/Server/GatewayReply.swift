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

    /// A 200 that `produce` writes in pieces (`write(bytes)`): an answer too big to hold whole, such as rows with
    /// their document bodies. Gzipped on the fly when a buffered answer would be (`compressResponses` and the
    /// client's `Accept-Encoding`); a 406 when JSON is not acceptable, as for a buffered one.
    static func streamed(
        _ r: GatewayRequest, headers: HTTPFields,
        _ produce: @escaping @Sendable (_ write: ([UInt8]) async throws -> Void) async throws -> Void
    ) -> GatewayReply {
        if headers[.contentType] == jsonType, !r.accepts(jsonType) {
            return error(GatewayError.status(406, "only application/json available"))
        }
        let gzip = r.server.config.compressResponses && GzipCodec.accepts(r.request.headers[.acceptEncoding])
        var h = headers
        if gzip {
            h[.contentEncoding] = "gzip"
            h[.vary] = "Accept-Encoding"
        }
        // A HEAD gets the status and headers a GET would (chunked, no length) and nothing is produced: every byte
        // of it would be thrown away, and reading the pages and bodies is the answer's whole cost.
        if r.method == "HEAD" {
            return .stream(Response(status: .ok, headers: h, body: ResponseBody { try await $0.finish(nil) }))
        }
        return .stream(
            Response(
                status: .ok, headers: h,
                body: ResponseBody { writer in
                    let zip = gzip ? try GzipCodec.Stream() : nil
                    try await produce { bytes in
                        guard !bytes.isEmpty else { return }
                        try await writer.write(zip.map { try $0.piece(bytes) } ?? ByteBuffer(bytes: bytes))
                    }
                    if let zip { try await writer.write(zip.end()) }
                    try await writer.finish(nil)
                }))
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
