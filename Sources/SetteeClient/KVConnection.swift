import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import SetteeAuth
import SetteeCore
import SetteeProtocol
import SetteeTLS

/// One request as the client sends it. Sections are buffers, so a router forwards what it decoded
/// without copying into arrays. The opaque is assigned by the connection.
public struct RequestFrame: Sendable {
    public var opcode: Opcode
    public var vbucket: UInt16
    public var cas: UInt64
    public var datatype: UInt8
    public var framingExtras: ByteBuffer
    public var extras: ByteBuffer
    public var key: ByteBuffer
    public var value: ByteBuffer

    public init(
        opcode: Opcode, vbucket: UInt16 = 0, cas: UInt64 = 0, datatype: UInt8 = 0,
        framingExtras: ByteBuffer = ByteBuffer(), extras: ByteBuffer = ByteBuffer(), key: ByteBuffer = ByteBuffer(),
        value: ByteBuffer = ByteBuffer()
    ) {
        self.opcode = opcode
        self.vbucket = vbucket
        self.cas = cas
        self.datatype = datatype
        self.framingExtras = framingExtras
        self.extras = extras
        self.key = key
        self.value = value
    }

    func write(into out: inout ByteBuffer, opaque: UInt32) {
        let fe = framingExtras.readableBytes
        let body = fe + extras.readableBytes + key.readableBytes + value.readableBytes
        if fe == 0 {
            out.writeInteger(Magic.clientRequest.rawValue)
            out.writeInteger(opcode.rawValue)
            out.writeInteger(UInt16(truncatingIfNeeded: key.readableBytes))
        } else {
            out.writeInteger(Magic.altClientRequest.rawValue)
            out.writeInteger(opcode.rawValue)
            out.writeInteger(UInt8(truncatingIfNeeded: fe))
            out.writeInteger(UInt8(truncatingIfNeeded: key.readableBytes))
        }
        out.writeInteger(UInt8(truncatingIfNeeded: extras.readableBytes))
        out.writeInteger(datatype)
        out.writeInteger(vbucket)
        out.writeInteger(UInt32(truncatingIfNeeded: body))
        out.writeInteger(opaque)
        out.writeInteger(cas)
        out.writeImmutableBuffer(framingExtras)
        out.writeImmutableBuffer(extras)
        out.writeImmutableBuffer(key)
        out.writeImmutableBuffer(value)
    }
}

/// Why one attempt on a connection failed (internal to the client's retry loop).
struct AttemptError: Error {
    var failure: AttemptFailure
}

/// A request handed to the pipeline with what its outcome completes: called exactly once, on the channel's loop.
/// A callback rather than a promise, so a routed operation's attempt costs no promise and future of its own.
struct OutboundRequest: Sendable {
    var frame: RequestFrame
    var complete: @Sendable (Result<Frame, any Error>) -> Void
    var deadline: NIODeadline
}

