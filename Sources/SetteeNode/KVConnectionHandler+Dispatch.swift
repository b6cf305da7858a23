import Logging
import NIOCore
import NIOPosix
import SetteeAuth
import SetteeClusterMap
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import SetteeStorage
import SetteeSubdoc
import Synchronization

/// Result of running a data operation: finished (response written, or deliberately none), blocked
/// on a disk fetch of an evicted value, or waiting for its batch to be fsynced (durable write).
enum Outcome {
    case done
    case wouldBlock(VBucketID, [UInt8])
    case persist(VBucketID, SeqNo, timeoutMs: UInt16?)
    /// A durable write waiting for a majority of the vBucket's copies (replicaNumber > 0).
    case majority(VBucketID, SeqNo, DurabilityLevel, timeoutMs: UInt16?, monitor: DurabilityMonitor, copies: Int)
}

enum BucketResolution {
    case ok(BucketEngine, BucketSettings)
    case failed(Status)
}

extension KVConnectionHandler {
    func dispatch(_ frame: Frame, context: ChannelHandlerContext) {
        var frame = frame
        if state.collections && frame.opcode.carriesDocumentKey {
            guard let scoped = inDefaultCollection(frame) else { return }
            frame = scoped
        }
        switch frame.opcode {
        case .noop:
            emit { $0.writeResponseHeader(opcode: .noop, status: .success, opaque: frame.opaque) }
        case .version:
            emit {
                $0.writeResponse(
                    opcode: .version, status: .success, opaque: frame.opaque, value: Array(KVNode.version.utf8))
            }
        case .quit:
            emit { $0.writeResponseHeader(opcode: .quit, status: .success, opaque: frame.opaque) }
            closeAfterPending(context: context)
        case .quitq:
            closeAfterPending(context: context)
        case .hello:
            hello(frame)
        case .saslListMechs:
            emit {
                $0.writeResponse(
                    opcode: frame.opcode, status: .success, opaque: frame.opaque, value: Self.saslMechanisms)
            }
        case .saslAuth, .saslStep:
            sasl(frame)
        case .getErrorMap:
            emit {
                $0.writeResponse(
                    opcode: .getErrorMap, status: .success, opaque: frame.opaque, datatype: 1, value: ErrorMap.json)
            }
        case .selectBucket:
            selectBucket(frame)
        case .getClusterConfig:
            clusterConfig(frame)
        case .verbosity:
            emit { $0.writeResponseHeader(opcode: .verbosity, status: .success, opaque: frame.opaque) }
        case .stat:
            stat(frame)
        case .flush, .flushq:
            flush(frame)
        case .get, .getq, .getk, .getkq, .set, .setq, .add, .addq, .replace, .replaceq, .delete, .deleteq,
            .increment, .incrementq, .decrement, .decrementq, .append, .appendq, .prepend, .prependq, .touch, .gat,
            .gatq, .getMeta, .observeSeqno, .getReplica:
            dataOperation(frame)
        case _ where frame.opcode.isSubdoc:
            dataOperation(frame)
        case .getCollectionsManifest, .getCollectionID:
            collectionOperation(frame)
        case .dcpOpen, .dcpStreamRequest, .dcpCloseStream, .dcpGetFailoverLog, .dcpControl, .dcpBufferAcknowledgement,
            .dcpSeqnoAcknowledged, .dcpNoop, .setVBucket, .getVBucket:
            dcpDispatch(frame, context: context)
        case .getLocked, .unlockKey:
            lockOperation(frame)
        default:
            emit {
                $0.writeResponse(
                    opcode: frame.opcode, status: .unknownCommand, opaque: frame.opaque,
                    value: Array("Unknown command".utf8))
            }
        }
    }

    // MARK: session commands

