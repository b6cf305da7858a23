import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS

/// Fetches a TLS peer's certificate and accepts it only if its SHA-256 fingerprint is the pinned one
/// (from the sync URL's `cert` parameter, or a node's `tlsFingerprint` in the cluster document). The
/// handshake is aborted for any other certificate, so nothing is sent to an impostor; the returned
/// certificate then becomes the trust root of an HTTP client that cannot take a pin itself
/// (AsyncHTTPClient: the replicator, `PinnedPeerTrust` for node-to-node admin calls).
public enum CertificatePin {
    public struct Mismatch: Error, CustomStringConvertible {
        public let presented: String
        public var description: String { "the peer's certificate (\(presented)) is not the pinned one" }
    }

    /// The pinned peer's leaf certificate (`fetchChain`'s first).
    public static func fetch(
        host: String, port: Int, fingerprint: String, timeout: Duration = .seconds(10)
    ) async throws -> NIOSSLCertificate {
        let chain = try await fetchChain(host: host, port: port, fingerprint: fingerprint, timeout: timeout)
        guard let leaf = chain.first else { throw Mismatch(presented: "none") }
        return leaf
    }

    /// The certificates a TLS peer presents (leaf first), if the leaf's fingerprint is `fingerprint`. The
    /// handshake is aborted for any other leaf, so nothing is sent to an impostor. Connecting and the handshake
    /// together may take `timeout`: a listener that accepts and never answers cannot hold the caller.
    public static func fetchChain(
        host: String, port: Int, fingerprint: String, timeout: Duration = .seconds(10)
    ) async throws -> [NIOSSLCertificate] {
        let expected = fingerprint.lowercased()
        let shown = try await handshake(host: host, port: port, timeout: timeout, check: .pinned(expected))
        if let chain = shown.accepted { return chain }
        // No certificate seen at all: the handshake failed (or timed out) before one was shown.
        if shown.presented.isEmpty, let failure = shown.failure { throw failure }
        throw Mismatch(presented: shown.presented.isEmpty ? "none" : shown.presented)
    }

    /// The certificates a TLS peer presents (leaf first), if they chain to one of the cluster's trusted CAs with
    /// `host` among the leaf's names (`ClusterAuthorities.verify`, ADR 0047); the handshake is aborted otherwise,
    /// so nothing is sent to a peer the CAs do not vouch for. Throws `ClusterAuthorities.Untrusted` for such a
    /// peer (reason `ClusterAuthorities.busyReason` when `Limits.maxConcurrentOwnCAChecks` checks were already
    /// running: `verifyOwnBounded`), the connection's error when no certificate was shown.
    public static func fetchChain(
        host: String, port: Int, trustedBy authorities: ClusterAuthorities, timeout: Duration = .seconds(10)
    ) async throws -> [NIOSSLCertificate] {
        let why = NIOLockedValueBox<String?>(nil)
        let shown = try await handshake(
            host: host, port: port, timeout: timeout,
            check: .verified { chain in
                guard let der = try? chain.map({ try $0.toDERBytes() }) else { return false }
                switch await authorities.verifyOwnBounded(presented: der, host: host) {
                case .trusted: return true
                case .refused(let reason):
                    why.withLockedValue { $0 = reason }
                    return false
                }
            })
        if let chain = shown.accepted { return chain }
        if shown.presented.isEmpty, let failure = shown.failure { throw failure }
        throw ClusterAuthorities.Untrusted(
            presented: shown.presented, reason: why.withLockedValue { $0 } ?? "not verified")
    }

    /// How `handshake` checks the certificates a peer presents.
    private enum Check: Sendable {
        /// The leaf's fingerprint must be this one: decided on the event loop, in the verification callback.
        case pinned(String)
        /// An asynchronous check of the chain (the CAs' verification, swift-certificates' async `Verifier`): in a
        /// task, so it waits for a cooperative-pool thread while the handshake waits for it (ADR 0057).
        case verified(@Sendable ([NIOSSLCertificate]) async -> Bool)
    }

