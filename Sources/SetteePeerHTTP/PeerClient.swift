import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import SetteeClusterMap
import SetteeCore
import SetteeTLS

/// A reply from another node's HTTP API (admin or views port).
public struct PeerReply: Sendable {
    public var status: UInt
    public var body: [UInt8]
    public var contentType: String?
    public var ok: Bool { (200..<300).contains(status) }
}

/// Why a call to another node failed before it answered: `host:port: <cause>` (a refused certificate, a refused
/// connection, a head timeout, ...).
public struct PeerError: Error, CustomStringConvertible {
    public var description: String
}

/// The reply's body passed the call's `maxReplyBytes`: reading stopped there.
public struct PeerReplyTooLarge: Error, CustomStringConvertible {
    public var maxBytes: Int
    public var description: String { "the reply is larger than \(maxBytes) bytes" }
}

/// The call, its reply's body included, was not done within its `deadline`: it was cancelled (the connection closed).
public struct PeerDeadlinePassed: Error, CustomStringConvertible {
    public var deadline: Duration
    public var description: String { "no whole reply within \(deadline)" }
}

/// How a call reads its reply's body: a reader gets the body's parts as they arrive and returns the bytes it kept; an
/// error it throws ends the call and reaches the caller unchanged (a view query's budget throws its own error).
public typealias PeerReplyReader = @Sendable (HTTPClientResponse.Body) async throws -> [UInt8]

/// Node-to-node HTTP calls (the internal API, forwarded admin requests, the views port's scatter and design-document
/// forwarding), with a deadline on every call: the one peer HTTP client (issue 69 item 5).
///
/// One AsyncHTTPClient serves every call. A peer that advertises TLS (`PeerEndpoint.admin`) is called over HTTPS
/// with a per-request TLS configuration pinned to its certificate's fingerprint (`PinnedPeerTrust`: the first
/// call fetches the certificate over a pinned handshake); a peer presenting another certificate gets nothing, not
/// even the request line, and the call fails without a plain-text retry.
public struct PeerClient: Sendable {
    let http: HTTPClient
    /// The pins and CA configurations this client's TLS calls are checked with (kept per fingerprint or CA set).
    public let trust: PinnedPeerTrust
    /// This client's calls by transport and its refusals (`/metrics`).
    public let counts = PeerCallCounts()
    /// What a call without a `deadline` of its own gets after its head timeout for the reply's body
    /// (`Limits.peerReplyBodySeconds`; tests shorten it).
    public let replyBodyTime: Duration

    /// `authorities`: the cluster's trusted CAs, which vouch for a member showing another leaf than its pin
    /// (ADR 0047).
    public init(
        http: HTTPClient, authorities: ClusterAuthorities? = nil,
        replyBodyTime: Duration = .seconds(Limits.peerReplyBodySeconds)
    ) {
        self.init(http: http, trust: PinnedPeerTrust(authorities: authorities), replyBodyTime: replyBodyTime)
    }

    /// A client checking TLS peers with `trust`, which another part of the node keeps (the views port's).
    public init(
        http: HTTPClient, trust: PinnedPeerTrust, replyBodyTime: Duration = .seconds(Limits.peerReplyBodySeconds)
    ) {
        self.http = http
        self.trust = trust
        self.replyBodyTime = replyBodyTime
    }