    func hello(_ frame: Frame) {
        var requested = frame.value
        var agreed: [UInt16] = []
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
        guard let loop = context?.eventLoop else { return }
        let handler = NIOLoopBound(self, eventLoop: loop)
        let registry = node.registry
        let opcode = frame.opcode
        let opaque = frame.opaque
        let source = LoginGuard.sourceHost(remote)
        // Too many failures from this address or for this user: refused without a password check.
        let throttled = registry.loginGuard.decide(source: source, user: user) != .allow
        node.blockingPool.submit { _ in
            let principal = throttled ? nil : registry.authenticate(username: user, password: password)
            if principal != nil {
                registry.loginGuard.recordSuccess(source: source, user: user)
            } else if !throttled {
                registry.loginGuard.recordFailure(source: source, user: user)
            }
            // A failure is answered late, so one connection cannot try passwords quickly.
            let delay: TimeAmount = principal == nil ? .milliseconds(Int64(Limits.loginFailureDelayMs)) : .zero
            loop.scheduleTask(in: delay) {
                let h = handler.value
                var b = ByteBuffer()
                if let principal {
                    h.node.counters.countLogin(mechanism: "PLAIN")
                    h.state.principal = principal
                    if case .bucket(let name) = principal { h.state.selectedBucket = name }
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
        emit { $0.writeResponseHeader(opcode: .selectBucket, status: .success, opaque: frame.opaque) }
    }

    func clusterConfig(_ frame: Frame) {
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
            return .ok(cached.engine, cached.settings)
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
                return .failed(.noBucket)
            }
            // Listed but not open: warming up (retry), or its warmup failed (it will not open by itself).
            return .failed(node.registry.bucketFailure(named: name) == nil ? .temporaryFailure : .internalError)
        }
        cachedBucket = (generation, engine, settings)
        return .ok(engine, settings)
    }

    // MARK: flush (blocking: runs on the node's thread pool)

    func flush(_ frame: Frame) {
        guard case .ok(_, let settings) = currentBucket() else {
            emit { $0.writeResponseHeader(opcode: frame.opcode, status: .noBucket, opaque: frame.opaque) }
            return
        }
        guard authorize(frame, bucket: settings.name) else { return }
        // Without credentials a connection has only what `BucketGrants.anonymous` gives (ADR 0015): never flush.
        if state.principal == nil,
            !BucketGrants.anonymous(bucketHasNoPassword: settings.authType == .none).contains(.manage)
        {
            emit {
                $0.writeResponse(
                    opcode: frame.opcode, status: .accessDenied, opaque: frame.opaque, value: Array("No access".utf8))
            }
            return
        }
        if frame.extras.readableBytes != 0 && frame.extras.readableBytes != 4 {
            emit { $0.writeResponseHeader(opcode: frame.opcode, status: .invalidArguments, opaque: frame.opaque) }
            return
        }
        let slot = reserveSlot()
        let loop = context!.eventLoop
        let registry = node.registry
        let name = settings.name
        let quiet = frame.opcode.isQuiet
        let opcode = frame.opcode
        let opaque = frame.opaque
        let logger = self.logger
        let handler = NIOLoopBound(self, eventLoop: loop)
        let answer: @Sendable (Status, String?) -> Void = { status, why in
            loop.execute {
                var b = ByteBuffer()
                if let why {
                    b.writeResponse(opcode: opcode, status: status, opaque: opaque, value: Array(why.utf8))
                } else if !(quiet && status == .success) {
                    b.writeResponseHeader(opcode: opcode, status: status, opaque: opaque)
                }
                handler.value.complete(slot, b)
            }
        }
        // On a cluster the flush empties the bucket on every node, as REST doFlush does (never one node's share).
        if let clusterFlush = node.bucketFlush {
            Task {
                switch await clusterFlush(name) {
                case .flushed: answer(.success, nil)
                case .notFound: answer(.noBucket, nil)
                case .disabled: answer(.notSupported, "Flush is disabled for the bucket")
                case .rebalanceRunning: answer(.temporaryFailure, "Rebalance running. Cannot flush the bucket.")
                case .failed(let why):
                    logger.notice("flush failed", metadata: ["bucket": "\(name)", "error": "\(why)"])
                    answer(.internalError, "Flush failed on some nodes: \(why)")
                }
            }
            return
        }
        node.blockingPool.submit { _ in
            do {
                try registry.flushBucket(named: name)
                answer(.success, nil)
            } catch {
                logger.notice("flush refused", metadata: ["bucket": "\(name)", "error": "\(error)"])
                answer(settings.flushEnabled ? .internalError : .notSupported, nil)
            }
        }
    }

    // MARK: data operations

    func dataOperation(_ frame: Frame) {
        let engine: BucketEngine
        let settings: BucketSettings
        switch currentBucket() {
        case .ok(let e, let s):
            engine = e
            settings = s
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
                return
            }
            emit { $0.writeResponseHeader(opcode: frame.opcode, status: status, opaque: frame.opaque) }
            return
        }
        guard authorize(frame, bucket: settings.name) else { return }
        if BucketEngine.mayHaveLocks && answeredByLock(frame, engine: engine) { return }
        // Framing extras: durability and preserve-TTL.
        var infos = FrameInfos()
        if frame.framingExtras.readableBytes > 0 {
            do {
                infos = try FrameInfoParser.parse(frame.framingExtras)
            } catch {
                let status: Status = error == .malformed ? .invalidArguments : .notSupported
                emit { $0.writeResponseHeader(opcode: frame.opcode, status: status, opaque: frame.opaque) }
                return
            }
        }
        if let level = infos.durabilityLevel {
            if !isMutation(frame.opcode) || !level.isValid {
                let status: Status = level.isValid ? .invalidArguments : .durabilityInvalidLevel
                emit { $0.writeResponseHeader(opcode: frame.opcode, status: status, opaque: frame.opaque) }
                return
            }
            // Majority of copies (active + configured replicas). The copies that can acknowledge are the
            // active and the replicas in the vBucket's duty (ReplicationManager); fewer than a majority
            // is DURABILITY_IMPOSSIBLE, as Couchbase answers when replica nodes are missing.
            let copies = settings.replicaNumber + 1
            let majority = copies / 2 + 1
            var available = 1
            if settings.replicaNumber > 0, Int(frame.vbucket) < settings.numVBuckets,
                let monitor = node.replication?.durability(bucket: settings.name)
            {
                available += monitor.replicaCount(VBucketID(frame.vbucket))
                pendingMajority = (monitor, majority)
            }
            if settings.replicaNumber > 2 || available < majority {
                pendingMajority = nil
                emit {
                    $0.writeResponseHeader(opcode: frame.opcode, status: .durabilityImpossible, opaque: frame.opaque)
                }
                return
            }
        }
        // A durable write that needs this node's disk fails fast while the bucket cannot persist, before it
        // is applied: TMPFAIL with the reason (the flusher retries; the client may too).
        if let level = infos.durabilityLevel, level.requiresPersistenceOnActive,
            let reason = engine.persistenceFailure
        {
            pendingMajority = nil
            let error = EngineError.persistenceFailing(reason)
            emit {
                $0.writeResponse(
                    opcode: frame.opcode, status: error.status, opaque: frame.opaque, datatype: error.messageDatatype,
                    value: error.message)
            }
            return
        }
        defer { pendingMajority = nil }
        if slots.isEmpty && infos.durabilityLevel == nil {
            let outcome = execute(frame, engine: engine, settings: settings, infos: infos, into: &out)
            if case .done = outcome { return }
            handleAsync(outcome, frame: frame, engine: engine, settings: settings, infos: infos, slot: reserveSlot())
        } else if state.unorderedExecution && infos.durabilityLevel != nil {
            // Out of order: a durable write that has to wait answers when its level is met or it times out,
            // while everything after it answers at once (the client matches responses by opaque).
            var b = ByteBuffer()
            let outcome = execute(frame, engine: engine, settings: settings, infos: infos, into: &b)
            if case .done = outcome {
                emit { $0.writeBuffer(&b) }
                return
            }
            handleAsync(
                outcome, frame: frame, engine: engine, settings: settings, infos: infos, slot: reserveDetachedSlot(),
                response: b)
        } else {
            let slot = reserveSlot()
            var b = ByteBuffer()
            let outcome = execute(frame, engine: engine, settings: settings, infos: infos, into: &b)
            if case .done = outcome {
                complete(slot, b)
                return
            }
            handleAsync(
                outcome, frame: frame, engine: engine, settings: settings, infos: infos, slot: slot, response: b)
        }
    }

