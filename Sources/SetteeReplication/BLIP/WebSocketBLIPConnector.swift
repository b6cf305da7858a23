import AsyncHTTPClient
import HTTPTypes
import HummingbirdWSClient
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
import NIOWebSocket
import SetteeBLIP
import SetteeCore
import SetteeJSON
import SetteeTLS
import Synchronization

/// Opens BLIP connections to `ws[s]://host/db/_blipsync` as Couchbase Lite does (replication-protocol.adoc §2
/// Connecting): a WebSocket upgrade offering `BLIP_3+CBMobile_3,BLIP_3+CBMobile_2`, credentials preemptively as
/// `Authorization: Basic`, and a `BLIPSession` (SetteeBLIP) over the socket.
///
/// The client library reports a refused upgrade without its status, so the status is asked for again without the
/// upgrade (`refusalStatus`): a refusal the server answers with an HTTP error (401 a wrong password, 403, 404, 400 no
/// subprotocol spoken) is that `ReplicationError.http`, which the replicator does not retry (as a REST replication's
/// 401), and only a refusal without an answer is a transient network error. Before, every refusal was retried with
/// backoff like a lost connection.
///
/// A `wss://` URL may carry its peer's certificate pin, as a peer listener's sync URL does (`?cert=sha256:…`,
/// `SyncURLPin`): the pin is taken out of the URL (never sent to the server) and each connection first fetches the
/// peer's certificate, accepting it only with that fingerprint (`CertificatePin.fetch`), then trusts exactly it. A
/// peer presenting another certificate fails the connection with `ReplicationError.invalid` (not retried: a wrong
/// pin does not fix itself).
public struct WebSocketBLIPConnector: BLIPConnector {
    /// The `_blipsync` URL, without credentials or pin.
    public let url: String
    /// The database URL without credentials or pin: the remote's identity in checkpoint ids.
    public let databaseURL: String
    /// The pinned certificate's fingerprint (`sha256:<hex>`) from the URL's `cert` parameter, if it had one.
    public let pinnedFingerprint: String?
    let authorization: String?
    let tls: TLSConfiguration?
    let logger: Logger

    /// The subprotocols offered, preferred first.
    public static let subprotocols = "BLIP_3+CBMobile_3,BLIP_3+CBMobile_2"

    /// - Parameters:
    ///   - databaseURL: `ws://host:4984/db` (or `wss://`); credentials in it become Basic authentication unless
    ///     `authenticator` names others. `/_blipsync` is appended. `wss://…?cert=sha256:<hex>` pins the peer's
    ///     certificate (`SyncURLPin`).
    ///   - tls: trust for `wss` (SetteeTLS builds it from a CA file or a pin); the system's roots when nil. Not with
    ///     a pinned URL (the pin is the trust).
    /// - Throws: `ReplicationError.invalid` for a URL that is not `ws(s)://`, a malformed pin, a pin on `ws://` or
    ///   with `tls`, and `wss://` to an IP address without a pin (the client cannot check an IP address).
    public init(
        databaseURL: String, authenticator: ReplicationAuthenticator = .none, tls: TLSConfiguration? = nil,
        logger: Logger = Logger(label: "settee.replicator.blip")
    ) throws(ReplicationError) {
        let pinned: SyncURLPin
        do { pinned = try SyncURLPin(databaseURL) } catch {
            throw ReplicationError.invalid("\(error) (\(ReplicationID.stripCredentials(databaseURL)))")
        }
        let databaseURL = pinned.url
        guard databaseURL.hasPrefix("ws://") || databaseURL.hasPrefix("wss://") else {
            throw ReplicationError.invalid("not a ws(s) URL: \(ReplicationID.stripCredentials(databaseURL))")
        }
        if pinned.fingerprint != nil {
            guard databaseURL.hasPrefix("wss://") else {
                throw ReplicationError.invalid(
                    "cert= pins a TLS certificate: \(ReplicationID.stripCredentials(databaseURL)) must be wss://")
            }
            guard tls == nil else {
                throw ReplicationError.invalid(
                    "a pinned URL (cert=) takes no other TLS configuration: the pin is the trust")
            }
        }
        pinnedFingerprint = pinned.fingerprint
        var auth = authenticator
        if auth == .none, let creds = RemoteEndpoint.credentials(in: databaseURL) {
            auth = .basic(user: creds.0, password: creds.1)
        }
        switch auth {
        case .none: authorization = nil
        case .basic(let user, let password), .session(let user, let password):
            authorization = BasicAuth.header(user: user, password: password)
        case .cookie:
            throw ReplicationError.invalid("a BLIP replication authenticates with Basic credentials")
        }
        self.databaseURL = ReplicationID.stripCredentials(databaseURL)
        url = self.databaseURL + "/_blipsync"
        // The WebSocket client names the URL's host in TLS's SNI, and an IP address may not go there (NIOSSL refuses
        // it: every `wss://127.0.0.1` failed as a network error). A pinned certificate (no hostname check) needs no
        // name, so a placeholder goes; a hostname check against an IP address cannot be made through this client.
        var sni: String? = nil
        if databaseURL.hasPrefix("wss://"), Self.isIPAddress(PinnedPeer.host(of: url)) {
            guard pinned.fingerprint != nil || tls?.certificateVerification == .noHostnameVerification else {
                throw ReplicationError.invalid(
                    "wss:// to an IP address needs the peer's pinned certificate (?cert=sha256:…): "
                        + "the WebSocket client cannot check a certificate's IP address; use a host name")
            }
            sni = Self.sniPlaceholder
        }
        sniHostname = sni
        self.tls = tls
        self.logger = logger
    }

