import Logging
import NIOCore
import NIOPosix
import SetteeAuth
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import SetteeStorage
import Synchronization

enum BucketResolution {
    case ok(ResolvedBucket)
    case failed(Status)
}

/// A connection's last bucket lookup, valid while the registry's `generation` is unchanged. One object, so the
/// per-request fast path (`currentBucket`) copies one reference instead of the settings' three strings (ADR 0071:
/// the copy, its retains and releases were 3.7 % of the pipelined row's samples). Data operations take this object,
/// not `settings`, and read the fields they need through it: passing `settings` on copied the struct per request.
final class ResolvedBucket: Sendable {
    let generation: Int
    let engine: BucketEngine
    let settings: BucketSettings
    /// `settings`' collections manifest, and its collections by id for the per-request check of a named
    /// collection's id (made once per resolution, not per request).
    let manifest: CollectionsManifest
    let collectionsByID: [UInt32: CollectionsManifest.Collection]
    /// Each collection's scope name by collection id, for a scoped user's per-collection check (ADR 0141).
    let scopeNamesByCollectionID: [UInt32: String]

    init(generation: Int, engine: BucketEngine, settings: BucketSettings) {
        self.generation = generation
        self.engine = engine
        self.settings = settings
        self.manifest = settings.collectionsManifest
        self.collectionsByID = settings.collections?.collectionsByID() ?? [:]
        var scopes: [UInt32: String] = [:]
        for scope in manifest.scopes {
            for c in scope.collections { scopes[c.id] = scope.name }
        }
        self.scopeNamesByCollectionID = scopes
    }
}

/// Session commands: what a connection agreed (HELLO), who it is (SASL PLAIN; SCRAM is in `+SCRAM`), which bucket
/// it works on (SELECT_BUCKET, or the open bucket for an unauthenticated connection) and its cluster config.
extension KVConnectionHandler {
    func hello(_ frame: Frame) {
        var requested = frame.value
        var agreed: [UInt16] = []
        // HELLO resets what the connection negotiated, a SCRAM exchange in progress with it: its check is freed.
        abandonScram()
        state = ConnectionState(principal: state.principal, selectedBucket: state.selectedBucket)
        state.agent = String(buffer: frame.key)
        state.saidHello = true
        while let code = requested.readInteger(as: UInt16.self) {
            switch HelloFeature(code) {
            case .tcpNoDelay: state.tcpNoDelay = true
            case .mutationSeqno: state.mutationSeqno = true
            case .xerror: state.xerror = true
            case .selectBucket: break
            case .json: state.json = true
            case .altRequestSupport: state.altRequest = true
            case .syncReplication: state.syncReplication = true
            case .unorderedExecution: state.unorderedExecution = true
            case .preserveTtl: state.preserveTTL = true
            case .duplex: state.duplex = true
            case .clustermapChangeNotification: state.clustermapNotifications = true
            case .collections: state.collections = true
            case .xattr: state.xattr = true
            default: continue  // unknown or unimplemented features are simply not agreed
            }
            if !agreed.contains(code) { agreed.append(code) }
        }
        if state.duplex && state.clustermapNotifications { subscribeToConfigPushes() }
        emit { b in
            b.writeResponseHeader(opcode: .hello, status: .success, opaque: frame.opaque, valueLength: agreed.count * 2)
            for c in agreed { b.writeInteger(c) }
        }
    }

    func saslAuth(_ frame: Frame) {
        let mech = String(buffer: frame.key)
        guard mech == "PLAIN" else {
            node.counters.authErrors.wrappingAdd(1, ordering: .relaxed)
            emit {
                $0.writeResponse(
                    opcode: frame.opcode, status: .authError, opaque: frame.opaque,
                    value: Array("Unsupported mechanism".utf8))
            }
            return
        }
        // PLAIN: [authzid] NUL authcid NUL passwd
        let parts = frame.value.readableBytesView.split(separator: 0, maxSplits: 2, omittingEmptySubsequences: false)
        let user: String
        let password: String
        if parts.count == 3 {
            user = String(decoding: parts[1], as: UTF8.self)
            password = String(decoding: parts[2], as: UTF8.self)
        } else if parts.count == 2 {
            user = String(decoding: parts[0], as: UTF8.self)
            password = String(decoding: parts[1], as: UTF8.self)
        } else {
            user = ""
            password = ""
        }
        // Password checks run PBKDF2: keep them off the event loop, and answer in order.
        let slot = reserveSlot()
        checkPlain(slot: slot, user: user, password: password, opcode: frame.opcode, opaque: frame.opaque)
    }

