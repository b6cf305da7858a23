import Logging
import NIOCore
import SetteeAuth
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import SetteeStorage
import Synchronization

/// An in-progress SCRAM exchange on one connection, and who the user becomes if it succeeds.
struct PendingScram {
    var server: ScramServer
    var username: String
    var principal: NodeRegistry.Principal?
}

/// Process-local key for decoy SCRAM salts of unknown users (stable within a process so a repeated
/// attempt sees the same salt, as for a real user).
private let decoySecret: [UInt8] = {
    var rng = SystemRandomNumberGenerator()
    return (0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) }
}()

extension KVConnectionHandler {
    /// SASL mechanisms offered by SASL_LIST_MECHS, strongest first (the SDK picks SCRAM-SHA512).
    static let saslMechanisms = Array("SCRAM-SHA512 SCRAM-SHA256 SCRAM-SHA1 PLAIN".utf8)

    /// SASL_AUTH / SASL_STEP: PLAIN goes to `saslAuth`, SCRAM-SHA* runs the `ScramServer` state
    /// machine. SCRAM needs no PBKDF2 on the server (stored keys), so it runs on the event loop.
    func sasl(_ frame: Frame) {
        let mech = String(buffer: frame.key)
        guard let hash = ScramHash(mechanism: mech) else {
            if frame.opcode == .saslAuth {
                saslAuth(frame)
            } else {
                saslFailed(frame, user: nil, reason: "SASL_STEP for \(mech)")
            }
            return
        }
        let message = Array(frame.value.readableBytesView)
        if frame.opcode == .saslAuth {
            // A new SASL_AUTH restarts authentication (kv_engine drops the previous identity).
            state.scram = nil
            guard let user = ScramServer.username(inClientFirst: message) else {
                saslFailed(frame, user: nil, reason: "malformed client-first")
                return
            }
            // Too many failures from this address or for this user: refused before any key is looked up.
            if node.registry.loginGuard.decide(source: LoginGuard.sourceHost(remote), user: user) != .allow {
                saslFailed(frame, user: user, reason: "throttled")
                return
            }
            let login = node.registry.scramLogin(username: user, hash: hash)
            var server = ScramServer(hash: hash)
            let reply = server.receiveClientFirst(
                message, keys: login?.keys, decoy: Self.decoyKeys(user: user, hash: hash),
                serverNonce: SaslClientLogin.randomNonce(), alsoAccept: login?.alsoAccept ?? [])
            state.scram = PendingScram(server: server, username: user, principal: login?.principal)
            answer(frame, reply, user: user)
        } else {
            guard var pending = state.scram, pending.server.hash == hash else {
                saslFailed(frame, user: nil, reason: "SASL_STEP without SASL_AUTH")
                return
            }
            let reply = pending.server.receiveClientFinal(message)
            state.scram = nil
            if case .success = reply, let principal = pending.principal {
                node.counters.countLogin(mechanism: hash.mechanism)
                state.principal = principal
                if case .bucket(let name) = principal { state.selectedBucket = name }
                node.registry.loginGuard.recordSuccess(source: LoginGuard.sourceHost(remote), user: pending.username)
            } else {
                node.registry.loginGuard.recordFailure(source: LoginGuard.sourceHost(remote), user: pending.username)
            }
            answer(frame, reply, user: pending.username)
        }
    }

    private func answer(_ frame: Frame, _ reply: ScramServer.Reply, user: String?) {
        switch reply {
        case .challenge(let serverFirst):
            emit {
                $0.writeResponse(opcode: frame.opcode, status: .authContinue, opaque: frame.opaque, value: serverFirst)
            }
        case .success(_, let serverFinal):
            emit { $0.writeResponse(opcode: frame.opcode, status: .success, opaque: frame.opaque, value: serverFinal) }
        case .failure(let failure):
            saslFailed(frame, user: user, reason: "\(failure)")
        }
    }

    private func saslFailed(_ frame: Frame, user: String?, reason: String) {
        state.scram = nil
        node.counters.authErrors.wrappingAdd(1, ordering: .relaxed)
        logger.notice(
            "SASL authentication failed",
            metadata: [
                "remote": "\(remote)", "user": "\(user.map { LogText.userData($0) } ?? "?")",
                "reason": "\(LogText.escaped(reason))",
            ])
        emit {
            $0.writeResponse(
                opcode: frame.opcode, status: .authError, opaque: frame.opaque, value: Array("Auth failure".utf8))
        }
    }

    /// Keys for a user that does not exist: a salt derived from the name, keys no proof can match.
    static func decoyKeys(user: String, hash: ScramHash) -> ScramKeys {
        let seed = ScramHash.sha512.hmac(key: decoySecret, data: Array(user.utf8))
        return ScramKeys(
            salt: Array(seed.prefix(16)), iterations: 4096, storedKey: Array(seed.suffix(hash.digestLength)),
            serverKey: Array(seed.prefix(hash.digestLength)))
    }

    // MARK: RBAC on KV

    /// Whether the connection's principal may run `opcode` on `bucket`; answers EACCESS (0x24) itself
    /// when not. Only local RBAC users are restricted: the admin and bucket principals hold every grant.
    func authorize(_ frame: Frame, bucket: String) -> Bool {
        guard case .user(_, let roles) = state.principal else { return true }
        let needed = Self.grantsNeeded(frame.opcode)
        if roles.grants(onBucket: bucket).isSuperset(of: needed) { return true }
        emit {
            $0.writeResponse(
                opcode: frame.opcode, status: .accessDenied, opaque: frame.opaque, value: Array("No access".utf8))
        }
        return false
    }

    /// Grants an opcode needs (Couchbase's: GAT/touch/lock need write, reads need read).
    static func grantsNeeded(_ opcode: Opcode) -> BucketGrants {
        if opcode.isSubdoc { return opcode.isSubdocLookup ? .read : .write }
        switch opcode.loud {
        case .get, .getk, .getMeta, .observeSeqno, .observe: return .read
        case .touch: return .write
        case .gat, .getLocked, .unlockKey: return [.read, .write]
        case .flush: return .manage
        default: return .write
        }
    }
}
