import Logging
import NIOCore
import SetteeAuth
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import SetteeStorage
import Synchronization

/// An in-progress SCRAM exchange on one connection, and who the user becomes if it succeeds. It holds one of the
/// login throttle's running checks (`LoginGuard.beginCheck`, taken at SASL_AUTH) until SASL_STEP ends it with the
/// proof's outcome (`endCheck`), or `abandonScram` frees it unjudged: the connection closed, a new SASL_AUTH or a
/// HELLO replaced the exchange, or `Limits.scramStepTimeoutMs` passed without a proof.
struct PendingScram {
    var server: ScramServer
    var username: String
    var principal: NodeRegistry.Principal?
    /// The source the throttle counted the check for (`LoginGuard.sourceHost`).
    var source: String?
    /// The throttle ticket of the SASL_AUTH that started it: tells its timeout this exchange from a later one.
    var ticket: UInt64
    /// Fires `scramTimedOut` after `Limits.scramStepTimeoutMs`; cancelled when the exchange ends.
    var timeout: Scheduled<Void>?
    /// The registry's `usersGeneration` read before `principal`'s roles were looked up.
    var usersGeneration: Int
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
        // A new SASL_AUTH restarts authentication (kv_engine drops the previous identity): an exchange in progress
        // ends here, whatever mechanism the new one uses.
        if frame.opcode == .saslAuth { abandonScram() }
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
            guard let user = ScramServer.username(inClientFirst: message) else {
                saslFailed(frame, user: nil, reason: "malformed client-first")
                return
            }
            scramFirst(hash: hash, user: user, message: message, opcode: frame.opcode, opaque: frame.opaque)
        } else {
            guard var pending = state.scram, pending.server.hash == hash else {
                saslFailed(frame, user: nil, reason: "SASL_STEP without SASL_AUTH")
                return
            }
            state.scram = nil
            pending.timeout?.cancel()
            var reply = pending.server.receiveClientFinal(message)
            if case .success = reply, let principal = pending.principal {
                auditLogin(user: pending.username, mechanism: hash.mechanism, principal: principal, throttled: nil)
                node.counters.countLogin(mechanism: hash.mechanism)
                loggedIn(as: principal, usersGeneration: pending.usersGeneration)
                node.registry.loginGuard.endCheck(source: pending.source, user: pending.username, succeeded: true)
            } else {
                if case .success = reply { reply = .failure(.invalidProof) }  // a proof verified, but for no principal
                auditLogin(user: pending.username, mechanism: hash.mechanism, principal: nil, throttled: nil)
                node.registry.loginGuard.endCheck(source: pending.source, user: pending.username, succeeded: false)
            }
            answer(frame.opcode, frame.opaque, reply, user: pending.username, slot: nil)
        }
    }

    /// SASL_AUTH of a SCRAM mechanism. The proof that SASL_STEP brings is a password guess, so the exchange counts
    /// against the login throttle's allowance from now on (`LoginGuard.beginCheck`, as a PLAIN login does in
    /// `checkPlain`): N exchanges started together, on one connection after another or on N connections, cost at
    /// most `Limits.loginFailuresBeforeThrottle` proofs before their failures are recorded. Past the allowance the
    /// login waits in the throttle's line (the event loop free) until a running check ends, or is refused at
    /// `Limits.loginBusyWaitMs`; closing the connection withdraws it (`withdrawLoginWaits`).
    private func scramFirst(hash: ScramHash, user: String, message: [UInt8], opcode: Opcode, opaque: UInt32) {
        guard let loop = context?.eventLoop else { return }
        let handler = NIOLoopBound(self, eventLoop: loop)
        let loginGuard = node.registry.loginGuard
        let ticket = loginGuard.makeTicket()
        let source = LoginGuard.sourceHost(remote)
        let slot = reserveSlot()
        let start = loginGuard.beginCheck(ticket: ticket, source: source, user: user) { start in
            loop.execute {
                let h = handler.value
                h.loginWaits.removeValue(forKey: ticket)?.cancel()
                h.challenge(
                    start, slot: slot, hash: hash, user: user, message: message, source: source, ticket: ticket,
                    opcode: opcode, opaque: opaque)
            }
        }
        guard start == .busy else {
            return challenge(
                start, slot: slot, hash: hash, user: user, message: message, source: source, ticket: ticket,
                opcode: opcode, opaque: opaque)
        }
        // The callback above runs on this loop after this returns, so the deadline is always registered first.
        loginWaits[ticket] = loop.scheduleTask(in: .milliseconds(Int64(Limits.loginBusyWaitMs))) {
            loginGuard.expireWaiter(ticket)
        }
    }

    /// Answers SASL_AUTH as the throttle decided: `.allow` challenges the client and keeps the exchange (and its
    /// running check) until SASL_STEP; anything else is refused without looking the user up.
    private func challenge(
        _ start: LoginThrottle.CheckStart, slot: Slot, hash: ScramHash, user: String, message: [UInt8],
        source: String?, ticket: UInt64, opcode: Opcode, opaque: UInt32
    ) {
        let loginGuard = node.registry.loginGuard
        // Too many failures (or exchanges running) for this address or user: refused before any key is looked up.
        guard start == .allow else {
            auditLogin(user: user, mechanism: hash.mechanism, principal: nil, throttled: start)
            return saslFailed(opcode, opaque, user: user, reason: "throttled", slot: slot)
        }
        // Admitted after the connection closed (`channelInactive` ran): no proof can follow.
        guard let loop = context?.eventLoop else {
            return loginGuard.abandonCheck(source: source, user: user)
        }
        abandonScram()
        let generation = node.registry.usersGeneration
        let login = node.registry.scramLogin(username: user, hash: hash)
        var server = ScramServer(hash: hash)
        let reply = server.receiveClientFirst(
            message, keys: login?.keys, decoy: Self.decoyKeys(user: user, hash: hash),
            serverNonce: SaslClientLogin.randomNonce(), alsoAccept: login?.alsoAccept ?? [])
        guard case .challenge = reply else {
            loginGuard.abandonCheck(source: source, user: user)
            return answer(opcode, opaque, reply, user: user, slot: slot)
        }
        let handler = NIOLoopBound(self, eventLoop: loop)
        let timeout = loop.scheduleTask(in: .milliseconds(Int64(Limits.scramStepTimeoutMs))) {
            handler.value.scramTimedOut(ticket: ticket)
        }
        state.scram = PendingScram(
            server: server, username: user, principal: login?.principal, source: source, ticket: ticket,
            timeout: timeout, usersGeneration: generation)
        answer(opcode, opaque, reply, user: user, slot: slot)
    }

    /// `Limits.scramStepTimeoutMs` passed since SASL_AUTH challenged: the exchange, if it is still this one, is
    /// dropped and its allowance freed; a SASL_STEP that comes later is refused as one without SASL_AUTH.
    private func scramTimedOut(ticket: UInt64) {
        guard let pending = state.scram, pending.ticket == ticket else { return }
        logger.info(
            "SCRAM exchange dropped: no SASL_STEP in time",
            metadata: ["remote": "\(remote)", "user": "\(LogText.userData(pending.username))"])
        abandonScram()
    }

    /// Ends the connection's SCRAM exchange, if one is waiting for its proof, without a verdict: its running check is
    /// freed in the login throttle (`LoginGuard.abandonCheck`) and nothing is recorded, since nothing was guessed.
    /// Called wherever an exchange can end other than by its proof, so a running check never leaks: a new
    /// SASL_AUTH, a refused SASL_STEP, HELLO (which resets the connection's state), its timeout, and the
    /// connection closing (`channelInactive`).
    func abandonScram() {
        guard let pending = state.scram else { return }
        state.scram = nil
        pending.timeout?.cancel()
        node.registry.loginGuard.abandonCheck(source: pending.source, user: pending.username)
    }

    /// Sends a SCRAM reply: in `slot` (reserved at SASL_AUTH, which may have waited in the throttle's line), or at
    /// once.
    private func answer(_ opcode: Opcode, _ opaque: UInt32, _ reply: ScramServer.Reply, user: String?, slot: Slot?) {
        switch reply {
        case .challenge(let serverFirst):
            respond(slot) {
                $0.writeResponse(opcode: opcode, status: .authContinue, opaque: opaque, value: serverFirst)
            }
        case .success(_, let serverFinal):
            respond(slot) { $0.writeResponse(opcode: opcode, status: .success, opaque: opaque, value: serverFinal) }
        case .failure(let failure):
            saslFailed(opcode, opaque, user: user, reason: "\(failure)", slot: slot)
        }
    }

    private func respond(_ slot: Slot?, _ body: (inout ByteBuffer) -> Void) {
        guard let slot else { return emit(body) }
        var b = ByteBuffer()
        body(&b)
        complete(slot, b)
    }

    private func saslFailed(_ frame: Frame, user: String?, reason: String) {
        saslFailed(frame.opcode, frame.opaque, user: user, reason: reason, slot: nil)
    }

    /// Refuses a SASL request (AUTH_ERROR); a SCRAM exchange still waiting for its proof ends with it.
    private func saslFailed(_ opcode: Opcode, _ opaque: UInt32, user: String?, reason: String, slot: Slot?) {
        abandonScram()
        node.counters.authErrors.wrappingAdd(1, ordering: .relaxed)
        logger.notice(
            "SASL authentication failed",
            metadata: [
                "remote": "\(remote)", "user": "\(user.map { LogText.userData($0) } ?? "?")",
                "reason": "\(LogText.escaped(reason))",
            ])
        respond(slot) {
            $0.writeResponse(opcode: opcode, status: .authError, opaque: opaque, value: Array("Auth failure".utf8))
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

    /// Makes `principal` the connection's identity after a successful login. `generation`: the registry's
    /// `usersGeneration` read before the login looked the principal's roles up, so a change made meanwhile is seen.
    func loggedIn(as principal: NodeRegistry.Principal, usersGeneration generation: Int) {
        state.principal = principal
        if case .bucket(let name) = principal {
            state.selectedBucket = name
            lastCollection = nil
        }
        if case .user = principal { rolesGeneration = generation } else { rolesGeneration = nil }
    }

    /// Whether the connection may go on. A local user's roles were resolved at login; when the registry's users
    /// changed since (`usersGeneration` moved), they are read again before the next operation, as kv_engine recreates
    /// a stale privilege context (ADR 0008, decision 4). Per request: one load of `rolesGeneration` for every other
    /// principal; for a user one relaxed atomic load and an integer compare more. Called by `dispatch` and once per
    /// DCP batch (a producer streams without requests).
    @inline(__always)
    func userRolesCurrent() -> Bool {
        guard let resolvedAt = rolesGeneration, resolvedAt != node.registry.usersGeneration else { return true }
        return refreshUserRoles()
    }

    /// Reads the user's roles again (one lookup by name, no password check). A user that no longer exists (deleted,
    /// or its name is now the admin's) or, on a DCP producer, may no longer stream its bucket has its connection
    /// closed (false); changed roles apply from this operation on.
    private func refreshUserRoles() -> Bool {
        guard !closing else { return false }
        guard case .user(let name, let roles) = state.principal else {
            rolesGeneration = nil
            return true
        }
        let generation = node.registry.usersGeneration
        guard let current = node.registry.currentRoles(ofUser: name) else {
            closeRevoked(user: name, reason: "the user no longer exists")
            return false
        }
        rolesGeneration = generation
        if current != roles {
            state.principal = .user(name, roles: current)
            logger.info(
                "local user's roles changed; applied to its open connection",
                metadata: [
                    "remote": "\(remote)", "user": "\(LogText.userData(name))",
                    "roles": "\(current.map(\.description))",
                ])
        }
        if let p = dcp, !current.grants(onBucket: p.bucket).contains(.streamChanges) {
            closeRevoked(user: name, reason: "the user may no longer stream the bucket")
            return false
        }
        return true
    }

    /// Closes the connection of a user whose access was revoked, after sending what was already answered.
    private func closeRevoked(user: String, reason: String) {
        logger.notice(
            "closing connection: its user's access was revoked",
            metadata: ["remote": "\(remote)", "user": "\(LogText.userData(user))", "reason": "\(reason)"])
        closing = true
        inbound = nil
        guard let context else { return }
        flushOut(context: context)
        context.close(promise: nil)
    }

    /// Whether the connection's principal may run `frame` on `bucket`, in the collection its (engine) key names;
    /// answers the refusal itself when not. Only local RBAC users are restricted: the admin and bucket principals
    /// hold every grant. Bucket-wide grants that cover the opcode decide without looking at the key (the common
    /// case, one pass over the roles); otherwise the key's collection is decided (`keyspaceAccess`, ADR 0141).
    func authorize(_ frame: Frame, bucket: ResolvedBucket) -> Bool {
        guard case .user(_, let roles) = state.principal else { return true }
        let needed = Self.grantsNeeded(frame.opcode)
        if roles.grants(onBucket: bucket.settings.name).isSuperset(of: needed) { return true }
        let refusal = keyspaceRefusal(
            roles.access(needed, bucket: bucket, engineKey: frame.key.readableBytesView), bucket: bucket)
        guard let refusal else { return true }
        emit {
            $0.writeResponse(
                opcode: frame.opcode, status: refusal.status, opaque: frame.opaque, datatype: refusal.datatype,
                value: refusal.body)
        }
        return false
    }

    /// A bucket-level check for requests outside any collection (FLUSH): grants on the whole bucket.
    func authorizeBucketWide(_ frame: Frame, bucket: String) -> Bool {
        guard case .user(_, let roles) = state.principal else { return true }
        if roles.grants(onBucket: bucket).isSuperset(of: Self.grantsNeeded(frame.opcode)) { return true }
        emit {
            $0.writeResponse(
                opcode: frame.opcode, status: .accessDenied, opaque: frame.opaque, value: Array("No access".utf8))
        }
        return false
    }

    /// The answer for a decision that is not `allowed`, nil when it is: EACCESS (0x24) for `denied`; for `unknown`
    /// (no privilege at all in the collection) UNKNOWN_COLLECTION (0x88) with the manifest uid, as kv_engine
    /// answers so a collection's existence does not leak, to a collection-aware connection, and EACCESS to one that
    /// did not negotiate collections (it cannot name another collection, and may not know 0x88).
    func keyspaceRefusal(_ access: KeyspaceAccess, bucket: ResolvedBucket) -> ObserveKeyRefusal? {
        switch access {
        case .allowed: return nil
        case .unknown where state.collections:
            return ObserveKeyRefusal(status: .unknownCollection, datatype: 1, body: bucket.manifest.unknownBody)
        case .denied, .unknown:
            return ObserveKeyRefusal(status: .accessDenied, datatype: 0, body: Array("No access".utf8))
        }
    }

    /// Grants an opcode needs (Couchbase's: GAT/touch/lock need write, reads need read).
    static func grantsNeeded(_ opcode: Opcode) -> BucketGrants {
        if opcode.isSubdoc { return opcode.isSubdocLookup ? .read : .write }
        switch opcode.loud {
        case .get, .getk, .getMeta, .observeSeqno, .observe: return .read
        case .touch: return .write
        case .gat, .getLocked, .unlockKey: return [.read, .write]
        case .flush: return .manage
        // Restore / XDCR writes (ADR 0147): a document's own CAS and revSeqno, so writing and managing the bucket
        // (Full Admin, Cluster Admin, bucket_full_access), as Couchbase asks for its data_backup-level privilege.
        case .setWithMeta, .addWithMeta, .delWithMeta: return [.write, .manage]
        default: return .write
        }
    }
}