    /// Finishes an operation that could not complete synchronously: fetches an evicted value and
    /// retries, or holds a durable write's response until its batch is fsynced (or it times out).
    func handleAsync(
        _ outcome: Outcome, frame: Frame, engine: BucketEngine, settings: BucketSettings, infos: FrameInfos,
        slot: Slot, response: ByteBuffer = ByteBuffer(), fetchAttempt: Int = 1
    ) {
        guard let loop = context?.eventLoop else { return }
        let handler = NIOLoopBound(self, eventLoop: loop)
        switch outcome {
        case .done:
            complete(slot, response)
        case .wouldBlock(let vb, let key):
            let majority = pendingMajority  // the retry must wait for the same majority
            engine.fetch(vb, key) {
                loop.execute {
                    let h = handler.value
                    var b = ByteBuffer()
                    h.pendingMajority = majority
                    let again = h.execute(frame, engine: engine, settings: settings, infos: infos, into: &b)
                    defer { h.pendingMajority = nil }
                    switch again {
                    case .wouldBlock where fetchAttempt >= Limits.backgroundFetchAttempts:
                        // The item pager keeps evicting it before we get to it (memory is that
                        // tight): answer TMPFAIL rather than loop; the client retries.
                        var t = ByteBuffer()
                        t.writeResponseHeader(opcode: frame.opcode, status: .temporaryFailure, opaque: frame.opaque)
                        h.complete(slot, t)
                    default:
                        h.handleAsync(
                            again, frame: frame, engine: engine, settings: settings, infos: infos, slot: slot,
                            response: b, fetchAttempt: fetchAttempt + 1)
                    }
                }
            }
        case .majority(let vb, let seqno, let level, let timeoutMs, let monitor, let copies):
            let ms =
                timeoutMs.map { $0 == 0 ? Limits.durabilityDefaultTimeoutMs : Int($0) }
                ?? Limits.durabilityDefaultTimeoutMs
            let finish: @Sendable (Status?) -> Void = { status in
                loop.execute {
                    let h = handler.value
                    guard slot.buffer == nil else { return }
                    guard let status else { return h.complete(slot, response) }
                    var b = ByteBuffer()
                    b.writeResponseHeader(opcode: frame.opcode, status: status, opaque: frame.opaque)
                    h.complete(slot, b)
                }
            }
            // The write is a prepare: committed (made visible) once its level is met, aborted otherwise.
            let key = Array(frame.key.readableBytesView)
            let id = monitor.wait(
                vb, seqno: seqno, history: engine.seqnoInfo(vb).uuid, majority: copies,
                persistReplicas: level == .persistToMajority, activeHolds: !level.requiresPersistenceOnActive
            ) { ok in
                if ok && engine.commitSyncWrite(vb, key, seqno: seqno) { return finish(nil) }
                if !ok { engine.abortSyncWrite(vb, key, seqno: seqno) }
                finish(.syncWriteAmbiguous)
            }
            if level.requiresPersistenceOnActive {
                engine.waitForPersistence(vb, seqno) { result in
                    switch result {
                    case .success: monitor.activePersisted(vb, id: id)
                    case .failure(let error):
                        if monitor.cancel(vb, id: id) {
                            engine.abortSyncWrite(vb, key, seqno: seqno)
                            finish(error.statusForAppliedWrite)
                        }
                    }
                }
            }
            // Timed out: aborted here, but a replica may hold the prepare and be promoted before the abort
            // reaches it (it would commit it), so the outcome is unknown to the client: ambiguous, as
            // Couchbase answers.
            loop.scheduleTask(in: .milliseconds(Int64(ms))) {
                if monitor.cancel(vb, id: id) {
                    engine.abortSyncWrite(vb, key, seqno: seqno)
                    finish(.syncWriteAmbiguous)
                }
            }
        case .persist(let vb, let seqno, let timeoutMs):
            // A prepare too (no replicas): committed once persisted on this node, aborted otherwise.
            let key = Array(frame.key.readableBytesView)
            let timeout = TimeAmount.milliseconds(Int64(timeoutMs.map { $0 == 0 ? 30_000 : Int($0) } ?? 30_000))
            let timer = loop.scheduleTask(in: timeout) {
                let h = handler.value
                guard slot.buffer == nil else { return }
                engine.abortSyncWrite(vb, key, seqno: seqno)
                var b = ByteBuffer()
                b.writeResponseHeader(opcode: frame.opcode, status: .syncWriteAmbiguous, opaque: frame.opaque)
                h.complete(slot, b)
            }
            engine.waitForPersistence(vb, seqno) { result in
                loop.execute {
                    timer.cancel()
                    let h = handler.value
                    guard slot.buffer == nil else { return }
                    switch result {
                    case .success where engine.commitSyncWrite(vb, key, seqno: seqno):
                        h.complete(slot, response)
                    case .success:
                        var b = ByteBuffer()
                        b.writeResponseHeader(opcode: frame.opcode, status: .syncWriteAmbiguous, opaque: frame.opaque)
                        h.complete(slot, b)
                    case .failure(let error):
                        engine.abortSyncWrite(vb, key, seqno: seqno)
                        h.logger.error(
                            "durable write failed to persist", metadata: ["vb": "\(vb)", "error": "\(error)"])
                        var b = ByteBuffer()
                        b.writeResponse(
                            opcode: frame.opcode, status: error.statusForAppliedWrite, opaque: frame.opaque,
                            datatype: error.messageDatatype, value: error.messageDatatype == 0 ? [] : error.message)
                        h.complete(slot, b)
                    }
                }
            }
        }
    }

