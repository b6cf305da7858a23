import HTTPTypes
import SetteeJSON

/// Multipart bodies in CouchDB's shapes. Until the `Multipart` codec (SetteeReplication) is in this
/// build, multipart is unavailable: readers get JSON and multipart uploads are refused with 415.
enum MultipartReplies {
    static let available = false

    static func document(_ body: JSON, attachments: [String: [UInt8]], headers: HTTPFields = [:]) -> GatewayReply {
        .json(200, body, headers: headers)
    }

    static func openRevs(_ results: [OpenRev], docID: String) -> GatewayReply {
        .json(200, .array(results.map(\.json)))
    }

    static func bulkGet(_ results: [(id: String, rev: String?, result: Result<JSON, GatewayError>)]) -> GatewayReply {
        .error(.status(406, "multipart responses are not available yet"))
    }

    static func parseDocument(_ bytes: [UInt8], contentType: String) throws(GatewayError) -> (JSON, [String: [UInt8]]) {
        throw .status(415, "multipart/related uploads are not supported yet")
    }
}
