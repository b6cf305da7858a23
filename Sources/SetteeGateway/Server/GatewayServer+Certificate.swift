import Foundation
import Logging
import ServiceLifecycle
import SetteeJSON
import SetteeTLS
import UnixSignals

/// Certificate rotation without a restart for the gateway (ADR 0040): `SSLCert`/`SSLKey` are reread and, if they
/// make a usable identity (readable PEM, the key matches the leaf, the leaf valid now), every new TLS connection on
/// both interfaces gets them; connections already open keep theirs. Two triggers, one path:
/// `POST /_reload_certificate` on the admin interface (the answer names the new fingerprint or why the files were
/// refused) and SIGHUP (`systemctl reload`, `kill -HUP`; the outcome goes to the log). Files that are refused
/// change nothing.
extension GatewayServer {
    /// Why a reload did nothing.
    struct CertificateReloadRefusal: Error, CustomStringConvertible {
        let description: String
    }

    /// Rereads `SSLCert`/`SSLKey`; the served identity's fingerprint, or why nothing changed.
    func reloadCertificate() async -> Result<TLSIdentity, CertificateReloadRefusal> {
        guard let tls else {
            return .failure(CertificateReloadRefusal(description: "this gateway serves no TLS (no SSLCert/SSLKey)"))
        }
        let previous = tls.fingerprint
        do {
            let identity = try await tls.reloadOffLoop()
            logger.notice(
                "certificate reloaded: new TLS connections get it",
                metadata: [
                    "SSLCert": "\(tls.certificatePath)", "fingerprint": "\(identity.fingerprint)",
                    "previous": "\(previous)",
                ])
            return .success(identity)
        } catch {
            logger.warning(
                "certificate reload refused; the certificate in use stays",
                metadata: ["reason": "\(error)", "fingerprint": "\(previous)"])
            return .failure(CertificateReloadRefusal(description: "\(error)"))
        }
    }

    /// `POST /_reload_certificate` (admin interface): 200 `{"ok": true, "fingerprint"}`, or 400 with the reason.
    static func reloadCertificateReply(_ server: GatewayServer) async throws -> GatewayReply {
        switch await server.reloadCertificate() {
        case .success(let identity):
            return .json(200, .object([("ok", .bool(true)), ("fingerprint", .string(identity.fingerprint))]))
        case .failure(let refusal):
            throw GatewayError.status(400, "Certificate not reloaded: \(refusal)")
        }
    }
}

/// Reloads the gateway's certificate on each SIGHUP until graceful shutdown (a no-op without TLS, logged).
struct CertificateReloadOnHangup: Service {
    let server: GatewayServer

    func run() async throws {
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        for await _ in hangups.cancelOnGracefulShutdown() {
            _ = await server.reloadCertificate()
        }
    }
}