    func isMutation(_ op: Opcode) -> Bool {
        if op.isSubdoc { return !op.isSubdocLookup }
        switch op.loud {
        case .set, .add, .replace, .delete, .increment, .decrement, .append, .prepend: return true
        default: return false
        }
    }

    /// Runs one data operation synchronously against the engine and writes its response (if any)
    /// into `b`. Never blocks: an evicted value yields `.wouldBlock` with nothing written.
    func execute(
        _ frame: Frame, engine: BucketEngine, settings: BucketSettings, infos: FrameInfos, into b: inout ByteBuffer
    ) -> Outcome {
        if frame.opcode.isSubdoc {
            return executeSubdoc(frame, engine: engine, settings: settings, infos: infos, into: &b)
        }
        let op = frame.opcode
        let loud = op.loud
        let quiet = op.isQuiet
        let keyLength = frame.key.readableBytes
        let extrasLength = frame.extras.readableBytes
        let valueLength = frame.value.readableBytes

        // Shape checks, as memcached does them: wrong extras/key/value sizes are EINVAL.
        let shapeOK: Bool
        switch loud {
        case .get, .getk, .delete, .getMeta, .getReplica:
            shapeOK =
                (extrasLength == 0 || (loud == .getMeta && extrasLength == 1)) && keyLength > 0 && valueLength == 0
        case .set, .replace:
            shapeOK = extrasLength == 8 && keyLength > 0
        case .add:
            // ADD means "only if absent": a CAS makes no sense with it (kv_engine answers EINVAL).
            shapeOK = extrasLength == 8 && keyLength > 0 && frame.cas == 0
        case .increment, .decrement:
            shapeOK = extrasLength == 20 && keyLength > 0 && valueLength == 0
        case .append, .prepend:
            shapeOK = extrasLength == 0 && keyLength > 0
        case .touch, .gat:
            shapeOK = extrasLength == 4 && keyLength > 0 && valueLength == 0
        case .observeSeqno:
            shapeOK = extrasLength == 0 && keyLength == 0 && valueLength == 8
        default:
            shapeOK = false
        }
        if !shapeOK || keyLength > Limits.maxKeyLength {
            b.writeResponse(
                opcode: op, status: .invalidArguments, opaque: frame.opaque, value: ErrorText.invalidArguments)
            return .done
        }
        // Snappy is not negotiated; XATTR values (section + body, ADR 0029) only from a connection that agreed
        // XATTR (0x06), on SET / ADD / REPLACE, and only with a well-formed section.
        let xattrValue = frame.datatype & Datatype.xattr.rawValue != 0
        if (frame.datatype & ~(Datatype.json.rawValue | Datatype.xattr.rawValue)) != 0
            || (xattrValue && !(state.xattr && (loud == .set || loud == .add || loud == .replace)))
            || (xattrValue
                && XattrBlob.split(frame.value.getBytes(at: frame.value.readerIndex, length: valueLength)!)
                    == nil)
        {
            b.writeResponse(
                opcode: op, status: .invalidArguments, opaque: frame.opaque, value: Array("Invalid datatype".utf8))
            return .done
        }
        let vbNumber = frame.vbucket
        if Int(vbNumber) >= settings.numVBuckets {
            writeNotMyVBucket(frame, bucket: settings.name, into: &b)
            return .done
        }
        let vb = VBucketID(vbNumber)
        // Made only when needed: a GET hit reads the key in place from the frame.
        lazy var key: [UInt8] = keyLength > 0 ? frame.key.getBytes(at: frame.key.readerIndex, length: keyLength)! : []
        let cas = CAS(frame.cas)
        // A durable write that has to wait is applied as a prepare (hidden from readers until committed).
        let syncWrite = infos.durabilityLevel.map { pendingMajority != nil || $0.requiresPersistenceOnActive } ?? false

        do {
            switch loud {
            case .get, .getk:
                node.counters.cmdGet.wrappingAdd(1, ordering: .relaxed)
                // In place under the vBucket lock: the value is copied once, straight into the response.
                let json = state.json
                let includeKey = loud == .getk
                let found = frame.key.withUnsafeReadableBytes { keyBytes in
                    Result { () throws(EngineError) in
                        try engine.withDocument(vb, keyBytes: keyBytes) { value, meta in
                            Self.writeDocument(
                                value: value, meta: meta, json: json, frame: frame, includeKey: includeKey,
                                key: keyBytes, into: &b)
                        }
                    }
                }
                try found.get()
                node.counters.getHits.wrappingAdd(1, ordering: .relaxed)
            case .getReplica:
                let doc = try engine.getReplica(vb, key)
                writeDocument(doc, frame: frame, includeKey: false, key: key, into: &b)
            case .gat:
                node.counters.cmdGet.wrappingAdd(1, ordering: .relaxed)
                let exp = frame.extras.getInteger(at: frame.extras.readerIndex, as: UInt32.self)!
                let doc = try engine.getAndTouch(vb, key, expiry: exp)
                node.counters.getHits.wrappingAdd(1, ordering: .relaxed)
                writeDocument(doc, frame: frame, includeKey: false, key: key, into: &b)
            case .touch:
                let exp = frame.extras.getInteger(at: frame.extras.readerIndex, as: UInt32.self)!
                let r = try engine.touch(vb, key, expiry: exp)
                b.writeResponseHeader(opcode: op, status: .success, opaque: frame.opaque, cas: r.cas.rawValue)
            case .set, .add, .replace:
                node.counters.cmdSet.wrappingAdd(1, ordering: .relaxed)
                let flags = frame.extras.getInteger(at: frame.extras.readerIndex, as: UInt32.self)!
                let exp = frame.extras.getInteger(at: frame.extras.readerIndex + 4, as: UInt32.self)!
                let value = frame.value.getBytes(at: frame.value.readerIndex, length: valueLength)!
                let storeOp: StoreOperation = loud == .set ? .set : (loud == .add ? .add : .replace)
                // A body alone keeps the document's XATTRs; a value with its own section replaces them.
                let r = try engine.store(
                    storeOp, vb, key, value: value, flags: flags, expiry: exp,
                    datatype: Datatype(rawValue: frame.datatype & (Datatype.json.rawValue | Datatype.xattr.rawValue)),
                    cas: cas, preserveExpiry: infos.preserveTTL, syncWrite: syncWrite, preserveXattrs: !xattrValue)
                return mutationDone(frame, r, infos: infos, into: &b)
            case .delete:
                let r = try engine.delete(vb, key, cas: cas, syncWrite: syncWrite)
                return mutationDone(frame, r, infos: infos, into: &b)
            case .append, .prepend:
                let value = frame.value.getBytes(at: frame.value.readerIndex, length: valueLength)!
                let r = try engine.concat(
                    loud == .append ? .append : .prepend, vb, key, value: value, cas: cas, syncWrite: syncWrite)
                return mutationDone(frame, r, infos: infos, into: &b)
            case .increment, .decrement:
                let base = frame.extras.readerIndex
                let delta = frame.extras.getInteger(at: base, as: UInt64.self)!
                let initial = frame.extras.getInteger(at: base + 8, as: UInt64.self)!
                let exp = frame.extras.getInteger(at: base + 16, as: UInt32.self)!
                let (value, r) = try engine.arithmetic(
                    vb, key, delta: delta, initial: initial, expiry: exp, increment: loud == .increment, cas: cas,
                    syncWrite: syncWrite)
                if quiet && infos.durabilityLevel == nil { return .done }
                let extras = state.mutationSeqno ? 16 : 0
                b.writeResponseHeader(
                    opcode: op, status: .success, opaque: frame.opaque, cas: r.cas.rawValue, extrasLength: extras,
                    valueLength: 8)
                if extras > 0 {
                    b.writeInteger(r.token.uuid.rawValue)
                    b.writeInteger(r.token.seqno.rawValue)
                }
                b.writeInteger(value)
                return persistIfNeeded(r, infos: infos)
            case .getMeta:
                let meta = try engine.getMeta(vb, key)
                let version =
                    extrasLength == 1 ? frame.extras.getInteger(at: frame.extras.readerIndex, as: UInt8.self)! : 1
                let extras = version >= 2 ? 21 : 20
                b.writeResponseHeader(
                    opcode: op, status: .success, opaque: frame.opaque, cas: meta.cas.rawValue, extrasLength: extras)
                b.writeInteger(UInt32(meta.deleted ? 1 : 0))
                b.writeInteger(meta.flags)
                b.writeInteger(meta.expiry)
                b.writeInteger(meta.revSeqno.rawValue)
                if version >= 2 { b.writeInteger(state.json ? meta.datatype.rawValue : 0) }
            case .observeSeqno:
                let info = engine.seqnoInfo(vb)
                if info.state != .active && info.state != .replica {
                    writeNotMyVBucket(frame, bucket: settings.name, into: &b)
                    return .done
                }
                let asked = frame.value.getInteger(at: frame.value.readerIndex, as: UInt64.self)!
                let failedOver = asked != info.uuid.rawValue
                b.writeResponseHeader(
                    opcode: op, status: .success, opaque: frame.opaque, valueLength: failedOver ? 43 : 27)
                b.writeInteger(UInt8(failedOver ? 1 : 0))
                b.writeInteger(vb.rawValue)
                b.writeInteger(info.uuid.rawValue)
                b.writeInteger(info.persistedSeqno.rawValue)
                b.writeInteger(info.highSeqno.rawValue)
                if failedOver {
                    // We do not keep the seqno at which an older uuid ended here; report the
                    // asked uuid with seqno 0 so the client treats its write as possibly lost.
                    b.writeInteger(asked)
                    b.writeInteger(UInt64(0))
                }
            default:
                preconditionFailure("execute called with non-data opcode \(op)")
            }
        } catch {
            switch error {
            case .wouldBlock:
                return .wouldBlock(vb, key)
            case .keyNotFound where (loud == .get || loud == .getk || loud == .gat):
                node.counters.getMisses.wrappingAdd(1, ordering: .relaxed)
                if quiet { return .done }
                if loud == .getk {
                    b.writeResponseHeader(
                        opcode: op, status: .keyNotFound, opaque: frame.opaque, keyLength: key.count,
                        valueLength: error.message.count)
                    b.writeBytes(key)
                    b.writeBytes(error.message)
                } else {
                    b.writeResponse(opcode: op, status: .keyNotFound, opaque: frame.opaque, value: error.message)
                }
            case .notMyVBucket:
                writeNotMyVBucket(frame, bucket: settings.name, into: &b)
            case .ioFailure(let reason):
                logger.error(
                    "storage failure", metadata: ["bucket": "\(settings.name)", "vb": "\(vb)", "reason": "\(reason)"])
                b.writeResponse(opcode: op, status: .internalError, opaque: frame.opaque, value: error.message)
            default:
                b.writeResponse(
                    opcode: op, status: error.status, opaque: frame.opaque, datatype: error.messageDatatype,
                    value: error.message)
            }
        }
        return .done
    }

