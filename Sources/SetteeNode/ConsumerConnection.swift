import Logging
import NIOCore
import NIOPosix
import SetteeAuth
import SetteeCore
import SetteeProtocol
import SetteeStorage
import SetteeStreams
import SetteeTLS
import Synchronization

/// One DCP connection from this node to a source node for one bucket, carrying the streams of every
/// replica vBucket that source is active for. Reconnects with backoff and resumes each stream from the
/// engine's persisted position (rolling back when the producer says so).
///
/// Phases: `idle` ──connect──▶ `handshake(step)` (SASL login, SELECT_BUCKET, DCP_OPEN, CONTROL; one at a
/// time, each waits for its answer) ──▶ `ready` (stream requests for every wanted vBucket) ──connection
/// lost──▶ `idle` + reconnect after `backoff` (doubling, capped).
///
/// Invariants: (1) all mutable state is touched only on `loop`; (2) a vBucket's staged items are applied
/// only by `commitSnapshot`, all at once (`BucketEngine.applySnapshot`); (3) while an apply is refused
/// with TMPFAIL the connection stops reading (`blocked`) and retries, so frames are never reordered; (4) those
/// retries back off and are bounded in count and time (`RefusedApplyRetry`): past the bound the stream is closed,
/// counted and reopened from what storage holds, and the connection reads again (ADR 0074).
final class ConsumerConnection: @unchecked Sendable {
    enum Phase { case idle, handshake(Int), ready, stopped }

    let bucket: String
    let source: NodeID
    let selfNode: NodeID
    let loop: any EventLoop
    let engine: BucketEngine
    let credentials: @Sendable () -> (username: String, password: String)?
    let pool: NIOThreadPool
    let counters: ReplicationCounters
    let logger: Logger
    /// vBuckets whose stream is open, readable from any thread (status).
    let connectedVBs = Mutex<Set<UInt16>>([])

    var host: String
    var port: Int
    /// The source's certificate fingerprint when it is reached on its KV TLS port (nil: plain TCP).
    var tlsPin: String?
    /// The cluster's trusted CAs: a source showing another leaf than `tlsPin` that they vouch for is accepted.
    let authorities: ClusterAuthorities?
    /// The TLS context for `tlsPin`, made at the first connect to it.
    private var tlsContext: (pin: String, context: TLSClientContext)?
    var wanted: Set<UInt16> = []
    var phase: Phase = .idle
    var channel: (any Channel)?
    var streams: [UInt16: VBucketConsumer] = [:]
    /// Key + value bytes staged across `streams` (at most `maxStagedBytes`).
    var stagedBytes = 0
    /// `Limits.dcpConsumerMaxStagedBytes`; tests lower it.
    var maxStagedBytes = Limits.dcpConsumerMaxStagedBytes
    /// Reconnects since the last completed handshake: the next waits `Backoff.doubling` from
    /// `Limits.replicationFirstBackoffMs`.
    var reconnects = 0
    var reconnectTask: Scheduled<Void>?
    var processedBytes = 0
    var blocked = false
    /// The back-off and bound of the retries of a refused apply (invariant 4).
    var applyRetry = RefusedApplyRetry()
    /// vBuckets whose acknowledged positions moved since the last SEQNO_ACKNOWLEDGED write (`sendOwedAcks`).
    var owedAcks = OwedSeqnoAcks()
    weak var handler: ConsumerChannelHandler?
    /// The SCRAM login while the handshake is at its login step (every SASL request of it carries opaque 1).
    var login: SaslClientLogin?
    /// The DCP handshake (the machine the client's change streams use too); a fresh one per connection.
    private var opening: DCPConsumerHandshake

    static let streamOpaqueBase = DCPConsumerHandshake.streamOpaqueBase

    init(
        bucket: String, source: NodeID, selfNode: NodeID, host: String, port: Int, tlsPin: String? = nil,
        loop: any EventLoop,
        engine: BucketEngine, credentials: @escaping @Sendable () -> (username: String, password: String)?,
        pool: NIOThreadPool, counters: ReplicationCounters, logger: Logger, authorities: ClusterAuthorities? = nil
    ) {
        self.authorities = authorities
        self.counters = counters
        self.bucket = bucket
        self.source = source
        self.selfNode = selfNode
        self.host = host
        self.port = port
        self.tlsPin = tlsPin
        self.loop = loop
        self.engine = engine
        self.credentials = credentials
        self.pool = pool
        var logger = logger
        logger[metadataKey: "bucket"] = "\(bucket)"
        logger[metadataKey: "source"] = "\(source)"
        self.logger = logger
        opening = Self.handshakeMachine(bucket: bucket, selfNode: selfNode)
    }