    /// One TLS handshake with `host:port` whose certificate check is `check`: the handshake is aborted when it
    /// refuses. Returns the accepted chain (nil if refused or never shown), the leaf's fingerprint as presented ("" when
    /// none was) and the connection's failure, if any. A pinned check and the close after the handshake run on the
    /// event loop: a busy cooperative pool or caller cannot leave the peer a silent connection (ADR 0057).
    private static func handshake(
        host: String, port: Int, timeout: Duration, check: Check
    ) async throws -> (accepted: [NIOSSLCertificate]?, presented: String, failure: (any Error)?) {
        var config = TLSConfiguration.makeClientConfiguration()
        config.minimumTLSVersion = .tlsv12
        // The callback below decides; with `.none` NIOSSL would never call it (and nothing would be checked).
        config.certificateVerification = .noHostnameVerification
        let context = try NIOSSLContext(configuration: config)
        let captured = NIOLockedValueBox<[NIOSSLCertificate]?>(nil)
        let presented = NIOLockedValueBox<String>("")
        let group = MultiThreadedEventLoopGroup.singleton
        let done = group.next().makePromise(of: Void.self)
        let milliseconds = max(1, Int64(min(timeout / .milliseconds(1), 86_400_000).rounded(.up)))
        let channel: any Channel
        do {
            channel = try await ClientBootstrap(group: group)
                .connectTimeout(.milliseconds(milliseconds))
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let handler = try NIOSSLClientHandler(
                            context: context, serverHostname: nil,
                            customVerificationCallback: { certificates, promise in
                                guard let leaf = certificates.first, let der = try? leaf.toDERBytes() else {
                                    promise.succeed(.failed)
                                    return
                                }
                                let print = SelfSignedIdentity.fingerprint(ofDER: der)
                                presented.withLockedValue { $0 = print }
                                switch check {
                                case .pinned(let expected):
                                    guard print == expected else { return promise.succeed(.failed) }
                                    captured.withLockedValue { $0 = certificates }
                                    promise.succeed(.certificateVerified)
                                case .verified(let accept):
                                    Task {
                                        if await accept(certificates) {
                                            captured.withLockedValue { $0 = certificates }
                                            promise.succeed(.certificateVerified)
                                        } else {
                                            promise.succeed(.failed)
                                        }
                                    }
                                }
                            })
                        try channel.pipeline.syncOperations.addHandler(handler)
                        try channel.pipeline.syncOperations.addHandler(HandshakeWatcher(done: done))
                    }
                }
                .connect(host: host, port: port).get()
        } catch {
            done.fail(error)
            throw error
        }
        // The handshake's deadline: a peer that accepts and then says nothing is given up on.
        let deadline = channel.eventLoop.scheduleTask(in: .milliseconds(milliseconds)) {
            done.fail(ChannelError.connectTimeout(.milliseconds(milliseconds)))
        }
        var failure: (any Error)?
        do { try await done.futureResult.get() } catch { failure = error }
        deadline.cancel()
        try? await channel.close()
        return (captured.withLockedValue { $0 }, presented.withLockedValue { $0 }, failure)
    }
}

/// Completes `done` when the TLS handshake finishes and closes the connection there, on the event loop (the chain
/// is all it was for; closing from the awaiting task would leave the peer a silent connection while that task
/// waits for a thread); fails `done` on an error or a close before that.
private final class HandshakeWatcher: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    let done: EventLoopPromise<Void>

    init(done: EventLoopPromise<Void>) { self.done = done }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tls = event as? TLSUserEvent, case .handshakeCompleted = tls {
            done.succeed(())
            context.fireUserInboundEventTriggered(event)
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        done.fail(error)
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        done.fail(ChannelError.alreadyClosed)
        context.fireChannelInactive()
    }
}