    func mutationDone(_ frame: Frame, _ r: MutationResult, infos: FrameInfos, into b: inout ByteBuffer) -> Outcome {
        if !(frame.opcode.isQuiet && infos.durabilityLevel == nil) {
            let extras = state.mutationSeqno ? 16 : 0
            let cas = frame.opcode.loud == .delete && !state.saidHello ? 0 : r.cas.rawValue
            b.writeResponseHeader(
                opcode: frame.opcode, status: .success, opaque: frame.opaque, cas: cas, extrasLength: extras)
            if extras > 0 {
                b.writeInteger(r.token.uuid.rawValue)
                b.writeInteger(r.token.seqno.rawValue)
            }
        }
        return persistIfNeeded(r, infos: infos)
    }

    func persistIfNeeded(_ r: MutationResult, infos: FrameInfos) -> Outcome {
        if let level = infos.durabilityLevel, let (monitor, majority) = pendingMajority {
            return .majority(
                r.token.vbucket, r.token.seqno, level, timeoutMs: infos.durabilityTimeout, monitor: monitor,
                copies: majority)
        }
        guard let level = infos.durabilityLevel, level.requiresPersistenceOnActive else { return .done }
        return .persist(r.token.vbucket, r.token.seqno, timeoutMs: infos.durabilityTimeout)
    }

