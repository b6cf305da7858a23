import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import SetteeClusterMap
import SetteeCore
import SetteeRegistry
import SetteeStorage
import SetteeViews

/// The other nodes of the cluster as the views port sees them: whom to scatter a query to (nodes
/// owning active vBuckets of the bucket), whom to forward design-document changes to, and the calls.
/// Peers are called with the node-internal credentials and `_local=true`, so they answer for their
/// own vBuckets and do not scatter again.
struct ViewsPeers: Sendable {
    let registry: NodeRegistry

    /// Other nodes with active vBuckets of `bucket` in the current map (empty on a single node).
    func queryTargets(bucket: String) -> [NodeInfo] {
        guard let map = registry.clusterMap(bucket: bucket) else { return [] }
        return map.nodes.indices.filter { $0 != map.thisNode && !map.vbucketMap.activeVBuckets(onNode: $0).isEmpty }
            .map { map.nodes[$0] }
    }

    /// Every other node of the bucket's map (design documents go to all of them).
    func allOthers(bucket: String) -> [NodeInfo] {
        guard let map = registry.clusterMap(bucket: bucket) else { return [] }
        return map.nodes.indices.filter { $0 != map.thisNode }.map { map.nodes[$0] }
    }

    static func url(_ node: NodeInfo, _ path: String) -> String {
        "http://\(hostPort(node.host, node.viewsPort))\(path)"
    }

    /// One call; the status and body, or a thrown description.
    func call(
        _ node: NodeInfo, _ method: HTTPMethod, _ path: String, body: [UInt8]?, timeoutMs: Int
    ) async throws -> (UInt, [UInt8]) {
        var request = HTTPClientRequest(url: Self.url(node, path))
        request.method = method
        let (user, password) = registry.internalCredentials
        request.headers.add(name: "Authorization", value: BasicAuth.header(user: user, password: password))
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .milliseconds(Int64(max(1, timeoutMs))))
        let buffer = try await response.body.collect(upTo: 256 << 20)
        return (response.status.code, Array(buffer.readableBytesView))
    }

    /// Encodes query parameters for a URL.
    static func queryString(_ params: [(String, String)]) -> String {
        params.map { "\($0.0)=\(PercentEncoding.encode($0.1))" }
            .joined(separator: "&")
    }

}
