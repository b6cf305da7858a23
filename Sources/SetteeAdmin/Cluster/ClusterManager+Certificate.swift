import Foundation
import Logging
import NIOHTTP1
import SetteeClusterMap
import SetteeCore
import SetteeJSON
import SetteePeerHTTP
import SetteeRegistry
import SetteeTLS

/// The cluster learns a node's new certificate (ADR 0038). Peers pin each member's `tlsFingerprint` from the
/// cluster document (ADR 0030), so after `POST /node/controller/reloadCertificate` the node asks the orchestrator to
/// put its new fingerprint there; the orchestrator checks that the node really presents it, commits the change
/// like any other change of the document (revision + 1, persisted) and pushes it to every member.
///
/// ```
///   node: reload ─▶ registry.node.tlsFingerprint = new ─▶ POST /settee/internal/certificate ─▶ orchestrator
///   orchestrator: pinned handshake to the node's admin TLS port with `new` (refused unless it presents it)
///                 ─▶ updateCluster(members[node].tlsFingerprint = new) ─▶ publish() (pushed pinned to `new`)
///   every node: adopts, so new peer calls and replica streams to the node pin `new`; nothing falls back to plain
/// ```
/// Between the reload and the adoption (one push), new connections to the node pinned to the old fingerprint are
/// refused and retried by their callers (heartbeats each second); connections already open keep working. A
/// request that fails is retried by `keepServedFingerprintPublished` until the document holds the fingerprint.
extension ClusterManager {
    /// How often a node checks that the cluster document pins the certificate it serves.
    static let servedFingerprintCheckInterval: Duration = .seconds(3)
    /// How long the orchestrator's pinned handshake to a node announcing a new certificate may take.
    static let servedFingerprintVerifyTimeout: Duration = .seconds(5)

    /// Whether the cluster document this node holds pins another certificate for it than the one it serves (a
    /// member with TLS after a reload whose publication has not arrived yet).
    var servedFingerprintUnpublished: Bool {
        guard let served = registry.node.tlsFingerprint else { return false }
        let snapshot = registry.clusterSnapshot
        guard let entry = snapshot.members.first(where: { $0.id == selfID }) else { return false }
        return entry.node.tlsFingerprint != served
    }

    /// Makes the cluster document pin the certificate this node serves now: asks the orchestrator (or, being it,
    /// commits and publishes). Success when the document already does. The failure names why (the caller retries).
    public func publishServedFingerprint() async -> Result<Void, ClusterRequestFailure> {
        guard let served = registry.node.tlsFingerprint, servedFingerprintUnpublished else { return .success(()) }
        guard let orchestrator = orchestrator() else {
            return .failure(ClusterRequestFailure(description: "no orchestrator is reachable"))
        }
        if orchestrator.id == selfID {
            switch await learnFingerprint(of: selfID, served) {
            case .success: return .success(())
            case .failure(let error): return .failure(ClusterRequestFailure(description: Self.describe(error)))
            }
        }
        let body = JSON.object([("node", .string(selfID.rawValue)), ("fingerprint", .string(served))])
        do {
            let reply = try await peers.call(
                orchestrator.node, .POST, "/settee/internal/certificate", body: body.serialized(),
                credentials: internalCredentials, timeout: .seconds(15))
            guard reply.ok else {
                return .failure(
                    ClusterRequestFailure(
                        description: "the orchestrator \(orchestrator.id) answered \(reply.status): "
                            + String(decoding: reply.body.prefix(512), as: UTF8.self)))
            }
            return .success(())
        } catch {
            return .failure(
                ClusterRequestFailure(description: "the orchestrator \(orchestrator.id) could not be reached: \(error)")
            )
        }
    }

    /// Retries `publishServedFingerprint` every `servedFingerprintCheckInterval` while the document this node holds
    /// pins another certificate for it, until the task is cancelled. A check is a local read.
    public func keepServedFingerprintPublished() async {
        while !Task.isCancelled {
            do { try await Task.sleep(for: Self.servedFingerprintCheckInterval) } catch { return }
            guard servedFingerprintUnpublished else { continue }
            if case .failure(let why) = await publishServedFingerprint() {
                logger.warning(
                    "the cluster does not pin this node's new certificate yet; retrying",
                    metadata: ["reason": "\(why)"])
            }
        }
    }

    /// On the orchestrator: pins `fingerprint` for `member` in the cluster document, once a handshake with the
    /// member's admin TLS port shows it presents that certificate, and publishes the document. Returns whether
    /// the document changed. `fingerprint` comes from a peer's request: checked before use.
    func learnFingerprint(of member: NodeID, _ fingerprint: String) async -> Result<Bool, ClusterRequestError> {
        guard case .pinned(let pin)? = try? TLSTrust.pin(fingerprint) else {
            return .failure(.badRequest(["fingerprint must be sha256: followed by 64 hex digits"]))
        }
        let registry = self.registry
        guard let entry = registry.clusterSnapshot.members.first(where: { $0.id == member }) else {
            return .failure(.badRequest(["\(member) is not a member of this cluster"]))
        }
        if entry.node.tlsFingerprint == pin { return .success(false) }
        guard let port = entry.node.adminTLSPort else {
            return .failure(.badRequest(["\(member) advertises no admin TLS port"]))
        }
        if let problem = quorumProblem() { return .failure(.noQuorum(problem)) }
        if member == selfID {
            // This node's own word: the fingerprint of what its listeners were just given.
            guard registry.node.tlsFingerprint == pin else {
                return .failure(.badRequest(["this node does not serve the certificate \(pin)"]))
            }
        } else {
            do {
                _ = try await CertificatePin.fetchChain(
                    host: entry.node.host, port: port, fingerprint: pin, timeout: Self.servedFingerprintVerifyTimeout)
            } catch {
                return .failure(
                    .badRequest(["\(member) does not present the certificate \(pin) on its admin TLS port: \(error)"]))
            }
        }
        do {
            // A member's description changes, no vBucket moves: committed at the current epoch like the
            // cluster's settings and users (ADR 0034, "Not done"), so a node whose peers cannot reach it during
            // the change is not needed for a promise.
            _ = try await BlockingPool.run {
                try self.stored {
                    try registry.updateCluster { members, _ in
                        if let i = members.firstIndex(where: { $0.id == member }) {
                            members[i].node.tlsFingerprint = pin
                        }
                    }
                }
            }
        } catch {
            return .failure(.internalError("\(error)"))
        }
        logger.notice(
            "cluster document pins a member's new certificate",
            metadata: ["node": "\(member)", "fingerprint": "\(pin)"])
        _ = await publish()
        return .success(true)
    }

    static func describe(_ error: ClusterRequestError) -> String {
        switch error {
        case .badRequest(let messages): return messages.joined(separator: "; ")
        case .noQuorum(let reason), .internalError(let reason): return reason
        case .rebalanceRunning: return "Rebalance running."
        case .fieldErrors(let errors): return errors.map { "\($0.0): \($0.1)" }.joined(separator: "; ")
        case .mismatch, .emptyKnownNodes: return "\(error)"
        }
    }
}

/// Why the cluster could not be told something (a reason for the operator and the log).
public struct ClusterRequestFailure: Error, CustomStringConvertible, Sendable {
    public let description: String
}