    /// Decides a PLAIN login (`LoginGuard.beginCheck`: the attempt counts against the throttle's allowance as
    /// soon as it is allowed, before its password is checked) and checks it on the blocking pool. While the
    /// user's running checks at this source fill the allowance the login waits in the throttle's waiter list, the
    /// event loop free: the check that ends admits it (its callback hops back to this loop), or after
    /// `Limits.loginBusyWaitMs` it is refused unchecked. Closing the connection withdraws it (`channelInactive`).
    private func checkPlain(slot: Slot, user: String, password: String, opcode: Opcode, opaque: UInt32) {
        guard let loop = context?.eventLoop else { return }
        let handler = NIOLoopBound(self, eventLoop: loop)
        let loginGuard = node.registry.loginGuard
        let ticket = loginGuard.makeTicket()
        let source = LoginGuard.sourceHost(remote)
        let start = loginGuard.beginCheck(ticket: ticket, source: source, user: user) { start in
            loop.execute {
                let h = handler.value
                h.loginWaits.removeValue(forKey: ticket)?.cancel()
                h.runPlain(
                    start, slot: slot, user: user, password: password, opcode: opcode, opaque: opaque, loop: loop)
            }
        }
        guard start == .busy else {
            return runPlain(
                start, slot: slot, user: user, password: password, opcode: opcode, opaque: opaque, loop: loop)
        }
        // The callback above runs on this loop after this returns, so the deadline is always registered first.
        loginWaits[ticket] = loop.scheduleTask(in: .milliseconds(Int64(Limits.loginBusyWaitMs))) {
            loginGuard.expireWaiter(ticket)
        }
    }

    /// Withdraws this connection's waiting logins (it closed): each leaves the throttle's line at once.
    func withdrawLoginWaits() {
        let waits = loginWaits
        loginWaits = [:]
        for (ticket, deadline) in waits {
            deadline.cancel()
            node.registry.loginGuard.cancelWaiter(ticket)
        }
    }

    /// Runs or refuses a PLAIN login as `LoginGuard.beginCheck` decided (`.allow`: check and `endCheck`).
    private func runPlain(
        _ start: LoginThrottle.CheckStart, slot: Slot, user: String, password: String, opcode: Opcode,
        opaque: UInt32, loop: any EventLoop
    ) {
        let handler = NIOLoopBound(self, eventLoop: loop)
        let registry = node.registry
        let source = LoginGuard.sourceHost(remote)
        // Too many failures (or running checks) for this address or user: refused without a password check.
        let throttled = start != .allow
        node.blockingPool.submit { _ in
            let generation = registry.usersGeneration
            let principal = throttled ? nil : registry.authenticate(username: user, password: password)
            if !throttled {
                registry.loginGuard.endCheck(source: source, user: user, succeeded: principal != nil)
            }
            // A failure is answered late, so one connection cannot try passwords quickly.
            let delay: TimeAmount = principal == nil ? .milliseconds(Int64(Limits.loginFailureDelayMs)) : .zero
            loop.scheduleTask(in: delay) {
                let h = handler.value
                h.auditLogin(
                    user: user, mechanism: "PLAIN", principal: principal, throttled: throttled ? start : nil)
                var b = ByteBuffer()
                if let principal {
                    h.node.counters.countLogin(mechanism: "PLAIN")
                    h.loggedIn(as: principal, usersGeneration: generation)
                    b.writeResponse(
                        opcode: opcode, status: .success, opaque: opaque, value: Array("Authenticated".utf8))
                } else {
                    h.node.counters.authErrors.wrappingAdd(1, ordering: .relaxed)
                    h.logger.notice(
                        "SASL PLAIN authentication failed",
                        metadata: [
                            "remote": "\(h.remote)", "user": "\(LogText.userData(user))", "throttled": "\(throttled)",
                        ])
                    b.writeResponse(
                        opcode: opcode, status: .authError, opaque: opaque, value: Array("Auth failure".utf8))
                }
                h.complete(slot, b)
            }
        }
    }

