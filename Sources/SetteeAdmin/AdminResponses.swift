import Hummingbird
import NIOCore
import SetteeClusterMap
import SetteeJSON

/// Response builders for the Couchbase-shaped replies.
enum AdminResponses {
    static func json(_ status: HTTPResponse.Status, _ value: JSON, headers: HTTPFields = [:]) -> Response {
        bytes(status, value.serialized(), headers: headers)
    }

    static func bytes(_ status: HTTPResponse.Status, _ body: [UInt8], headers: HTTPFields = [:]) -> Response {
        var h = headers
        h[.contentType] = "application/json"
        return Response(status: status, headers: h, body: ResponseBody(byteBuffer: ByteBuffer(bytes: body)))
    }

    static func text(_ status: HTTPResponse.Status, _ text: String) -> Response {
        Response(
            status: status, headers: [.contentType: "text/plain"],
            body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }

    static func empty(_ status: HTTPResponse.Status, headers: HTTPFields = [:]) -> Response {
        Response(status: status, headers: headers, body: ResponseBody())
    }

    /// `{"errors":{field:msg,...}}`, optionally with more top-level members after it.
    static func fieldErrors(_ errors: [(String, String)], extra: [(String, JSON)] = []) -> Response {
        json(.badRequest, .object([("errors", .object(errors.map { ($0.0, .string($0.1)) }))] + extra))
    }

    /// `{"_":msg}`: ns_server's shape for errors not tied to a field.
    static func general(_ status: HTTPResponse.Status, _ message: String) -> Response {
        json(status, ["_": .string(message)])
    }

    static let unauthorized = Response(
        status: .unauthorized, headers: [.wwwAuthenticate: "Basic realm=\"Couchbase Server Admin / REST\""],
        body: ResponseBody())
}
