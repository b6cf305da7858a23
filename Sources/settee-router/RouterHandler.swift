import Logging
import NIOConcurrencyHelpers
import NIOCore
import SetteeAuth
import SetteeClient
import SetteeCore
import SetteeProtocol
import SetteeTLS

/// Router-wide counters, shown by STAT.
final class RouterStats: Sendable {
    let connections = NIOLockedValueBox(0)
    let totalConnections = NIOLockedValueBox(0)
    let requests = NIOLockedValueBox(0)
    let forwarded = NIOLockedValueBox(0)
    let errors = NIOLockedValueBox(0)
    /// Connections closed at once because `RouterConfig.maxConnections` were open.
    let rejectedConnections = NIOLockedValueBox(0)
    /// Connections closed because they had not authenticated within `RouterConfig.handshakeDeadline`.
    let handshakeTimeouts = NIOLockedValueBox(0)

    func add(_ box: NIOLockedValueBox<Int>, _ n: Int = 1) { box.withLockedValue { $0 += n } }
}

/// What the router was started with.
struct RouterConfig: Sendable {
    var username: String?
    var password: String?
    /// What the router's clients log in against (SCRAM keys of `username`/`password`).
    var login: RouterLogin
    var requireAuth: Bool
    var bucket: String
    var operationTimeoutMs: Int
    /// The smart client's TLS context, for the admin call FLUSH makes over HTTPS (nil: plain HTTP).
    var tls: TLSClientContext?
    /// The admin port FLUSH runs the bucket's cluster-wide `doFlush` on (the first `http://` seed); nil when
    /// the router was given KV seeds only, and then FLUSH is refused.
    var flushVia: NodeAddress?
    /// With `requireAuth`, how long a client connection has to authenticate before it is closed (zero: no
    /// deadline). `Limits.kvHandshakeDeadlineSeconds` unless `--handshake-timeout` says otherwise.
    var handshakeDeadline: TimeAmount = .seconds(Limits.kvHandshakeDeadlineSeconds)
    /// Client connections open at once; one more is closed as soon as it is accepted (`Limits.maxConnections`,
    /// fitted to the process's descriptor limit, unless `--max-connections` says otherwise).
    var maxConnections = Limits.maxConnections
}