    func selectBucket(_ frame: Frame) {
        let name = String(buffer: frame.key)
        guard let settings = node.registry.bucketSettings(named: name),
            state.mayAccess(bucket: name, settings: settings)
        else {
            emit {
                $0.writeResponse(
                    opcode: .selectBucket, status: .accessDenied, opaque: frame.opaque, value: Array("No access".utf8))
            }
            return
        }
        state.selectedBucket = name
        lastCollection = nil
        emit { $0.writeResponseHeader(opcode: .selectBucket, status: .success, opaque: frame.opaque) }
    }

    /// Whether the connection may read what STAT and GET_CLUSTER_CONFIG tell (the process, its connections and
    /// login counters; the cluster's nodes and ports): it authenticated, or it uses a bucket open to anyone (one it
    /// selected, or the implicit `authType=none` bucket, still open now). kv_engine answers a connection that has
    /// not authenticated EACCESS; an anonymous client of an open bucket is this server's own case (ADR 0015) and keeps
    /// what its SDK bootstrap needs.
    func mayReadNodeInformation() -> Bool {
        if state.isAuthenticated { return true }
        guard let name = state.selectedBucket ?? node.registry.defaultUnauthenticatedBucket(),
            let settings = node.registry.bucketSettings(named: name)
        else { return false }
        return state.mayAccess(bucket: name, settings: settings)
    }

    /// Refuses a request `mayReadNodeInformation` does not allow: EACCESS, as SELECT_BUCKET refuses a stranger.
    func refuseStranger(_ frame: Frame) {
        emit {
            $0.writeResponse(
                opcode: frame.opcode, status: .accessDenied, opaque: frame.opaque, value: Array("No access".utf8))
        }
    }

    func clusterConfig(_ frame: Frame) {
        guard mayReadNodeInformation() else { return refuseStranger(frame) }
        let config: [UInt8]?
        if let name = state.selectedBucket
            ?? (state.isAuthenticated ? nil : node.registry.defaultUnauthenticatedBucket())
        {
            config = node.registry.terseConfigJSON(bucket: name)
        } else {
            config = node.registry.globalConfigJSON()
        }
        guard let config else {
            emit { $0.writeResponseHeader(opcode: .getClusterConfig, status: .noBucket, opaque: frame.opaque) }
            return
        }
        emit {
            $0.writeResponse(
                opcode: .getClusterConfig, status: .success, opaque: frame.opaque, datatype: 1, value: config)
        }
    }

    func currentBucket() -> BucketResolution {
        // Fast path: the registry has not changed since we last looked this bucket up.
        let generation = node.registry.generation
        if let cached = cachedBucket, cached.generation == generation,
            cached.settings.name == state.selectedBucket || (state.selectedBucket == nil && !state.isAuthenticated)
        {
            return .ok(cached)
        }
        let name: String
        if let selected = state.selectedBucket {
            name = selected
        } else if !state.isAuthenticated, let implicit = node.registry.defaultUnauthenticatedBucket() {
            name = implicit
        } else {
            return .failed(.noBucket)
        }
        guard let (engine, settings) = node.registry.resolveBucket(named: name) else {
            cachedBucket = nil
            guard node.registry.bucketSettings(named: name) != nil else {
                if state.selectedBucket == name { state.selectedBucket = nil }
                lastCollection = nil
                return .failed(.noBucket)
            }
            // Listed but not open: warming up (retry), or its warmup failed (it will not open by itself).
            return .failed(node.registry.bucketFailure(named: name) == nil ? .temporaryFailure : .internalError)
        }
        let resolved = ResolvedBucket(generation: generation, engine: engine, settings: settings)
        cachedBucket = resolved
        return .ok(resolved)
    }

    /// The bucket a data request runs against, or nil once the reason there is none was answered: no bucket,
    /// warming up (TMPFAIL), or failed warmup (with the reason, since it will not open by itself).
    func resolveBucket(for frame: Frame) -> ResolvedBucket? {
        switch currentBucket() {
        case .ok(let bucket):
            return bucket
        case .failed(let status):
            if status == .internalError,
                let name = state.selectedBucket ?? node.registry.defaultUnauthenticatedBucket(),
                let reason = node.registry.bucketFailure(named: name)
            {
                let body = ErrorText.context("bucket \(name) failed warmup and is not served: \(reason)")
                emit {
                    $0.writeResponse(
                        opcode: frame.opcode, status: status, opaque: frame.opaque, datatype: 1, value: body)
                }
                return nil
            }
            emit { $0.writeResponseHeader(opcode: frame.opcode, status: status, opaque: frame.opaque) }
            return nil
        }
    }
}
