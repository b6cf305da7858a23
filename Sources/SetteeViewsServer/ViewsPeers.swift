import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import SetteeClusterMap
import SetteeCore
import SetteePeerHTTP
import SetteeRegistry
import SetteeStorage
import SetteeTLS
import SetteeViews

/// The other nodes of the cluster as the views port sees them: whom to scatter a query to (nodes
/// owning active vBuckets of the bucket), whom to forward design-document changes to, and the calls.
/// Peers are called with the node-internal credentials and `_local=true`, so they answer for their
/// own vBuckets and do not scatter again. A peer advertising a views TLS port and a certificate fingerprint is
/// called there with the admin calls' trust (ADR 0030, 0040, 0047): the cluster's trusted CAs when they vouch for
/// the peer at its address, else its pinned leaf; never in clear then.
struct ViewsPeers: Sendable {
    let registry: NodeRegistry
    /// The node's views peer calls (`NodeViews.peerClient`): its trust keeps configurations per fingerprint or CA
    /// set, so one handshake per peer certificate.
    let client: PeerClient

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

    static func url(_ node: NodeInfo, _ path: String) -> String { PeerEndpoint.views(node).baseURL + path }

    /// One call to `node`'s views port (`PeerEndpoint.views`), through the node's one peer client; the status and
    /// body, or a thrown error (`PeerError`, `PeerDeadlinePassed`, `PeerReplyTooLarge`, or the budget's
    /// `ViewError.tooLarge`). With a `budget` (a view query's) the body's bytes count against it as they arrive (the
    /// caller releases them once parsed), else it is read up to `Limits.maxPeerReplyBytes`. The whole call, the
    /// answer's body included, must be done within `timeoutMs` (a query's `connection_timeout`): past it the call is
    /// cancelled (`PeerDeadlinePassed`), so a peer sending its body a byte at a time cannot hold it.
    func call(
        _ node: NodeInfo, _ method: HTTPMethod, _ path: String, body: [UInt8]?, timeoutMs: Int,
        budget: ViewQueryBudget? = nil
    ) async throws -> (UInt, [UInt8]) {
        // `timeoutMs` is bounded by `Limits.maxViewConnectionTimeoutMs`: far from overflow.
        let whole = Duration.milliseconds(max(1, timeoutMs))
        var reader: PeerReplyReader?
        if let budget {
            reader = { @Sendable (body: HTTPClientResponse.Body) async throws -> [UInt8] in
                try await budget.collect(body.map { (part: ByteBuffer) -> [UInt8] in Array(part.readableBytesView) })
            }
        }
        let reply = try await client.call(
            PeerEndpoint.views(node), method, path, body: body, credentials: registry.internalCredentials,
            contentType: body == nil ? nil : "application/json", timeout: min(whole, .seconds(5)),
            deadline: whole, read: reader)
        return (reply.status, reply.body)
    }

    /// Encodes query parameters for a URL.
    static func queryString(_ params: [(String, String)]) -> String {
        params.map { "\($0.0)=\(PercentEncoding.encode($0.1))" }
            .joined(separator: "&")
    }
}
