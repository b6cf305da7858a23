import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import SetteeClusterMap
import SetteeCore
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
    /// The node's views peer trust (`NodeViews.peerTrust`): configurations kept per fingerprint or CA set, so one
    /// handshake per peer certificate.
    let trust: PinnedPeerTrust

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
        if let (port, _) = pinnedTLS(node) { return "https://\(hostPort(node.host, port))\(path)" }
        return "http://\(hostPort(node.host, node.viewsPort))\(path)"
    }

    /// The views TLS port and certificate pin `node` is called with, or nil (no TLS: its plain views port).
    static func pinnedTLS(_ node: NodeInfo) -> (port: Int, fingerprint: String)? {
        guard let port = node.viewsTLSPort, let fingerprint = node.tlsFingerprint else { return nil }
        return (port, fingerprint)
    }

    /// One call; the status and body, or a thrown description. With a `budget` (a view query's) the body's bytes
    /// count against it as they arrive (`ViewError.tooLarge` past it; the caller releases them once parsed), else it
    /// is read up to `Limits.maxPeerReplyBytes`. The whole call, the answer's body included, must be done within
    /// `timeoutMs` (a query's `connection_timeout`): past it the call is cancelled and fails as a peer that sends no
    /// head does (`HTTPClientError.deadlineExceeded`), so a peer sending its body a byte at a time cannot hold it.
    func call(
        _ node: NodeInfo, _ method: HTTPMethod, _ path: String, body: [UInt8]?, timeoutMs: Int,
        budget: ViewQueryBudget? = nil
    ) async throws -> (UInt, [UInt8]) {
        let started = ContinuousClock.now
        var request = HTTPClientRequest(url: Self.url(node, path))
        let pinned = Self.pinnedTLS(node)
        if let (port, fingerprint) = pinned {
            do {
                request.tlsConfiguration = try await trust.configuration(
                    host: node.host, port: port, fingerprint: fingerprint,
                    timeout: .milliseconds(Int64(max(1, min(timeoutMs, 5_000)))))
            } catch {
                // Checked afresh next time (the CAs, then the pin): the member may have been re-pinned.
                trust.forgetAuthorities(host: node.host, port: port)
                throw error
            }
        }
        request.method = method
        let (user, password) = registry.internalCredentials
        request.headers.add(name: "Authorization", value: BasicAuth.header(user: user, password: password))
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        // What the TLS configuration took counts too (it is bounded by 5 s; `timeoutMs` by
        // `Limits.maxViewConnectionTimeoutMs`: far from overflow).
        let left = started + .milliseconds(max(1, timeoutMs)) - ContinuousClock.now
        guard left > .zero else { throw HTTPClientError.deadlineExceeded }
        let sent = request
        let trust = self.trust
        return try await withDeadline(left, overdue: HTTPClientError.deadlineExceeded) {
            let response: HTTPClientResponse
            do {
                response = try await HTTPClient.shared.execute(sent, timeout: TimeAmount(left))
            } catch {
                // A kept configuration (through the CAs) no longer verifies this peer: check it afresh next time.
                if let (port, _) = pinned, "\(error)".contains("CERTIFICATE_VERIFY_FAILED") {
                    trust.forgetAuthorities(host: node.host, port: port)
                }
                throw error
            }
            if let budget {
                return (
                    response.status.code, try await budget.collect(response.body.map { Array($0.readableBytesView) })
                )
            }
            let buffer = try await response.body.collect(upTo: Limits.maxPeerReplyBytes)
            return (response.status.code, Array(buffer.readableBytesView))
        }
    }

    /// Encodes query parameters for a URL.
    static func queryString(_ params: [(String, String)]) -> String {
        params.map { "\($0.0)=\(PercentEncoding.encode($0.1))" }
            .joined(separator: "&")
    }

}
