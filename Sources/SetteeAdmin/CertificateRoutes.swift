import Foundation
import Hummingbird
import Logging
import NIOCore
import SetteeClusterMap
import SetteeCore
import SetteeDiagnostics
import SetteeJSON
import SetteeRegistry
import SetteeTLS

/// Certificate rotation without a restart (ADR 0038): Couchbase's `POST /node/controller/reloadCertificate`, and
/// the internal call by which a node asks the orchestrator to pin its new certificate in the cluster document.
enum CertificateRoutes {
    static func add(
        to router: Router<AdminRequestContext>, api: AdminAPI, tls: ReloadableTLSIdentity?, cluster: ClusterManager?
    ) {
        let registry = api.registry
        let logger = api.logger
        // Rereads the certificate and key files the node was started with; new connections on every TLS port get
        // them, open connections keep theirs. A file that does not make a usable identity changes nothing (400).
        router.post("/node/controller/reloadCertificate") { _, _ in
            guard let tls else {
                return AdminResponses.general(
                    .badRequest, "This node serves no TLS: start it with --tls or --tls-cert and --tls-key.")
            }
            let loaded: Result<TLSIdentity, TLSReloadRefusal> = await BlockingPool.run {
                do { return .success(try tls.reload()) } catch {
                    return .failure(TLSReloadRefusal(description: "\(error)"))
                }
            }
            let identity: TLSIdentity
            switch loaded {
            case .success(let new): identity = new
            case .failure(let refusal):
                logger.warning(
                    "certificate reload refused; the certificate in use stays",
                    metadata: ["reason": "\(refusal)", "fingerprint": "\(tls.fingerprint)"])
                return AdminResponses.general(.badRequest, "Certificate not reloaded: \(refusal)")
            }
            let previous = registry.node.tlsFingerprint
            registry.setServedTLSFingerprint(identity.fingerprint)
            logger.notice(
                "certificate reloaded: new TLS connections get it",
                metadata: [
                    "file": "\(identity.source)", "fingerprint": "\(identity.fingerprint)",
                    "previous": "\(previous ?? "none")",
                ])
            registry.audit.record(
                AuditCaller.event(
                    .certificateReloaded,
                    [
                        ("fingerprint", .string(identity.fingerprint)),
                        ("previous_fingerprint", previous.map { JSON.string($0) } ?? .null),
                    ]))
            var fields: [(String, JSON)] = [("fingerprint", .string(identity.fingerprint))]
            if let cluster {
                switch await cluster.publishServedFingerprint() {
                case .success:
                    fields.append(("clusterUpdated", .bool(true)))
                case .failure(let why):
                    // Retried in the background (`keepServedFingerprintPublished`); peers refuse new connections to
                    // this node meanwhile, never falling back to plain text.
                    fields.append(("clusterUpdated", .bool(false)))
                    fields.append(("reason", .string(why.description)))
                }
            }
            return AdminResponses.json(.ok, .object(fields))
        }
        guard let cluster else { return }
        // A member announcing its new certificate (internal credentials only: `/settee/...` is never a user's).
        router.post("/settee/internal/certificate") { request, _ in
            var request = request
            guard let buffer = try? await request.collectBody(upTo: Limits.maxAdminRequestBody),
                let json = try? JSON.parse(Array(buffer.readableBytesView)), let node = json["node"]?.stringValue,
                let fingerprint = json["fingerprint"]?.stringValue
            else { return AdminResponses.general(.badRequest, "node and fingerprint required") }
            guard cluster.orchestrator()?.id == registry.node.otpNode else {
                return AdminResponses.general(.serviceUnavailable, "This node is not the orchestrator; retry.")
            }
            switch await cluster.learnFingerprint(of: NodeID(node), fingerprint) {
            case .success(let changed): return AdminResponses.json(.ok, ["changed": .bool(changed)])
            case .failure(let error): return ClusterRoutes.response(error)
            }
        }
    }
}

/// Why a reload was refused (the file, and what is wrong with it).
struct TLSReloadRefusal: Error, CustomStringConvertible, Sendable {
    let description: String
}