    private static func handshakeMachine(bucket: String, selfNode: NodeID) -> DCPConsumerHandshake {
        // A replica keeps whole values: XATTRs included (ADR 0029).
        DCPConsumerHandshake(
            bucket: bucket, connectionName: DCPNames.replicaPrefix + selfNode.rawValue, authenticates: true,
            openFlags: DCPOpenFlags.producer | DCPOpenFlags.includeXattrs, bufferBytes: Limits.dcpConsumerBufferBytes,
            asksPrepareLevels: true, asksPurgeSeqnos: true)
    }

    // MARK: control (any thread)

    /// Sets the vBuckets to follow from this source; opens or closes streams as needed.
    func update(wanted: Set<UInt16>, host: String, port: Int, tlsPin: String? = nil) {
        loop.execute { self.apply(wanted: wanted, host: host, port: port, tlsPin: tlsPin) }
    }

    func stop() -> EventLoopFuture<Void> {
        loop.submit {
            self.phase = .stopped
            self.reconnectTask?.cancel()
            self.wanted = []
            self.connectedVBs.withLock { $0 = [] }
            return self.channel
        }.flatMap { ch in
            ch?.close() ?? self.loop.makeSucceededVoidFuture()
        }.recover { _ in }
    }

    // MARK: on the loop

    private func apply(wanted: Set<UInt16>, host: String, port: Int, tlsPin: String?) {
        if case .stopped = phase { return }
        let moved = host != self.host || port != self.port || tlsPin != self.tlsPin
        self.host = host
        self.port = port
        self.tlsPin = tlsPin
        let removed = self.wanted.subtracting(wanted)
        self.wanted = wanted
        if moved, let channel {
            channel.close(promise: nil)  // reconnects to the new address
            return
        }
        switch phase {
        case .idle:
            if !wanted.isEmpty && reconnectTask == nil { connect() }
        case .ready:
            for vb in removed { closeStream(vb) }
            for vb in wanted where streams[vb] == nil { openStream(vb) }
        case .handshake, .stopped:
            break
        }
    }

    private func connect() {
        guard case .idle = phase, !wanted.isEmpty else { return }
        phase = .handshake(0)
        let tls: TLSClientContext?
        do { tls = try tlsPin.map(pinnedContext) } catch {
            logger.warning("cannot set up TLS to the source; retrying later", metadata: ["error": "\(error)"])
            disconnected()
            return
        }
        let bootstrap = ClientBootstrap(group: loop)
            .channelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
            .connectTimeout(.seconds(5))
            .channelInitializer { [tls, host] ch in
                ch.eventLoop.makeCompletedFuture {
                    // The source's KV TLS port: its certificate must be the one the cluster document pins.
                    if let tls { try ch.pipeline.syncOperations.addHandler(tls.makeHandler(host: host)) }
                    let h = ConsumerChannelHandler(connection: self)
                    self.handler = h
                    try ch.pipeline.syncOperations.addHandler(h)
                }
            }
        bootstrap.connect(host: host, port: port).whenComplete { result in
            switch result {
            case .success(let ch):
                if case .stopped = self.phase {
                    ch.close(promise: nil)
                    return
                }
                self.channel = ch
                self.handshake()
            case .failure(let error):
                self.logger.debug("replication connect failed", metadata: ["error": "\(error)"])
                self.disconnected()
            }
        }
    }

    private func pinnedContext(_ pin: String) throws -> TLSClientContext {
        if let tlsContext, tlsContext.pin == pin { return tlsContext.context }
        let context = try TLSTrust.pinned(fingerprint: pin).makeClientContext(authorities: authorities)
        tlsContext = (pin, context)
        return context
    }

    private func send(_ body: (inout ByteBuffer) -> Void) {
        guard let channel else { return }
        var b = channel.allocator.buffer(capacity: 64)
        body(&b)
        channel.writeAndFlush(b, promise: nil)
    }

    private func handshake() {
        guard let creds = credentials() else {
            logger.warning("no credentials for replication; retrying later")
            channel?.close(promise: nil)
            return
        }
        phase = .handshake(1)
        opening = Self.handshakeMachine(bucket: bucket, selfNode: selfNode)
        guard opening.connected() == .startLogin else { return }
        // Never PLAIN: the cluster's secret must not cross the network in clear; every node offers SCRAM.
        var login = SaslClientLogin(
            username: creds.username, password: creds.password, allowPlain: false,
            clientNonce: SaslClientLogin.randomNonce())
        let first = login.start()
        self.login = login
        loginStep(first)
    }

