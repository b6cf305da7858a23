import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS

/// Fetches a TLS peer's certificate and accepts it only if its SHA-256 fingerprint is the pinned one
/// (from the sync URL's `cert` parameter). The handshake is aborted for any other certificate, so
/// nothing is sent to an impostor; the returned certificate then becomes the only trust root of the
/// replicator's HTTP client.
public enum CertificatePin {
    public struct Mismatch: Error, CustomStringConvertible {
        public let presented: String
        public var description: String { "the peer's certificate (\(presented)) is not the pinned one" }
    }

    public static func fetch(host: String, port: Int, fingerprint: String) async throws -> NIOSSLCertificate {
        var config = TLSConfiguration.makeClientConfiguration()
        // The callback below decides; with `.none` NIOSSL would never call it (and nothing would be pinned).
        config.certificateVerification = .noHostnameVerification
        let context = try NIOSSLContext(configuration: config)
        let expected = fingerprint.lowercased()
        let captured = NIOLockedValueBox<NIOSSLCertificate?>(nil)
        let presented = NIOLockedValueBox<String>("")
        let group = MultiThreadedEventLoopGroup.singleton
        let done = group.next().makePromise(of: Void.self)
        let channel = try await ClientBootstrap(group: group)
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
                            if print == expected {
                                captured.withLockedValue { $0 = leaf }
                                promise.succeed(.certificateVerified)
                            } else {
                                promise.succeed(.failed)
                            }
                        })
                    try channel.pipeline.syncOperations.addHandler(handler)
                    try channel.pipeline.syncOperations.addHandler(HandshakeWatcher(done: done))
                }
            }
            .connect(host: host, port: port).get()
        _ = try? await done.futureResult.get()
        try? await channel.close()
        guard let certificate = captured.withLockedValue({ $0 }) else {
            throw Mismatch(presented: presented.withLockedValue { $0.isEmpty ? "none" : $0 })
        }
        return certificate
    }
}

/// Completes `done` when the TLS handshake finishes, fails it on an error or a close before that.
private final class HandshakeWatcher: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    let done: EventLoopPromise<Void>

    init(done: EventLoopPromise<Void>) { self.done = done }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tls = event as? TLSUserEvent, case .handshakeCompleted = tls { done.succeed(()) }
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