/// One client connection of the router: decodes memcached-binary requests, answers session commands
/// itself, forwards keyed ones through `BucketClient`, and writes responses **in request order** with
/// the client's opaque.
///
/// Each request gets a slot in `queue` when it is read; a slot is filled when its answer is known
/// (at once for local commands, later for forwarded ones) and the filled prefix of the queue is
/// written out. Quiet commands whose answer is suppressed fill their slot with nothing.
///
/// Back-pressure: frames are taken from `inbound` only while the connection holds little for its client. Taking
/// them stops (and reading with it) while `ClientLimits.routerMaxForwardsInFlight` requests wait for the cluster,
/// `ClientLimits.routerMaxPendingPerConnection` slots are queued, more than `Limits.kvMaxQueuedResponseBytes` of
/// answers wait behind an unanswered one, or the socket is past its high-water mark (`isWritable` false: a client
/// that does not read); it resumes once all four are back under half (the socket: writable again).
///
/// Invariants: 1. slots leave the queue only from the front and only when filled, so responses keep
/// request order; 2. all state is touched on the channel's event loop only; 3. `queuedBytes` is the sum of
/// the filled slots' responses still in `queue`, `inFlight` the number of slots waiting for the cluster.
final class RouterHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private struct Slot {
        var filled = false
        var response = ByteBuffer()
        var closeAfter = false
    }

    private let client: BucketClient
    private let config: RouterConfig
    private let stats: RouterStats
    private let logger: Logger
    private var inbound = ByteBuffer()
    private var queue = CircularBuffer<Slot>(initialCapacity: 64)
    /// Sequence number of `queue[0]`.
    private var head = 0
    private var authenticated = false
    /// A client's SCRAM exchange between SASL_AUTH and SASL_STEP.
    private var scram: ScramServer?
    private var mutationSeqno = false
    private var json = false
    /// Whether the client said HELLO: a node answers DELETE with CAS 0 to clients that did not (memcached's
    /// rule), and the router's own HELLO to the node must not change what its client sees.
    private var saidHello = false
    private var closing = false
    /// Frames are not taken from `inbound` (nor read) until the connection's queue drains (see the type's doc).
    private var paused = false
    /// Whether the channel has autoRead on (off while `paused`).
    private var autoReading = true
    /// Set while `processInbound` runs: an answer written from inside it may turn the channel writable again,
    /// and the resume that follows must not start a second pass over `inbound`.
    private var processing = false
    /// Bytes of filled responses still in `queue` (behind a slot that waits for the cluster).
    private var queuedBytes = 0
    /// Slots waiting for the cluster (forwards and FLUSHes).
    private var inFlight = 0
    /// With `config.requireAuth`: closes the connection if it has not authenticated in time.
    private var handshakeTimer: Scheduled<Void>?

    init(client: BucketClient, config: RouterConfig, stats: RouterStats, logger: Logger) {
        self.client = client
        self.config = config
        self.stats = stats
        self.logger = logger
    }

    func channelActive(context: ChannelHandlerContext) {
        let open = stats.connections.withLockedValue {
            $0 += 1
            return $0
        }
        stats.add(stats.totalConnections)
        if open > config.maxConnections {
            stats.add(stats.rejectedConnections)
            close(
                context: context, level: .warning, "too many connections, closing",
                ["limit": "\(config.maxConnections)"])
        } else if config.requireAuth && config.handshakeDeadline > .zero {
            handshakeTimer = context.eventLoop.assumeIsolated().scheduleTask(in: config.handshakeDeadline) {
                self.handshakeDeadlinePassed(context: context)
            }
        }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        stats.add(stats.connections, -1)
        closing = true
        handshakeTimer?.cancel()
        handshakeTimer = nil
        context.fireChannelInactive()
    }

    /// Closes a connection that has not authenticated in time (only with `requireAuth`): an idle or half-sent
    /// stranger must not hold a descriptor.
    private func handshakeDeadlinePassed(context: ChannelHandlerContext) {
        handshakeTimer = nil
        guard !authenticated, !closing else { return }
        stats.add(stats.handshakeTimeouts)
        close(
            context: context, level: .info, "closing connection that did not authenticate in time",
            ["deadline": "\(config.handshakeDeadline)"])
    }

    /// Logs why, with the peer's address, and closes the connection without an answer.
    private func close(
        context: ChannelHandlerContext, level: Logger.Level, _ why: Logger.Message, _ metadata: Logger.Metadata
    ) {
        var metadata = metadata
        metadata["remote"] = "\(context.remoteAddress.map { "\($0)" } ?? "?")"
        logger.log(level: level, why, metadata: metadata)
        closing = true
        inbound = ByteBuffer()
        context.close(promise: nil)
    }

    private func didAuthenticate() {
        authenticated = true
        handshakeTimer?.cancel()
        handshakeTimer = nil
    }

    /// The largest frame body accepted now: with `requireAuth`, a connection that has not authenticated may send
    /// only what a login needs (`Limits.kvUnauthenticatedMaxFrameBody`, as a node's stranger).
    private var maxBody: Int {
        config.requireAuth && !authenticated ? Limits.kvUnauthenticatedMaxFrameBody : Limits.maxFrameBodySize
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !closing else { return }
        var bytes = unwrapInboundIn(data)
        if inbound.readableBytes == 0 { inbound = bytes } else { inbound.writeBuffer(&bytes) }
        processInbound(context: context)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        resumeIfDrained(context: context)
        context.fireChannelWritabilityChanged()
    }

    /// Takes frames from `inbound` until it holds no whole frame or the connection must stop (see the type's doc).
    private func processInbound(context: ChannelHandlerContext) {
        guard !processing else { return }
        processing = true
        defer { processing = false }
        while !closing {
            if mustPause(context: context) {
                paused = true
                applyReadInterest(context: context)
                break
            }
            let frame: Frame?
            do {
                frame = try FrameDecoder.decode(&inbound, maxBodyLength: maxBody)
            } catch {
                switch error {
                case .bodyTooLarge(let h) where h.bodyLength <= Limits.maxFrameBodySize:
                    // Only a stranger's limit is this small: no answer, as a node closes on one.
                    close(
                        context: context, level: .notice,
                        "closing connection that sent a large frame before authenticating",
                        ["bodyLength": "\(h.bodyLength)"])
                case .bodyTooLarge(let h):
                    let seq = enqueue()
                    var b = context.channel.allocator.buffer(capacity: 64)
                    b.writeResponse(
                        opcode: h.opcode, status: .valueTooLarge, opaque: h.opaque, value: Array("Too large".utf8))
                    inbound = ByteBuffer()
                    fill(seq, b, context: context, closeAfter: true)
                    // Nothing after it is read: the connection closes once the answers before it are out.
                    closing = true
                default:
                    close(
                        context: context, level: .notice, "malformed request stream, closing connection",
                        ["error": "\(error)"])
                }
                return
            }
            guard let frame else { break }
            stats.add(stats.requests)
            handle(frame, context: context)
        }
        if inbound.readableBytes == 0 {
            inbound = ByteBuffer()
        } else if inbound.readerIndex > 64 * 1024 {
            inbound.discardReadBytes()
        }
    }

    private func mustPause(context: ChannelHandlerContext) -> Bool {
        queue.count >= ClientLimits.routerMaxPendingPerConnection || inFlight >= ClientLimits.routerMaxForwardsInFlight
            || queuedBytes > Limits.kvMaxQueuedResponseBytes || !context.channel.isWritable
    }

    /// Takes frames again once everything that paused the connection is back under half (the socket: writable).
    private func resumeIfDrained(context: ChannelHandlerContext) {
        guard paused, !closing, context.channel.isWritable,
            queue.count < ClientLimits.routerMaxPendingPerConnection / 2,
            inFlight <= ClientLimits.routerMaxForwardsInFlight / 2,
            queuedBytes <= Limits.kvMaxQueuedResponseBytes / 2
        else { return }
        paused = false
        processInbound(context: context)
        applyReadInterest(context: context)
    }

    private func applyReadInterest(context: ChannelHandlerContext) {
        let want = !paused
        guard want != autoReading else { return }
        autoReading = want
        context.channel.setOption(ChannelOptions.autoRead, value: want).whenComplete { _ in }
        if want { context.read() }
    }

    private func enqueue() -> Int {
        queue.append(Slot())
        return head + queue.count - 1
    }

    /// Fills slot `seq` and writes out every filled slot at the front of the queue.
    private func fill(_ seq: Int, _ response: ByteBuffer, context: ChannelHandlerContext, closeAfter: Bool = false) {
        let offset = seq - head
        guard offset >= 0, offset < queue.count else { return }
        let i = queue.index(queue.startIndex, offsetBy: offset)
        queue[i].filled = true
        queue[i].response = response
        queue[i].closeAfter = closeAfter
        queuedBytes += response.readableBytes
        var wrote = false
        var close = false
        while let first = queue.first, first.filled {
            queue.removeFirst()
            head += 1
            queuedBytes -= first.response.readableBytes
            if first.response.readableBytes > 0 {
                context.write(wrapOutboundOut(first.response), promise: nil)
                wrote = true
            }
            if first.closeAfter {
                close = true
                break
            }
        }
        // Set before the flush: a flush that turns the channel writable must not resume taking frames.
        if close { closing = true }
        if wrote || close { context.flush() }
        if close {
            context.close(promise: nil)
            return
        }
        resumeIfDrained(context: context)
    }

    private func reply(
        _ frame: Frame, _ status: Status, value: [UInt8] = [], key: [UInt8] = [], context: ChannelHandlerContext
    ) {
        let seq = enqueue()
        var b = context.channel.allocator.buffer(capacity: 24 + value.count + key.count)
        b.writeResponseHeader(
            opcode: frame.opcode, status: status, opaque: frame.opaque, keyLength: key.count, valueLength: value.count)
        b.writeBytes(key)
        b.writeBytes(value)
        fill(seq, b, context: context)
    }

    private func handle(_ frame: Frame, context: ChannelHandlerContext) {
        switch frame.opcode {
        case .noop:
            reply(frame, .success, context: context)
        case .version:
            reply(frame, .success, value: Array("settee-router 1.0".utf8), context: context)
        case .quit:
            let seq = enqueue()
            var b = context.channel.allocator.buffer(capacity: 24)
            b.writeResponseHeader(opcode: .quit, status: .success, opaque: frame.opaque)
            fill(seq, b, context: context, closeAfter: true)
        case .quitq:
            fill(enqueue(), ByteBuffer(), context: context, closeAfter: true)
        case .hello:
            saidHello = true
            var requested = frame.value
            var agreed: [UInt8] = []
            while let code = requested.readInteger(as: UInt16.self) {
                switch HelloFeature(code) {
                case .mutationSeqno: mutationSeqno = true
                case .json: json = true
                case .tcpNoDelay, .xerror: break
                default: continue
                }
                agreed += [UInt8(code >> 8), UInt8(code & 0xff)]
            }
            reply(frame, .success, value: agreed, context: context)
        case .saslListMechs:
            reply(frame, .success, value: Array(RouterLogin.mechanisms.utf8), context: context)
        case .saslAuth, .saslStep:
            sasl(frame, context: context)
        case .selectBucket:
            reply(frame, String(buffer: frame.key) == config.bucket ? .success : .accessDenied, context: context)
        case .stat:
            // The router's counters and its node's address are not a stranger's business (a node refuses STAT to a
            // connection that has not logged in, as kv_engine does).
            if config.requireAuth && !authenticated {
                reply(frame, .accessDenied, context: context)
            } else {
                stat(frame, context: context)
            }
        case .verbosity:
            reply(frame, .success, context: context)
        case .flush, .flushq:
            if config.requireAuth && !authenticated {
                reply(frame, .accessDenied, context: context)
            } else {
                flush(frame, context: context)
            }
        default:
            if config.requireAuth && !authenticated {
                reply(frame, .accessDenied, context: context)
            } else if frame.key.readableBytes == 0 || frame.key.readableBytes > Limits.maxKeyLength {
                reply(frame, frame.key.readableBytes == 0 ? .notSupported : .invalidArguments, context: context)
            } else {
                forward(frame, context: context)
            }
        }
    }

    /// FLUSH empties the whole bucket on every node, as the admin API's `doFlush` does (a node-local flush
    /// through a router that spreads keys over all nodes would empty a part of it). Delayed flushes (a
    /// non-zero expiration in the extras) are refused.
    private func flush(_ frame: Frame, context: ChannelHandlerContext) {
        let delay = frame.extras.getInteger(at: frame.extras.readerIndex, as: UInt32.self) ?? 0
        guard delay == 0 else {
            reply(frame, .notSupported, value: Array("delayed flush is not supported".utf8), context: context)
            return
        }
        guard let via = config.flushVia else {
            let why = "FLUSH through settee-router needs an http:// seed (it runs the bucket's cluster-wide doFlush)"
            reply(frame, .notSupported, value: Array(why.utf8), context: context)
            return
        }
        let seq = enqueue()
        inFlight += 1
        let opcode = frame.opcode
        let opaque = frame.opaque
        let config = self.config
        let promise = context.eventLoop.makePromise(of: ByteBuffer.self)
        promise.completeWithTask {
            let path = "/pools/default/buckets/\(PercentEncoding.encode(config.bucket))/controller/doFlush"
            let (status, message): (Status, String)
            do {
                let r = try await AdminHTTP.request(
                    .POST, path, at: via, username: config.username, password: config.password,
                    timeoutMs: config.operationTimeoutMs, tls: config.tls)
                switch r.status {
                case 200: (status, message) = (.success, "")
                case 400, 404: (status, message) = (.notSupported, "flush refused: \(r.text)")
                case 401, 403: (status, message) = (.accessDenied, "flush refused: \(r.text)")
                default: (status, message) = (.internalError, "flush failed: HTTP \(r.status) \(r.text)")
                }
            } catch {
                (status, message) = (.temporaryFailure, "flush failed: \(error)")
            }
            var b = ByteBuffer()
            if !(opcode == .flushq && status == .success) {
                b.writeResponse(opcode: opcode, status: status, opaque: opaque, value: Array(message.utf8))
            }
            return b
        }
        promise.futureResult.assumeIsolated().whenSuccess { out in
            self.inFlight -= 1
            self.fill(seq, out, context: context)
        }
    }

    /// SASL_AUTH / SASL_STEP against `config.login`: SCRAM runs `ScramServer` (a new SASL_AUTH restarts it), PLAIN
    /// is one constant-time compare.
    private func sasl(_ frame: Frame, context: ChannelHandlerContext) {
        let mechanism = String(buffer: frame.key)
        let message = Array(frame.value.readableBytesView)
        guard let hash = ScramHash(mechanism: mechanism) else {
            scram = nil
            let ok = frame.opcode == .saslAuth && mechanism == "PLAIN" && config.login.checkPlain(message)
            if ok { didAuthenticate() }
            reply(frame, ok ? .success : .authError, context: context)
            return
        }
        if frame.opcode == .saslAuth {
            var server = ScramServer(hash: hash)
            let user = ScramServer.username(inClientFirst: message) ?? ""
            let answer = server.receiveClientFirst(
                message, keys: config.login.keys(user: user, hash: hash),
                decoy: config.login.decoy(user: user, hash: hash), serverNonce: SaslClientLogin.randomNonce())
            guard case .challenge(let serverFirst) = answer else {
                scram = nil
                reply(frame, .authError, context: context)
                return
            }
            scram = server
            reply(frame, .authContinue, value: serverFirst, context: context)
            return
        }
        guard var server = scram, server.hash == hash else {
            reply(frame, .authError, context: context)
            return
        }
        scram = nil
        guard case .success(_, let serverFinal) = server.receiveClientFinal(message) else {
            reply(frame, .authError, context: context)
            return
        }
        didAuthenticate()
        reply(frame, .success, value: serverFinal, context: context)
    }

    private func stat(_ frame: Frame, context: ChannelHandlerContext) {
        let seq = enqueue()
        var b = context.channel.allocator.buffer(capacity: 512)
        let rev = client.configRevision.map { "\($0)" } ?? "none"
        let pairs: [(String, String)] = [
            ("router_bucket", config.bucket),
            ("curr_connections", String(stats.connections.withLockedValue { $0 })),
            ("total_connections", String(stats.totalConnections.withLockedValue { $0 })),
            ("cmd_total", String(stats.requests.withLockedValue { $0 })),
            ("cmd_forwarded", String(stats.forwarded.withLockedValue { $0 })),
            ("router_errors", String(stats.errors.withLockedValue { $0 })),
            ("rejected_conns", String(stats.rejectedConnections.withLockedValue { $0 })),
            ("handshake_timeouts", String(stats.handshakeTimeouts.withLockedValue { $0 })),
            ("cluster_map_rev", rev),
        ]
        for (k, v) in pairs {
            b.writeResponseHeader(
                opcode: .stat, status: .success, opaque: frame.opaque, keyLength: k.utf8.count,
                valueLength: v.utf8.count)
            b.writeString(k)
            b.writeString(v)
        }
        b.writeResponseHeader(opcode: .stat, status: .success, opaque: frame.opaque)
        fill(seq, b, context: context)
    }

    private func forward(_ frame: Frame, context: ChannelHandlerContext) {
        let seq = enqueue()
        inFlight += 1
        let original = frame.opcode
        let quiet = original.isQuiet
        let request = RequestFrame(
            opcode: original.loud, cas: frame.cas, datatype: frame.datatype, framingExtras: frame.framingExtras,
            extras: frame.extras, key: frame.key, value: frame.value)
        let opaque = frame.opaque
        let stats = self.stats
        let keepSeqno = mutationSeqno
        let keepJSON = json
        let zeroDeleteCAS = !saidHello
        stats.add(stats.forwarded)
        // `forward` writes to a ready node connection before returning, so requests keep their order
        // per node; the response is rendered off this loop and handed back to it.
        client.forward(request, timeoutMs: config.operationTimeoutMs)
            .map { r -> ByteBuffer in
                if r.status != .success && r.status != .keyNotFound { stats.add(stats.errors) }
                return RouterHandler.rewrite(
                    r, opcode: original, opaque: opaque, quiet: quiet, keepSeqno: keepSeqno, keepJSON: keepJSON,
                    zeroDeleteCAS: zeroDeleteCAS)
            }
            .recover { error -> ByteBuffer in
                stats.add(stats.errors)
                let (status, message) = RouterHandler.status(for: error)
                var b = ByteBuffer()
                b.writeResponse(opcode: original, status: status, opaque: opaque, value: Array(message.utf8))
                return b
            }
            .hop(to: context.eventLoop)
            .assumeIsolated()
            .whenSuccess { out in
                self.inFlight -= 1
                self.fill(seq, out, context: context)
            }
    }

    static func status(for error: any Error) -> (Status, String) {
        guard let e = error as? ClientError else { return (.internalError, "\(error)") }
        switch e {
        case .timeout, .noActiveNode, .temporaryFailure: return (.temporaryFailure, e.description)
        case .ambiguous: return (.internalError, e.description)
        default: return (.internalError, e.description)
        }
    }

    /// The node's response as the router's client expects it: its opcode and opaque, no framing extras,
    /// mutation extras only if it negotiated MutationSeqno, datatype only if it negotiated JSON; empty
    /// (no response) for a quiet command's success, or a quiet get's miss; a DELETE's CAS is 0 for a client
    /// that did not say HELLO, as a node answers such a client itself.
    static func rewrite(
        _ r: Frame, opcode: Opcode, opaque: UInt32, quiet: Bool, keepSeqno: Bool, keepJSON: Bool,
        zeroDeleteCAS: Bool = false
    ) -> ByteBuffer {
        let loud = opcode.loud
        let isGet = loud == .get || loud == .getk || loud == .gat
        if quiet {
            if isGet && r.status == .keyNotFound { return ByteBuffer() }
            if !isGet && r.status == .success { return ByteBuffer() }
        }
        var extras = r.extras
        if r.status == .success && !isGet && !keepSeqno && extras.readableBytes == 16 { extras = ByteBuffer() }
        let datatype = keepJSON ? r.datatype : 0
        var b = ByteBuffer()
        b.reserveCapacity(24 + extras.readableBytes + r.key.readableBytes + r.value.readableBytes)
        b.writeResponseHeader(
            opcode: opcode, status: r.status, opaque: opaque, cas: zeroDeleteCAS && loud == .delete ? 0 : r.cas,
            datatype: datatype,
            extrasLength: extras.readableBytes, keyLength: r.key.readableBytes, valueLength: r.value.readableBytes)
        b.writeImmutableBuffer(extras)
        b.writeImmutableBuffer(r.key)
        b.writeImmutableBuffer(r.value)
        return b
    }
}