    /// Sends the login's next request, or moves on to SELECT_BUCKET once it succeeded.
    private func loginStep(_ directive: SaslClientLogin.Directive) {
        switch directive {
        case .succeeded:
            login = nil
            phase = .handshake(2)
            follow(opening.loggedIn())
        case .failed(let failure):
            login = nil
            logger.warning("replication login refused", metadata: ["reason": "\(failure)"])
            channel?.close(promise: nil)
        case .listMechanisms, .auth, .step:
            guard let request = directive.request else { return }
            send { $0.writeRequest(opcode: Opcode(request.opcode), opaque: 1, key: request.key, value: request.value) }
        }
    }

    /// Feeds a SASL answer to the login. The server's challenge costs a PBKDF2 run: on the blocking pool, not
    /// on the loop that carries every replication stream of this node.
    private func loginAnswer(_ frame: Frame) {
        guard var login else { return }
        let answer = SaslClientLogin.Answer(status: frame.status.rawValue, value: Array(frame.value.readableBytesView))
        guard case .authContinue = answer else {
            let next = login.receive(answer)
            self.login = login
            loginStep(next)
            return
        }
        let sent = channel
        self.login = nil
        let waiting = login
        pool.runIfActive(eventLoop: loop) { () -> (SaslClientLogin, SaslClientLogin.Directive) in
            var login = waiting
            let next = login.receive(answer)
            return (login, next)
        }.whenComplete { result in
            // The connection may have dropped (and another begun) while PBKDF2 ran.
            guard let current = self.channel, let sent, current === sent, case .handshake(1) = self.phase else {
                return
            }
            switch result {
            case .success(let (login, next)):
                self.login = login
                self.loginStep(next)
            case .failure:
                current.close(promise: nil)
            }
        }
    }

    /// A frame from the producer (response or DCP message). Returns false to stop processing (blocked).
    func handle(_ frame: Frame) -> Bool {
        if frame.magic == .clientResponse {
            handleResponse(frame)
            return true
        }
        return handleMessage(frame)
    }

    private func handleResponse(_ frame: Frame) {
        guard case .handshake(let step) = phase, frame.opaque < Self.streamOpaqueBase else {
            if frame.opaque >= Self.streamOpaqueBase { streamResponse(frame) }
            return
        }
        if step == 1, frame.opaque == 1 {
            loginAnswer(frame)
            return
        }
        follow(opening.answer(opaque: frame.opaque, status: frame.status, value: Array(frame.value.readableBytesView)))
    }

    /// Carries out what the handshake machine says after the login.
    private func follow(_ directive: DCPConsumerHandshake.Directive) {
        switch directive {
        case .send(let request):
            phase = .handshake(Int(request.opaque))
            send { $0.writeRequest(request) }
        case .ready:
            phase = .ready
            reconnects = 0
            logger.info("replication connected", metadata: ["streams": "\(wanted.count)"])
            for vb in wanted.sorted() { openStream(vb) }
        case .failed(let refusal):
            logger.warning(
                "replication handshake refused",
                metadata: ["step": "\(refusal.step.rawValue)", "status": "\(refusal.status)"])
            channel?.close(promise: nil)
        case .startLogin, .ignore:
            break
        }
    }

    // MARK: streams

    private func openStream(_ vb: UInt16) {
        let id = VBucketID(vb)
        guard engine.vbucketState(id) == .replica else { return }
        var s = VBucketConsumer(vb: id, engine: engine)
        let directives = s.machine.start()
        streams[vb] = s
        run(vb, directives)
    }

    /// Drops `vb`'s staged items and their share of `stagedBytes`.
    private func clearStaged(_ vb: UInt16) {
        guard let n = streams[vb]?.stagedBytes else { return }
        stagedBytes -= n
        streams[vb]?.staged = []
        streams[vb]?.stagedBytes = 0
    }

    private func closeStream(_ vb: UInt16) {
        guard let s = streams.removeValue(forKey: vb) else { return }
        stagedBytes -= s.stagedBytes
        connectedVBs.withLock { _ = $0.remove(vb) }
        send { $0.writeRequest(opcode: .dcpCloseStream, vbucket: vb, opaque: Self.streamOpaqueBase | UInt32(vb)) }
    }