/// Matches responses to requests by opaque on one pipelined connection, fails each request at its
/// deadline, and hands server-pushed configs (magic 0x82, opcode 0x01) to `onConfigPush`.
///
/// States: open → closed (channelInactive). Invariants:
/// 1. every request in `pending` is completed exactly once: by its response, its deadline, or close;
/// 2. after close no request is accepted (it fails `notSent`: nothing reached the wire).
final class KVClientHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = OutboundRequest
    typealias OutboundOut = ByteBuffer

    private struct Pending {
        var complete: @Sendable (Result<Frame, any Error>) -> Void
        var timer: NIOScheduledCallback?
    }

    /// A request's deadline: a scheduled callback (no promise, future or closure per request, as
    /// `scheduleTask` would allocate) that fails the request if it is still pending.
    private struct Deadline: NIOScheduledCallbackHandler {
        weak var owner: KVClientHandler?
        let opaque: UInt32

        func handleScheduledCallback(eventLoop: some EventLoop) {
            owner?.deadlinePassed(opaque: opaque)
        }
    }

    private var pending: [UInt32: Pending] = [:]
    private var nextOpaque: UInt32 = 1
    private var inbound = ByteBuffer()
    private var closed = false
    /// A flush is queued on the loop (see `flush(context:)`).
    private var flushScheduled = false
    private let onConfigPush: @Sendable ([UInt8]) -> Void
    private let logger: Logger

    init(logger: Logger, onConfigPush: @escaping @Sendable ([UInt8]) -> Void) {
        self.logger = logger
        self.onConfigPush = onConfigPush
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let req = unwrapOutboundIn(data)
        guard !closed else {
            req.complete(.failure(AttemptError(failure: .notSent)))
            promise?.succeed()
            return
        }
        var opaque = nextOpaque
        while pending[opaque] != nil { opaque &+= 1 }
        nextOpaque = opaque &+ 1
        // Fails only while the loop shuts down; the channel's close then fails the request.
        let timer = try? context.eventLoop.assumeIsolated().scheduleCallback(
            at: req.deadline, handler: Deadline(owner: self, opaque: opaque))
        pending[opaque] = Pending(complete: req.complete, timer: timer)
        var out = context.channel.allocator.buffer(
            capacity: Frame.headerLength + req.frame.framingExtras.readableBytes + req.frame.extras.readableBytes
                + req.frame.key.readableBytes + req.frame.value.readableBytes)
        req.frame.write(into: &out, opaque: opaque)
        context.write(wrapOutboundOut(out), promise: promise)
    }

    /// Coalesces flushes: the requests written while the loop runs one batch of work leave in one `write` syscall
    /// (the flush runs as the loop's next task) instead of one each. Concurrent callers' sends reach the loop as
    /// separate tasks, so without this every request was its own syscall on both ends.
    func flush(context: ChannelHandlerContext) {
        guard !flushScheduled else { return }
        flushScheduled = true
        context.eventLoop.assumeIsolated().execute {
            self.flushScheduled = false
            context.flush()
        }
    }

    private func deadlinePassed(opaque: UInt32) {
        guard let p = pending.removeValue(forKey: opaque) else { return }
        p.complete(.failure(AttemptError(failure: .timedOutAfterSend)))
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        if inbound.readableBytes == 0 {
            inbound = bytes
        } else {
            inbound.writeBuffer(&bytes)
        }
        while true {
            let frame: Frame?
            do {
                frame = try FrameDecoder.decode(&inbound, maxBodyLength: Limits.maxFrameBodySize)
            } catch {
                logger.warning("undecodable response stream, closing", metadata: ["error": "\(error)"])
                context.close(promise: nil)
                return
            }
            guard let frame else { break }
            if frame.magic == .serverRequest {
                if frame.opcode == .clustermapChangeNotification {
                    onConfigPush(Array(frame.value.readableBytesView))
                }
                continue
            }
            guard let p = pending.removeValue(forKey: frame.opaque) else { continue }  // timed out earlier
            p.timer?.cancel()
            p.complete(.success(frame))
        }
        // Don't keep a large read buffer alive once drained.
        if inbound.readableBytes == 0 { inbound = ByteBuffer() }
    }

    func channelInactive(context: ChannelHandlerContext) {
        closed = true
        let all = pending
        pending.removeAll()
        for (_, p) in all {
            p.timer?.cancel()
            p.complete(.failure(AttemptError(failure: .connectionLostAfterSend)))
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.debug("connection error", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }
}

/// One authenticated, bucket-selected, pipelined connection to a node's KV port.
public final class KVConnection: Sendable {
    public let address: NodeAddress
    let channel: any Channel

    private init(address: NodeAddress, channel: any Channel) {
        self.address = address
        self.channel = channel
    }

    public var isActive: Bool { channel.isActive }

    /// The features asked for in HELLO.
    static let features: [HelloFeature] = [
        .xerror, .selectBucket, .json, .mutationSeqno, .duplex, .clustermapChangeNotification, .tcpNoDelay,
        .altRequestSupport, .syncReplication, .xattr, .preserveTtl,
    ]

    /// Whether a HELLO answer's value (the agreed features, u16 each) lists `feature`.
    static func agreed(_ feature: HelloFeature, in value: ByteBuffer) -> Bool {
        var v = value
        while let f: UInt16 = v.readInteger() {
            if f == feature.rawValue { return true }
        }
        return false
    }

    /// Sends `frame` and completes with its response (any status). Fails `AttemptError` with
    /// `.timedOutAfterSend` at `deadline`, `.connectionLostAfterSend` if the connection drops first,
    /// `.notSent` if it is already closed.
    ///
    /// The request is written on the channel's loop without a write promise: while the channel is active there,
    /// `KVClientHandler` is in the pipeline and completes the request (a failed write closes the channel, which
    /// fails it); an inactive channel fails it `.notSent` at once.
    public func send(_ frame: RequestFrame, deadline: NIODeadline) -> EventLoopFuture<Frame> {
        let promise = channel.eventLoop.makePromise(of: Frame.self)
        send(frame, deadline: deadline) { promise.completeWith($0) }
        return promise.futureResult
    }

    /// `send(_:deadline:)` with a callback instead of a future (a routed operation's attempt): `complete` is
    /// called exactly once, on the channel's loop, with the response or the `AttemptError`.
    func send(
        _ frame: RequestFrame, deadline: NIODeadline, complete: @escaping @Sendable (Result<Frame, any Error>) -> Void
    ) {
        let loop = channel.eventLoop
        let request = OutboundRequest(frame: frame, complete: complete, deadline: deadline)
        if loop.inEventLoop {
            Self.write(request, on: channel)
        } else {
            let channel = self.channel
            loop.execute { Self.write(request, on: channel) }
        }
    }

    /// On the channel's loop: hands `request` to the pipeline, or fails it `.notSent` when the channel is closed.
    private static func write(_ request: OutboundRequest, on channel: any Channel) {
        guard channel.isActive else {
            request.complete(.failure(AttemptError(failure: .notSent)))
            return
        }
        channel.pipeline.syncOperations.writeAndFlush(NIOAny(request), promise: nil)
    }

    public func close() {
        channel.close(promise: nil)
    }

    /// Connects, says HELLO and logs in with `SaslClientLogin` when `username` is set (SCRAM-SHA512 first; PLAIN
    /// only when the node offers nothing else and `allowPlain` is set or the connection is TLS; without a username
    /// the connection stays anonymous, which a node allows for `authType=none` buckets), then selects the bucket.
    ///
    /// A chain of futures, not an `async` function: a connection opened for a routed operation must not wait
    /// for a cooperative-pool thread between its steps (see `RoutedOperation`). Fails
    /// `AttemptError(.notSent)` when the node refuses or does not answer in time (nothing of a user's
    /// operation was sent), `ClientError` when it answers the handshake with a refusal.
    static func connect(
        to address: NodeAddress, bucket: String?, username: String?, password: String?, allowPlain: Bool = false,
        group: any EventLoopGroup, timeoutMs: Int, tls: TLSClientContext? = nil, unordered: Bool = false,
        collections: Bool = false, logger: Logger, onConfigPush: @escaping @Sendable ([UInt8]) -> Void
    ) -> EventLoopFuture<KVConnection> {
        let tlsFailure = TLSHandshakeFailure()
        let bootstrap = ClientBootstrap(group: group)
            .connectTimeout(.milliseconds(Int64(timeoutMs)))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    // TLS first: HELLO waits in NIOSSL until the handshake (and the certificate check) is done.
                    if let tls {
                        try tls.addHandlers(
                            to: channel.pipeline.syncOperations, host: address.host, failure: tlsFailure)
                    }
                    try channel.pipeline.syncOperations.addHandler(
                        KVClientHandler(logger: logger, onConfigPush: onConfigPush))
                }
            }
        let connected = bootstrap.connect(host: address.host, port: address.port)
        return connected.flatMapError { _ in
            connected.eventLoop.makeFailedFuture(AttemptError(failure: .notSent))
        }.flatMap { channel in
            let conn = KVConnection(address: address, channel: channel)
            let loop = channel.eventLoop
            let deadline = NIODeadline.now() + .milliseconds(Int64(timeoutMs))
            var hello = ByteBuffer()
            let asked = features + (unordered ? [.unorderedExecution] : []) + (collections ? [.collections] : [])
            for f in asked { hello.writeInteger(f.rawValue) }
            let helloF = conn.send(
                RequestFrame(opcode: .hello, key: ByteBuffer(string: "{\"a\":\"settee-client/1\"}"), value: hello),
                deadline: deadline)
            // A refused certificate is named (never retried in clear), not reported as a closed connection.
            let greeted = helloF.flatMapErrorThrowing { error -> Frame in
                if let why = tlsFailure.reason { throw ClientError.bootstrapFailed("TLS with \(address): \(why)") }
                throw error
            }.flatMapThrowing { h in
                guard h.status == .success else {
                    throw ClientError.bootstrapFailed("HELLO to \(address) answered \(h.status)")
                }
                // Keys carry a collection prefix only if the node agreed to read one: a node that did not would
                // take the prefix for part of the key.
                guard !collections || Self.agreed(.collections, in: h.value) else {
                    throw ClientError.bootstrapFailed("\(address) did not agree to HELLO Collections")
                }
            }
            let authenticated = greeted.flatMap { () -> EventLoopFuture<Void> in
                guard let username else { return loop.makeSucceededVoidFuture() }
                var login = SaslClientLogin(
                    username: username, password: password ?? "", allowPlain: allowPlain || tls != nil,
                    clientNonce: SaslClientLogin.randomNonce())
                let first = login.start()
                return conn.drive(login, first, deadline: deadline, logger: logger)
            }
            // SELECT_BUCKET only after authentication has completed (as the SDK does): the server checks the
            // password off its event loop, and a SELECT pipelined behind it would see no principal. Without a
            // username the bucket is selected too (a node lets anyone select a bucket without a password); one
            // with a password refuses, which means credentials are needed.
            let selected = authenticated.flatMap { () -> EventLoopFuture<Void> in
                guard let bucket else { return loop.makeSucceededVoidFuture() }
                return conn.send(
                    RequestFrame(opcode: .selectBucket, key: ByteBuffer(string: bucket)), deadline: deadline
                )
                .flatMapThrowing { s in
                    guard s.status == .success else {
                        if username == nil && s.status == .accessDenied {
                            throw ClientError.authenticationFailed(
                                "\(address) refused bucket \(bucket) without credentials (it has a password)")
                        }
                        throw ClientError.bucketNotFound(bucket)
                    }
                }
            }
            return selected.map { conn }.flatMapError { error in
                conn.close()
                // Nothing of a user's operation was sent on this connection yet.
                return loop.makeFailedFuture(error is AttemptError ? AttemptError(failure: .notSent) : error)
            }
        }
    }
}

