import NIOConcurrencyHelpers
import NIOCore
import NIOSSL

/// Whom a TLS client trusts: the certificates of a CA file (with hostname or IP checks against the
/// address dialled), or exactly one certificate named by its SHA-256 fingerprint (a pin: the fingerprint
/// is the identity, so no CA and no hostname are involved). There is no "trust anything" case: a client
/// asked for TLS verifies, and a failed verification fails the connection (never a plain-text retry).
public enum TLSTrust: Sendable, Equatable {
    /// Certificates loaded from a PEM CA file.
    case authority(path: String)
    /// A leaf certificate's `sha256:<64 hex>` fingerprint.
    case pinned(fingerprint: String)

    /// Parses a pin as `sha256:<hex>` or bare hex, colons allowed (`AB:CD:...` as openssl prints it).
    public static func pin(_ text: String) throws -> TLSTrust {
        var hex = text.lowercased()
        if hex.hasPrefix("sha256:") { hex.removeFirst(7) }
        hex.removeAll { $0 == ":" }
        guard hex.count == 64, hex.allSatisfy({ $0.isHexDigit }) else {
            throw TLSSetupError("a certificate pin is sha256: followed by 64 hex digits, not \(text)")
        }
        return .pinned(fingerprint: "sha256:" + hex)
    }

    /// A client context for this trust, made once per client and shared by its connections. With `authorities`, a
    /// pinned peer that shows another leaf is still accepted when the cluster's trusted CAs vouch for it at the
    /// host dialled (node-to-node replication, ADR 0047).
    public func makeClientContext(authorities: ClusterAuthorities? = nil) throws -> TLSClientContext {
        var config = TLSConfiguration.makeClientConfiguration()
        config.minimumTLSVersion = .tlsv12
        switch self {
        case .authority(let path):
            let roots: [NIOSSLCertificate]
            do { roots = try NIOSSLCertificate.fromPEMFile(path) } catch {
                throw TLSSetupError("cannot read the CA file \(path): \(error)")
            }
            guard !roots.isEmpty else { throw TLSSetupError("\(path) holds no PEM certificate") }
            config.trustRoots = .certificates(roots)
            config.certificateVerification = .fullVerification
            return TLSClientContext(context: try NIOSSLContext(configuration: config), pin: nil)
        case .pinned(let fingerprint):
            // Verification is the pin callback's alone: it replaces the chain check. The mode must not be `.none`,
            // or NIOSSL never calls the callback and any certificate passes.
            config.certificateVerification = .noHostnameVerification
            return TLSClientContext(
                context: try NIOSSLContext(configuration: config), pin: fingerprint, authorities: authorities)
        }
    }
}

/// A NIOSSL client context with its pin, if any: `makeHandler` gives each new connection its TLS handler.
public struct TLSClientContext: Sendable {
    let context: NIOSSLContext
    let pin: String?
    /// Trusted CAs that vouch for a pinned peer showing another leaf (ADR 0047).
    var authorities: ClusterAuthorities? = nil

    /// Puts the TLS handler (`makeHandler`) first in a client pipeline and, right behind it, a recorder of why
    /// the handshake failed, so the caller can report "certificate not trusted" rather than a closed connection.
    public func addHandlers(
        to pipeline: ChannelPipeline.SynchronousOperations, host: String, failure: TLSHandshakeFailure
    ) throws {
        try pipeline.addHandler(makeHandler(host: host))
        try pipeline.addHandler(TLSFailureRecorder(failure: failure))
    }

    /// The handler to put first in a client channel's pipeline for a connection to `host`: a DNS name is
    /// sent as SNI and checked against the certificate; an IP literal is checked against the address the
    /// socket is connected to.
    public func makeHandler(host: String) throws -> NIOSSLClientHandler {
        let isName = !host.isEmpty && host.contains(where: { $0.isLetter }) && !host.contains(":")
        let serverHostname = isName ? host : nil
        guard let pin else { return try NIOSSLClientHandler(context: context, serverHostname: serverHostname) }
        let authorities = self.authorities
        return try NIOSSLClientHandler(
            context: context, serverHostname: serverHostname,
            customVerificationCallback: { certificates, promise in
                guard let leaf = certificates.first, let der = try? leaf.toDERBytes() else {
                    promise.succeed(.failed)
                    return
                }
                if SelfSignedIdentity.fingerprint(ofDER: der) == pin { return promise.succeed(.certificateVerified) }
                guard let authorities else { return promise.succeed(.failed) }
                let chain = certificates.compactMap { try? $0.toDERBytes() }
                // Bounded (Limits.maxConcurrentCAChecks): a handshake beyond it fails at once, no task started.
                authorities.verifyBounded(presented: chain, host: host) { decision in
                    promise.succeed(decision == .trusted ? .certificateVerified : .failed)
                }
            })
    }
}

/// Why a client's TLS handshake failed, once it has (nil before or without a failure).
public final class TLSHandshakeFailure: Sendable {
    private let reasonBox = NIOLockedValueBox<String?>(nil)

    public init() {}

    public var reason: String? { reasonBox.withLockedValue { $0 } }

    func record(_ error: any Error) {
        let text = "\(error)"
        let reason =
            text.contains("CERTIFICATE_VERIFY_FAILED")
            ? "the server's certificate is not trusted (not the pinned one, or not signed by the CA): \(text)" : text
        reasonBox.withLockedValue { if $0 == nil { $0 = reason } }
    }
}

/// Records the first error the TLS handler raises, and passes it on.
final class TLSFailureRecorder: ChannelInboundHandler, Sendable {
    typealias InboundIn = NIOAny
    let failure: TLSHandshakeFailure

    init(failure: TLSHandshakeFailure) { self.failure = failure }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        failure.record(error)
        context.fireErrorCaught(error)
    }
}