    private func streamResponse(_ frame: Frame) {
        guard frame.opcode == .dcpStreamRequest else { return }
        let vb = UInt16(truncatingIfNeeded: frame.opaque & 0xffff)
        guard var s = streams[vb] else { return }
        var directives: [ConsumerDirective]
        switch DCPStreamAnswer(status: frame.status, value: frame.value) {
        case .accepted(let log):
            directives = s.machine.accepted(
                producerEntries: log.map { FailoverEntry(uuid: VBucketUUID($0.uuid), seqno: SeqNo($0.seqno)) })
            if case .failed = s.machine.state { break }
            s.open = true
            connectedVBs.withLock { _ = $0.insert(vb) }
        case .rollback(let to):
            directives = s.machine.rollbackRequested(to: SeqNo(to))
        case .notMyVBucket, .refused:
            logger.debug("stream request refused", metadata: ["vb": "\(vb)", "status": "\(frame.status)"])
            directives = s.machine.streamEnd(.closed)
        }
        streams[vb] = s
        run(vb, directives)
    }

    private func handleMessage(_ frame: Frame) -> Bool {
        let size = Frame.headerLength + frame.bodyLength
        defer { countProcessed(size) }
        let vb = frame.vbucket
        let message: DCPMessage
        do { message = try DCPMessage(frame, maxKeyLength: Limits.maxKeyLength) } catch {
            // Skipping it could skip a change: drop the connection, streams resume from what storage holds.
            logger.warning("malformed DCP message from producer; reconnecting", metadata: ["error": "\(error)"])
            channel?.close(promise: nil)
            return false
        }
        switch message {
        case .noop:
            send { $0.writeResponseHeader(opcode: .dcpNoop, status: .success, opaque: frame.opaque) }
            return true
        case .setVBucketState:
            send { $0.writeResponseHeader(opcode: .dcpSetVBucketState, status: .success, opaque: frame.opaque) }
            return true
        case .snapshotMarker(let m):
            let marker = SnapshotMarker(
                start: SeqNo(m.start), end: SeqNo(m.end), source: m.isMemory ? .memory : .disk,
                purgeSeqno: SeqNo(m.purgeSeqno))
            return step(vb) { $0.snapshotMarker(marker) }
        case .change(let change):
            let item = VBucketConsumer.item(change)
            return step(vb) { $0.item(item) }
        case .streamEnd(let flag):
            return step(vb) { $0.streamEnd(StreamEndReason(wireFlag: flag)) }
        case .seqnoAdvanced, .systemEvent, .other:
            return true
        }
    }

    /// Feeds one event to a stream's machine and runs its directives. False when an apply is blocked.
    private func step(_ vb: UInt16, _ event: (inout StreamConsumer) -> [ConsumerDirective]) -> Bool {
        // In place: a copy of the stream held here would make every staged append copy the staged array.
        guard let directives = streams[vb]?.step(event) else { return true }
        return run(vb, directives)
    }

    /// Interprets directives in order. Returns false when a commit was refused (TMPFAIL): the remaining
    /// directives are kept and retried, and the connection stops reading until they went through.
    @discardableResult
    private func run(_ vb: UInt16, _ directives: [ConsumerDirective]) -> Bool {
        let id = VBucketID(vb)
        for (i, d) in directives.enumerated() {
            switch d {
            case .sendRequest(let r):
                sendStreamRequest(r)
            case .persistFailoverLog(let log):
                do { try engine.adoptFailoverLog(id, log) } catch {
                    logger.notice("cannot adopt failover log", metadata: ["vb": "\(vb)", "error": "\(error)"])
                }
            case .rollBack(let to):
                rollBack(vb, to: to)
            case .persistResumePoint:
                break  // the engine's high seqno and failover log are the resume point
            case .stage(let item):
                counters.itemsReceived.wrappingAdd(1, ordering: .relaxed)
                let n = item.key.count + item.value.count
                guard stagedBytes + n <= maxStagedBytes else {
                    // Each snapshot is bounded by the machine; this bounds them all at once (a producer holding a
                    // snapshot open on every vBucket).
                    logger.warning(
                        "replica streams staged past the connection's bound; closing stream",
                        metadata: ["vb": "\(vb)", "staged": "\(stagedBytes)"])
                    clearStaged(vb)
                    closeStream(vb)
                    reopenLater(vb)
                    return true
                }
                stagedBytes += n
                streams[vb]?.stagedBytes += n
                streams[vb]?.staged.append(VBucketConsumer.record(item))
            case .commitSnapshot(let marker, _):
                guard commit(vb, marker) else { return retryLater(vb, Array(directives[i...])) }
            case .discardStaged:
                clearStaged(vb)
            case .close(let violation):
                logger.warning("stream contract broken; reopening", metadata: ["vb": "\(vb)", "why": "\(violation)"])
                closeStream(vb)
                reopenLater(vb)
            case .finished(let reason):
                if let s = streams.removeValue(forKey: vb) { stagedBytes -= s.stagedBytes }
                connectedVBs.withLock { _ = $0.remove(vb) }
                if reason != .reachedEnd { reopenLater(vb) }
            }
        }
        return true
    }