    /// How long closing a `wss://` connection waits for the peer's TLS close_notify: NIOSSL's default is 5 s, and
    /// neither Hummingbird's server nor the WebSocket client exchanged it after the WebSocket close handshake, so every
    /// one-shot replication over TLS ended 5 s after its work (measured: a 5-document push to a Lite listener 5.16 s,
    /// 0.43 s with this bound). The WebSocket close handshake has already ended the exchange (RFC 6455 §7.1.1: the
    /// TCP close follows it), so nothing is lost when the wait is cut.
    package static let tlsShutdownTimeout = TimeAmount.milliseconds(200)

    /// `tls` with `tlsShutdownTimeout` as its shutdown timeout.
    package static func closingPromptly(_ tls: TLSConfiguration?) -> TLSConfiguration? {
        guard var tls else { return nil }
        tls.shutdownTimeout = tlsShutdownTimeout
        return tls
    }

    /// The TLS server name sent to a pinned peer dialled by IP address (SNI may carry only a DNS name).
    static let sniPlaceholder = "settee-peer"
    let sniHostname: String?

    /// Whether `host` is an IPv4 address or a bracketed IPv6 one.
    static func isIPAddress(_ host: String) -> Bool {
        if host.hasPrefix("[") { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { !$0.isEmpty && $0.count <= 3 && $0.allSatisfy(\.isNumber) }
    }

    public func connect(handler: any BLIPRequestHandler) async throws -> any BLIPReplicationConnection {
        var headers = HTTPFields()
        if let name = HTTPField.Name("Sec-WebSocket-Protocol") { headers[name] = Self.subprotocols }
        if let authorization { headers[.authorization] = authorization }
        let configuration = WebSocketClientConfiguration(
            maxFrameSize: Limits.blipMaxFrameBytes, additionalHeaders: headers, sniHostname: sniHostname)
        let (ready, readyInput) = AsyncStream<BLIPSession>.makeStream()
        let failure = Mutex<(any Error)?>(nil)
        let tls: TLSConfiguration?
        if let pinnedFingerprint {
            tls = Self.closingPromptly(try await PinnedPeer.tlsConfiguration(url: url, fingerprint: pinnedFingerprint))
        } else {
            tls = Self.closingPromptly(self.tls)
        }
        let (url, logger) = (self.url, self.logger)
        let socket = Task {
            do {
                try await WebSocketClient.connect(
                    url: url, configuration: configuration, tlsConfiguration: tls, logger: logger
                ) { inbound, outbound, _ in
                    let session = BLIPSession(handler: handler) { frame in
                        try await outbound.write(.binary(ByteBuffer(bytes: frame)))
                    }
                    readyInput.yield(session)
                    let frames = inbound.messages(maxSize: Limits.blipMaxFrameBytes).compactMap {
                        @Sendable message -> [UInt8]? in
                        if case .binary(let buffer) = message { return Array(buffer.readableBytesView) }
                        return nil
                    }
                    let end = await session.run(inbound: frames)
                    try? await outbound.close(.init(codeNumber: Int(end.closeCode)), reason: end.reason)
                }
            } catch {
                failure.withLock { $0 = error }
            }
            readyInput.finish()
        }
        for await session in ready { return WebSocketBLIPConnection(session: session, socket: socket) }
        let error = failure.withLock { $0 }
        if let refused = error as? WebSocketClientError, refused == .webSocketUpgradeFailed,
            let status = await Self.refusalStatus(url: url, authorization: authorization, tls: tls), status >= 400
        {
            throw ReplicationError.http(
                status: status, error: CouchError.couchName(status),
                reason: "the BLIP WebSocket upgrade to \(url) was refused with HTTP \(status)")
        }
        throw ReplicationError.network("BLIP WebSocket to \(url) failed: \(error.map { "\($0)" } ?? "closed")")
    }

    /// The status of a refused upgrade: the same `GET` (credentials, subprotocols) without `Upgrade`, through the
    /// replicator's HTTP client (`RemoteEndpoint.sharedClient`), its answer's head only; nil when none comes within
    /// `ReplicationLimits.requestTimeoutMs`. The gateway and a Lite listener authenticate before they look at the
    /// upgrade, so a wrong password is 401 here as it was there.
    static func refusalStatus(url: String, authorization: String?, tls: TLSConfiguration?) async -> Int? {
        let httpURL = url.hasPrefix("wss://") ? "https://" + url.dropFirst(6) : "http://" + url.dropFirst(5)
        var request = HTTPClientRequest(url: httpURL)
        request.headers.add(name: "Sec-WebSocket-Protocol", value: subprotocols)
        if let authorization { request.headers.add(name: "Authorization", value: authorization) }
        request.tlsConfiguration = tls
        let timeout = TimeAmount.milliseconds(Int64(ReplicationLimits.requestTimeoutMs))
        guard let response = try? await RemoteEndpoint.sharedClient.execute(request, timeout: timeout) else {
            return nil
        }
        return Int(response.status.code)
    }
}

/// One WebSocket carrying a `BLIPSession`.
struct WebSocketBLIPConnection: BLIPReplicationConnection {
    let session: BLIPSession
    let socket: Task<Void, Never>

    var peer: any BLIPPeer { session }

    func close(code: UInt16) async {
        await session.close(code: code)
        await socket.value
    }

    func waitUntilClosed() async { _ = await session.waitUntilEnded() }
}