extension KVConnection {
    /// Sends what `directive` asks and feeds the answers back into `login` until it ends: succeeds when the node
    /// accepted the login (and, for SCRAM, proved it knows the keys), fails `ClientError.authenticationFailed`.
    fileprivate func drive(
        _ login: SaslClientLogin, _ directive: SaslClientLogin.Directive, deadline: NIODeadline, logger: Logger
    ) -> EventLoopFuture<Void> {
        let loop = channel.eventLoop
        switch directive {
        case .succeeded(let mechanism):
            if mechanism == "PLAIN" {
                logger.warning(
                    "logged in with SASL PLAIN: the node offers no SCRAM mechanism",
                    metadata: ["node": "\(address)"])
            }
            return loop.makeSucceededVoidFuture()
        case .failed(let failure):
            return loop.makeFailedFuture(
                ClientError.authenticationFailed("\(address) refused the login: \(failure)"))
        case .listMechanisms, .auth, .step:
            guard let request = directive.request else { return loop.makeSucceededVoidFuture() }
            return send(
                RequestFrame(
                    opcode: Opcode(request.opcode), key: ByteBuffer(bytes: request.key),
                    value: ByteBuffer(bytes: request.value)),
                deadline: deadline
            ).flatMap { frame in
                // The server-first answer's PBKDF2 runs off this loop (LoginHashing).
                let answer = SaslClientLogin.Answer(
                    status: frame.status.rawValue, value: Array(frame.value.readableBytesView))
                return LoginHashing.receive(login, answer, on: loop).flatMap { machine, next in
                    self.drive(machine, next, deadline: deadline, logger: logger)
                }
            }
        }
    }
}