    private func sendStreamRequest(_ r: StreamRequest) {
        let x = DCPExtras.StreamRequest(
            start: r.start.rawValue, end: r.end.rawValue, uuid: r.uuid.rawValue, snapStart: r.snapStart.rawValue,
            snapEnd: r.snapEnd.rawValue)
        guard let channel else { return }
        var b = channel.allocator.buffer(capacity: 80)
        // Header by hand: writeRequest takes extras as an array; this one is built in place.
        var extras = ByteBuffer()
        x.write(to: &extras)
        b.writeRequest(
            opcode: .dcpStreamRequest, vbucket: r.vbucket.rawValue,
            opaque: Self.streamOpaqueBase | UInt32(r.vbucket.rawValue), extras: Array(extras.readableBytesView))
        channel.writeAndFlush(b, promise: nil)
    }

    private func commit(_ vb: UInt16, _ marker: SnapshotMarker) -> Bool {
        guard let s = streams[vb] else { return true }
        let id = VBucketID(vb)
        let holdsPrepare = s.staged.contains { $0.prepare }
        let needsPersistence =
            holdsPrepare && ReplicaAcks.needsPersistence(s.staged, levelsTrusted: opening.producerSendsLevels)
        do {
            try engine.applySnapshot(id, end: marker.end, items: s.staged, purgeSeqno: marker.purgeSeqno)
        } catch .temporaryFailure {
            return false
        } catch {
            logger.notice("replica apply refused; closing stream", metadata: ["vb": "\(vb)", "error": "\(error)"])
            clearStaged(vb)
            closeStream(vb)
            if error != .notMyVBucket { reopenLater(vb) }  // resume from what storage holds
            return true
        }
        clearStaged(vb)
        applyRetry.applied()
        counters.snapshotsApplied.wrappingAdd(1, ordering: .relaxed)
        guard marker.source == .memory,
            let announcement = streams[vb]?.acks.heldInMemory(
                marker.end, holdsPrepare: holdsPrepare, needsPersistence: needsPersistence),
            announcement != .none
        else { return true }
        sendAck(vb)
        if announcement == .memoryThenPersisted {
            let end = marker.end
            engine.waitForPersistence(id, end) { result in
                guard case .success = result else { return }
                self.loop.execute {
                    guard self.streams[vb]?.acks.persistedThrough(end) == true else { return }
                    self.sendAck(vb)
                }
            }
        }
        return true
    }

    /// Owes `vb`'s positions to the producer: sent with every other vBucket's owed in this tick (ADR 0055).
    private func sendAck(_ vb: UInt16) {
        guard owedAcks.owe(vb) else { return }
        loop.execute { self.sendOwedAcks() }
    }

    /// One SEQNO_ACKNOWLEDGED per owed vBucket, carrying what its stream holds now, all in one write.
    private func sendOwedAcks() {
        let vbs = owedAcks.take()
        guard let channel, !vbs.isEmpty else { return }
        var b = channel.allocator.buffer(capacity: vbs.count * (Frame.headerLength + 16))
        for vb in vbs {
            guard let s = streams[vb] else { continue }
            var extras: [UInt8] = []
            withUnsafeBytes(of: s.acks.memory.rawValue.bigEndian) { extras += $0 }
            withUnsafeBytes(of: s.acks.persisted.rawValue.bigEndian) { extras += $0 }
            b.writeRequest(opcode: .dcpSeqnoAcknowledged, vbucket: vb, extras: extras)
        }
        if b.readableBytes > 0 { channel.writeAndFlush(b, promise: nil) }
    }