    /// A document's GET response: the body only, its XATTR section and the XATTR datatype bit stripped, as
    /// kv_engine answers GET (XATTRs are read with sub-document XATTR paths; ADR 0029).
    static func writeDocument(
        value stored: UnsafeRawBufferPointer, meta: ItemMetadata, json: Bool, frame: Frame, includeKey: Bool,
        key: UnsafeRawBufferPointer, into b: inout ByteBuffer
    ) {
        var value = stored
        var datatype = meta.datatype
        if datatype.contains(.xattr) {
            value = UnsafeRawBufferPointer(rebasing: stored[(XattrSection.length(of: stored) ?? 0)...])
            datatype.remove(.xattr)
        }
        b.writeResponseHeader(
            opcode: frame.opcode, status: .success, opaque: frame.opaque, cas: meta.cas.rawValue,
            datatype: json ? datatype.rawValue : 0,
            extrasLength: 4, keyLength: includeKey ? key.count : 0, valueLength: value.count)
        b.writeInteger(meta.flags)
        if includeKey { b.writeBytes(key) }
        b.writeBytes(value)
    }

    func writeDocument(_ doc: Document, frame: Frame, includeKey: Bool, key: [UInt8], into b: inout ByteBuffer) {
        let json = state.json
        doc.value.withUnsafeBytes { value in
            key.withUnsafeBytes {
                Self.writeDocument(
                    value: value, meta: doc.meta, json: json, frame: frame, includeKey: includeKey, key: $0, into: &b)
            }
        }
    }

    func writeNotMyVBucket(_ frame: Frame, bucket: String, into b: inout ByteBuffer) {
        node.counters.notMyVBucket.wrappingAdd(1, ordering: .relaxed)
        let config = node.registry.terseConfigJSON(bucket: bucket) ?? []
        b.writeResponse(
            opcode: frame.opcode, status: .notMyVBucket, opaque: frame.opaque, datatype: config.isEmpty ? 0 : 1,
            value: config)
    }
}
