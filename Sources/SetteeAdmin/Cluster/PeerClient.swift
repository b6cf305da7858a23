import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import SetteeClusterMap
import SetteeCore
import SetteeTLS

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

/// The reply's body passed the call's `maxReplyBytes`: reading stopped there.
struct PeerReplyTooLarge: Error, CustomStringConvertible {
    var maxBytes: Int
    var description: String { "the reply is larger than \(maxBytes) bytes" }
}

/// The call, its reply's body included, was not done within its `deadline`: it was cancelled (the connection closed).
struct PeerDeadlinePassed: Error, CustomStringConvertible {
    var deadline: Duration
    var description: String { "no whole reply within \(deadline)" }
}

/// Node-to-node HTTP calls (the internal API and forwarded admin requests), with a deadline on every call.
///
/// One AsyncHTTPClient serves every call. A peer that advertises TLS (`PeerEndpoint.admin`) is called over HTTPS
/// with a per-request TLS configuration pinned to its certificate's fingerprint (`PinnedPeerTrust`: the first
/// call fetches the certificate over a pinned handshake); a peer presenting another certificate gets nothing, not
/// even the request line, and the call fails without a plain-text retry.
struct PeerClient: Sendable {
    let http: HTTPClient
    let trust: PinnedPeerTrust
    let counts = PeerCallCounts()
    /// What a call without a `deadline` of its own gets after its head timeout for the reply's body
    /// (`Limits.peerReplyBodySeconds`; tests shorten it).
    let replyBodyTime: Duration

    /// `authorities`: the cluster's trusted CAs, which vouch for a member showing another leaf than its pin
    /// (ADR 0047).
    init(
        http: HTTPClient, authorities: ClusterAuthorities? = nil,
        replyBodyTime: Duration = .seconds(Limits.peerReplyBodySeconds)
    ) {
        self.http = http
        self.trust = PinnedPeerTrust(authorities: authorities)
        self.replyBodyTime = replyBodyTime
    }

    /// `method path` on `endpoint` with Basic credentials; the whole reply is read, at most `maxReplyBytes`
    /// (`PeerReplyTooLarge` past it). `timeout` bounds the wait for the reply's head; the whole call, its body
    /// included, must be done within `deadline`, or without one within `timeout` plus `replyBodyTime`
    /// (`PeerDeadlinePassed` after), so a peer sending its body a byte at a time cannot hold the call.
    func call(
        _ endpoint: PeerEndpoint, _ method: HTTPMethod, _ path: String, body: [UInt8]? = nil,
        credentials: (String, String)?, contentType: String? = nil, timeout: Duration = .seconds(5),
        maxReplyBytes: Int = Limits.maxPeerReplyBytes, deadline: Duration? = nil
    ) async throws -> PeerReply {
        let name = hostPort(endpoint.host, endpoint.port)
        var request = HTTPClientRequest(url: endpoint.baseURL + path)
        counts.countCall(tls: endpoint.usesTLS)
        if let pin = endpoint.tlsFingerprint {
            do {
                request.tlsConfiguration = try await trust.configuration(
                    host: endpoint.host, port: endpoint.port, fingerprint: pin, timeout: timeout)
            } catch let mismatch as CertificatePin.Mismatch {
                counts.countRefusal()
                trust.forgetAuthorities(host: endpoint.host, port: endpoint.port)
                throw PeerError(description: "\(name): refused: \(mismatch) (\(pin))")
            } catch {
                throw PeerError(description: "\(name): \(error)")
            }
        }
        request.method = method
        if let (user, password) = credentials {
            request.headers.add(name: "Authorization", value: BasicAuth.header(user: user, password: password))
        }
        if let contentType { request.headers.add(name: "Content-Type", value: contentType) }
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        let seconds = Int64(timeout.components.seconds) + (timeout.components.attoseconds > 0 ? 1 : 0)
        let http = self.http
        let sent = request
        do {
            let whole = deadline ?? (.seconds(seconds) + replyBodyTime)
            return try await withDeadline(whole, overdue: PeerDeadlinePassed(deadline: whole)) {
                let response = try await http.execute(sent, timeout: .seconds(seconds))
                let buffer: ByteBuffer
                do { buffer = try await response.body.collect(upTo: maxReplyBytes) } catch is NIOTooManyBytesError {
                    throw PeerReplyTooLarge(maxBytes: maxReplyBytes)
                }
                return PeerReply(
                    status: response.status.code, body: Array(buffer.readableBytesView),
                    contentType: response.headers.first(name: "Content-Type"))
            }
        } catch let error as PeerReplyTooLarge {
            throw error
        } catch let error as PeerDeadlinePassed {
            throw error
        } catch {
            // The pinned configuration is kept; a connection to another certificate fails its verification.
            if endpoint.usesTLS, "\(error)".contains("CERTIFICATE_VERIFY_FAILED") {
                counts.countRefusal()
                // Checked afresh next time (the CAs, then the pin): the member may have been re-pinned.
                trust.forgetAuthorities(host: endpoint.host, port: endpoint.port)
                throw PeerError(description: "\(name): refused: the peer's certificate is not the pinned one: \(error)")
            }
            throw PeerError(description: "\(name): \(error)")
        }
    }

    /// A plain-HTTP call to `host:port` (the views port, which serves no TLS).
    func call(
        host: String, port: Int, _ method: HTTPMethod, _ path: String, body: [UInt8]? = nil,
        credentials: (String, String)?, contentType: String? = nil, timeout: Duration = .seconds(5)
    ) async throws -> PeerReply {
        try await call(
            PeerEndpoint(host: host, port: port, tlsFingerprint: nil), method, path, body: body,
            credentials: credentials, contentType: contentType, timeout: timeout)
    }

    /// A call to a member's admin API (`PeerEndpoint.admin`: HTTPS pinned to its certificate when it has one).
    /// `contentType` defaults to JSON when there is a body.
    func call(
        _ node: NodeInfo, _ method: HTTPMethod, _ path: String, body: [UInt8]? = nil, credentials: (String, String)?,
        contentType: String? = nil, timeout: Duration = .seconds(5)
    ) async throws -> PeerReply {
        try await call(
            PeerEndpoint.admin(node), method, path, body: body, credentials: credentials,
            contentType: contentType ?? (body == nil ? nil : "application/json"), timeout: timeout)
    }
}

extension ClusterManager {
    /// This node's calls to other nodes, by transport (`/metrics`).
    public var peerCalls: PeerCallCounts { peers.counts }
    /// Which trust admitted this node's TLS calls to other nodes' admin APIs (`/metrics`, ADR 0057).
    public var peerTrustCounts: PeerTrustCounts { peers.trust.counts }
}