    /// Retries a refused apply (with the rest of its directives) after `applyRetry`'s back-off, the connection
    /// not reading meanwhile; false then. Past the bound (true: the connection reads on) the stream is closed
    /// with its staged items, counted, and reopened from what storage holds, as after any failure.
    private func retryLater(_ vb: UInt16, _ directives: [ConsumerDirective]) -> Bool {
        switch applyRetry.refused(nowNanos: NIODeadline.now().uptimeNanoseconds) {
        case .retry(let delayMs):
            blocked = true
            loop.scheduleTask(in: .milliseconds(delayMs)) {
                guard self.blocked else { return }
                self.blocked = false
                if self.run(vb, directives) { self.handler?.resume() }
            }
            return false
        case .giveUp:
            counters.applyRetriesExhausted.wrappingAdd(1, ordering: .relaxed)
            logger.warning(
                "replica apply refused (TMPFAIL) past the retry bound; closing stream",
                metadata: [
                    "vb": "\(vb)", "attempts": "\(Limits.replicaApplyRetryMaxAttempts)",
                    "ms": "\(Limits.replicaApplyRetryMaxMs)",
                ])
            clearStaged(vb)
            closeStream(vb)
            reopenLater(vb)
            return true
        }
    }

    private func rollBack(_ vb: UInt16, to: SeqNo) {
        let engine = self.engine
        let logger = self.logger
        pool.submit { _ in
            let reached: SeqNo
            do { reached = try engine.rollback(VBucketID(vb), to: to) } catch {
                logger.error("replica rollback failed", metadata: ["vb": "\(vb)", "error": "\(error)"])
                return
            }
            self.counters.rollbacks.wrappingAdd(1, ordering: .relaxed)
            self.loop.execute {
                guard var s = self.streams[vb], case .rollingBack = s.machine.state else { return }
                let directives = s.machine.rolledBack(to: reached)
                self.stagedBytes -= s.stagedBytes
                s.staged = []
                s.stagedBytes = 0
                self.streams[vb] = s
                self.run(vb, directives)
            }
        }
    }

    private func reopenLater(_ vb: UInt16) {
        loop.scheduleTask(in: .milliseconds(100)) {
            guard case .ready = self.phase, self.wanted.contains(vb), self.streams[vb] == nil else { return }
            self.openStream(vb)
        }
    }

    private func countProcessed(_ n: Int) {
        processedBytes += n
        if processedBytes >= Limits.dcpConsumerBufferBytes / 4 {
            var extras: [UInt8] = []
            withUnsafeBytes(of: UInt32(processedBytes).bigEndian) { extras += $0 }
            processedBytes = 0
            send { $0.writeRequest(opcode: .dcpBufferAcknowledgement, extras: extras) }
        }
    }

    func disconnected() {
        channel = nil
        handler = nil
        blocked = false
        applyRetry.applied()
        for vb in Array(streams.keys) {
            _ = step(vb) { $0.streamEnd(.disconnected) }
        }
        streams = [:]
        stagedBytes = 0
        connectedVBs.withLock { $0 = [] }
        processedBytes = 0
        if case .stopped = phase { return }
        phase = .idle
        guard !wanted.isEmpty else { return }
        let delay = Backoff.doubling(
            Limits.replicationFirstBackoffMs, attempt: reconnects, cap: Limits.replicationMaxBackoffMs)
        reconnects = min(reconnects + 1, Int64.bitWidth)
        reconnectTask = loop.scheduleTask(in: .milliseconds(delay)) {
            self.reconnectTask = nil
            self.connect()
        }
    }
}

/// Decodes frames from the producer and hands them to the connection, pausing while it is blocked.
final class ConsumerChannelHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    let connection: ConsumerConnection
    var inbound = ByteBuffer()
    var context: ChannelHandlerContext?

    init(connection: ConsumerConnection) { self.connection = connection }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var b = unwrapInboundIn(data)
        inbound.writeBuffer(&b)
        process()
    }

    func resume() {
        guard let context else { return }
        context.channel.setOption(ChannelOptions.autoRead, value: true).whenComplete { _ in }
        process()
        context.read()
    }

    private func process() {
        while !connection.blocked {
            let frame: Frame?
            do { frame = try FrameDecoder.decode(&inbound, maxBodyLength: Limits.maxFrameBodySize) } catch {
                connection.logger.warning("malformed frame from producer", metadata: ["error": "\(error)"])
                context?.close(promise: nil)
                return
            }
            guard let frame else { break }
            if !connection.handle(frame) { break }
        }
        if connection.blocked {
            context?.channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in }
        }
        if inbound.readerIndex > 1 << 20 { inbound.discardReadBytes() }
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.context = nil
        connection.disconnected()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        connection.logger.debug("replication connection error", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }
}