    /// `method path` on `endpoint` with Basic credentials; the whole reply is read, at most `maxReplyBytes`
    /// (`PeerReplyTooLarge` past it), or by `read` when given (its errors reach the caller unchanged). `timeout`
    /// bounds the wait for the reply's head; the whole call (the TLS configuration, the head and the body) must be
    /// done within `deadline`, or without one within `timeout` plus `replyBodyTime` (`PeerDeadlinePassed` after), so a
    /// peer sending its body a byte at a time cannot hold the call. Any other failure is a `PeerError` naming the peer.
    public func call(
        _ endpoint: PeerEndpoint, _ method: HTTPMethod, _ path: String, body: [UInt8]? = nil,
        credentials: (String, String)?, contentType: String? = nil, timeout: Duration = .seconds(5),
        maxReplyBytes: Int = Limits.maxPeerReplyBytes, deadline: Duration? = nil, read: PeerReplyReader? = nil
    ) async throws -> PeerReply {
        let started = ContinuousClock.now
        let whole = deadline ?? (timeout + replyBodyTime)
        let name = hostPort(endpoint.host, endpoint.port)
        var request = HTTPClientRequest(url: endpoint.baseURL + path)
        counts.countCall(tls: endpoint.usesTLS)
        if let pin = endpoint.tlsFingerprint {
            do {
                request.tlsConfiguration = try await trust.configuration(
                    host: endpoint.host, port: endpoint.port, fingerprint: pin, timeout: min(timeout, whole))
            } catch let mismatch as CertificatePin.Mismatch {
                counts.countRefusal()
                trust.forgetAuthorities(host: endpoint.host, port: endpoint.port)
                throw PeerError(description: "\(name): refused: \(mismatch) (\(pin))")
            } catch {
                // Checked afresh next time (the CAs, then the pin): the member may have been re-pinned.
                trust.forgetAuthorities(host: endpoint.host, port: endpoint.port)
                throw PeerError(description: "\(name): \(error)")
            }
        }
        request.method = method
        if let (user, password) = credentials {
            request.headers.add(name: "Authorization", value: BasicAuth.header(user: user, password: password))
        }
        if let contentType { request.headers.add(name: "Content-Type", value: contentType) }
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        let left = started + whole - ContinuousClock.now
        guard left > .zero else { throw PeerDeadlinePassed(deadline: whole) }
        // When the deadline is nearer than the head timeout, a head that does not come in time is the deadline passing.
        let headCutByDeadline = left <= timeout
        let headTimeout = TimeAmount(min(timeout, left))
        let http = self.http
        let sent = request
        do {
            return try await withDeadline(left, overdue: PeerDeadlinePassed(deadline: whole)) {
                let response = try await http.execute(sent, timeout: headTimeout)
                let bytes: [UInt8]
                if let read {
                    do { bytes = try await read(response.body) } catch { throw ReaderFailed(error: error) }
                } else {
                    do {
                        bytes = Array(try await response.body.collect(upTo: maxReplyBytes).readableBytesView)
                    } catch is NIOTooManyBytesError {
                        throw PeerReplyTooLarge(maxBytes: maxReplyBytes)
                    }
                }
                return PeerReply(
                    status: response.status.code, body: bytes, contentType: response.headers.first(name: "Content-Type")
                )
            }
        } catch let error as ReaderFailed {
            throw error.error
        } catch let error as PeerReplyTooLarge {
            throw error
        } catch let error as PeerDeadlinePassed {
            throw error
        } catch let error as HTTPClientError where headCutByDeadline && error == .deadlineExceeded {
            throw PeerDeadlinePassed(deadline: whole)
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

    /// A plain-HTTP call to `host:port`.
    public func call(
        host: String, port: Int, _ method: HTTPMethod, _ path: String, body: [UInt8]? = nil,
        credentials: (String, String)?, contentType: String? = nil, timeout: Duration = .seconds(5)
    ) async throws -> PeerReply {
        try await call(
            PeerEndpoint(host: host, port: port, tlsFingerprint: nil), method, path, body: body,
            credentials: credentials, contentType: contentType, timeout: timeout)
    }

    /// A call to a member's admin API (`PeerEndpoint.admin`: HTTPS pinned to its certificate when it has one).
    /// `contentType` defaults to JSON when there is a body.
    public func call(
        _ node: NodeInfo, _ method: HTTPMethod, _ path: String, body: [UInt8]? = nil, credentials: (String, String)?,
        contentType: String? = nil, timeout: Duration = .seconds(5)
    ) async throws -> PeerReply {
        try await call(
            PeerEndpoint.admin(node), method, path, body: body, credentials: credentials,
            contentType: contentType ?? (body == nil ? nil : "application/json"), timeout: timeout)
    }
}

/// An error the caller's `PeerReplyReader` threw, carried past the call's own error mapping.
private struct ReaderFailed: Error {
    var error: any Error
}
