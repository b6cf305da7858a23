import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import SetteeClusterMap
import SetteeCore

/// A reply from another node's admin API.
struct PeerReply: Sendable {
    var status: UInt
    var body: [UInt8]
    var contentType: String?
    var ok: Bool { (200..<300).contains(status) }
}

/// Why a call to another node failed before it answered.
struct PeerError: Error, CustomStringConvertible {
    var description: String
}

/// Node-to-node HTTP calls (the internal API and forwarded admin requests), with a deadline on every call.
struct PeerClient: Sendable {
    let http: HTTPClient

    /// `method path` on `host:port` with Basic credentials; the whole reply is read (bounded).
    func call(
        host: String, port: Int, _ method: HTTPMethod, _ path: String, body: [UInt8]? = nil,
        credentials: (String, String)?, contentType: String? = nil, timeout: Duration = .seconds(5)
    ) async throws -> PeerReply {
        var request = HTTPClientRequest(url: "http://\(hostPort(host, port))\(path)")
        request.method = method
        if let (user, password) = credentials {
            request.headers.add(name: "Authorization", value: BasicAuth.header(user: user, password: password))
        }
        if let contentType { request.headers.add(name: "Content-Type", value: contentType) }
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        let seconds = Int64(timeout.components.seconds) + (timeout.components.attoseconds > 0 ? 1 : 0)
        do {
            let response = try await http.execute(request, timeout: .seconds(seconds))
            let buffer = try await response.body.collect(upTo: 256 << 20)
            return PeerReply(
                status: response.status.code, body: Array(buffer.readableBytesView),
                contentType: response.headers.first(name: "Content-Type"))
        } catch {
            throw PeerError(description: "\(hostPort(host, port)): \(error)")
        }
    }

    func call(
        _ node: NodeInfo, _ method: HTTPMethod, _ path: String, body: [UInt8]? = nil, credentials: (String, String)?,
        timeout: Duration = .seconds(5)
    ) async throws -> PeerReply {
        try await call(
            host: node.host, port: node.adminPort, method, path, body: body, credentials: credentials,
            contentType: body == nil ? nil : "application/json", timeout: timeout)
    }
}
