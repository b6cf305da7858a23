import Logging
import NIOCore
import NIOPosix
import SetteeAuth
import SetteeCore
import SetteeProtocol
import SetteeStreams
import SetteeTLS

/// One DCP producer connection of a `ChangeStream` to one node, carrying the streams of every vBucket the
/// stream follows there. Loop-confined (the core's loop).
///
/// Phases: `connecting` ──TCP up──▶ `handshake` (`DCPConsumerHandshake`, the machine replicas use too: SASL
/// login as `SaslClientLogin` directs, SELECT_BUCKET, DCP_OPEN(producer), CONTROL connection_buffer_size; each
/// waits for its answer) ──▶ `ready` ──close / error──▶ `closed`. `ready` completes when the handshake succeeds
/// and fails with the handshake's refusal; a closed connection is never reused (the core opens a new one).
final class ChangeStreamConnection: @unchecked Sendable {
    enum Phase {
        case connecting
        case handshake
        case ready
        case closed
    }

    static let streamOpaqueBase = DCPConsumerHandshake.streamOpaqueBase
    static let closeStreamOpaque: UInt32 = 0x0f00_0000

    let address: NodeAddress
    let core: ChangeStreamCore
    let ready: EventLoopPromise<Void>
    var phase: Phase = .connecting
    var channel: (any Channel)?
    /// Bytes of DCP messages processed and not yet acknowledged to the producer.
    var unacked = 0
    private var readyCompleted = false
    /// The SASL login while the handshake is at its login step (every SASL request of it carries opaque 1).
    private var login: SaslClientLogin?
    private var opening: DCPConsumerHandshake

    init(address: NodeAddress, core: ChangeStreamCore) {
        self.address = address
        self.core = core
        self.ready = core.loop.makePromise()
        opening = DCPConsumerHandshake(
            bucket: core.options.bucket, connectionName: core.name, authenticates: core.options.username != nil,
            openFlags: DCPOpenFlags.producer
                | (core.options.changeStreamIncludesXattrs ? DCPOpenFlags.includeXattrs : 0),
            bufferBytes: Limits.dcpConsumerBufferBytes,
            helloFeatures: core.options.changeStreamCollection == nil ? [] : [.collections])
    }

    var isReady: Bool {
        if case .ready = phase { return true }
        return false
    }

    func connect() {
        let loop = core.loop
        let bootstrap = ClientBootstrap(group: loop)
            .channelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
            .connectTimeout(.milliseconds(Int64(core.options.connectTimeoutMs)))
            .channelInitializer { [address, tls = core.client.tlsContext] ch in
                ch.eventLoop.makeCompletedFuture {
                    // Over TLS like the client whose map it follows (its addresses are then the kvSSL ports).
                    if let tls { try ch.pipeline.syncOperations.addHandler(tls.makeHandler(host: address.host)) }
                    try ch.pipeline.syncOperations.addHandler(ChangeStreamChannelHandler(connection: self))
                }
            }
        bootstrap.connect(host: address.host, port: address.port).whenComplete { result in
            switch result {
            case .success(let ch):
                if case .closed = self.phase {
                    ch.close(promise: nil)
                    return
                }
                self.channel = ch
                self.phase = .handshake
                // No credentials: no SASL; the node lets anyone stream a bucket without a password.
                self.follow(self.opening.connected())
            case .failure(let error):
                self.fail(ClientError.bootstrapFailed("cannot connect to \(self.address): \(error)"))
            }
        }
    }

    func close() {
        if case .closed = phase { return }
        phase = .closed
        completeReady(.failure(ClientError.closed))
        channel?.close(promise: nil)
    }

    private func completeReady(_ result: Result<Void, any Error>) {
        guard !readyCompleted else { return }
        readyCompleted = true
        ready.completeWith(result)
    }

    private func fail(_ error: ClientError) {
        if case .closed = phase { return }
        phase = .closed
        completeReady(.failure(error))
        channel?.close(promise: nil)
        core.connectionLost(self)
    }

    func send(_ body: (inout ByteBuffer) -> Void) {
        guard let channel else { return }
        var b = channel.allocator.buffer(capacity: 64)
        body(&b)
        channel.writeAndFlush(b, promise: nil)
    }

    func sendStreamRequest(_ r: StreamRequest, opaque: UInt32) {
        let extras = DCPExtras.StreamRequest(
            start: r.start.rawValue, end: r.end.rawValue, uuid: r.uuid.rawValue, snapStart: r.snapStart.rawValue,
            snapEnd: r.snapEnd.rawValue)
        var request = DCPRequest.streamRequest(vbucket: r.vbucket.rawValue, opaque: opaque, extras)
        if let id = core.options.changeStreamCollection {
            // kv_engine's stream-request value: collection ids as lowercase hex strings.
            request.value = Array("{\"collections\":[\"\(String(id, radix: 16))\"]}".utf8)
        }
        send { $0.writeRequest(request) }
    }

    func closeStream(_ vb: UInt16) {
        send { $0.writeRequest(.closeStream(vbucket: vb, opaque: Self.closeStreamOpaque)) }
    }

    /// Acknowledges processed bytes (DCP flow control) unless the consumer is behind.
    func flushAcks(force: Bool = true) {
        guard unacked > 0, core.mayAck, force || unacked >= Limits.dcpConsumerBufferBytes / 4 else { return }
        var extras: [UInt8] = []
        withUnsafeBytes(of: UInt32(clamping: unacked).bigEndian) { extras += $0 }
        unacked = 0
        send { $0.writeRequest(opcode: .dcpBufferAcknowledgement, extras: extras) }
    }

    // MARK: frames from the node

    func handle(_ frame: Frame) {
        if case .closed = phase { return }
        if frame.magic == .clientResponse {
            response(frame)
            return
        }
        let message: DCPMessage
        do { message = try DCPMessage(frame, maxKeyLength: Limits.maxKeyLength) } catch {
            // Skipping it could skip a change: drop the connection; its streams reopen from the last whole snapshot.
            core.logger.warning(
                "malformed DCP message on a change stream", metadata: ["node": "\(address)", "error": "\(error)"])
            fail(.bootstrapFailed("malformed DCP message from \(address): \(error)"))
            return
        }
        defer {
            unacked += Frame.headerLength + frame.bodyLength
            flushAcks(force: false)
        }
        switch message {
        case .noop:
            send { $0.writeResponseHeader(opcode: .dcpNoop, status: .success, opaque: frame.opaque) }
        case .setVBucketState:
            send { $0.writeResponseHeader(opcode: .dcpSetVBucketState, status: .success, opaque: frame.opaque) }
        default:
            core.streamMessage(opaque: frame.opaque, message)
        }
    }

    private func response(_ frame: Frame) {
        if frame.opaque >= Self.streamOpaqueBase {
            if frame.opcode == .dcpStreamRequest { core.streamResponse(frame, conn: self) }
            return
        }
        guard case .handshake = phase else { return }
        if opening.isLoggingIn {
            guard frame.opaque == DCPConsumerHandshake.Step.login.rawValue, let login else { return }
            // The server-first answer's PBKDF2 runs off this loop (LoginHashing); the login resumes on it unless
            // the connection went away meanwhile.
            self.login = nil
            let sent = channel
            let answer = SaslClientLogin.Answer(
                status: frame.status.rawValue, value: Array(frame.value.readableBytesView))
            LoginHashing.receive(login, answer, on: core.loop).whenComplete { result in
                guard let sent, let current = self.channel, current === sent, case .handshake = self.phase else {
                    return
                }
                switch result {
                case .success(let (machine, next)):
                    self.login = machine
                    self.loginStep(next)
                case .failure(let error):
                    self.fail(.bootstrapFailed("login to \(self.address) could not run: \(error)"))
                }
            }
            return
        }
        follow(opening.answer(opaque: frame.opaque, status: frame.status, value: Array(frame.value.readableBytesView)))
    }

    /// Carries out what the handshake machine says.
    private func follow(_ directive: DCPConsumerHandshake.Directive) {
        switch directive {
        case .startLogin:
            let o = core.options
            var login = SaslClientLogin(
                username: o.username ?? "", password: o.password ?? "",
                allowPlain: o.allowPlainAuthentication || o.tls != nil, clientNonce: SaslClientLogin.randomNonce())
            let first = login.start()
            self.login = login
            loginStep(first)
        case .send(let request):
            send { $0.writeRequest(request) }
        case .ready:
            phase = .ready
            completeReady(.success(()))
            core.connectionReady(self)
        case .failed(let refusal):
            fail(error(refusal))
        case .ignore:
            break
        }
    }

    /// What a refused handshake step means to the caller.
    private func error(_ refusal: DCPConsumerHandshake.Refusal) -> ClientError {
        let status = refusal.status
        switch refusal.step {
        case .login, .selectBucket:
            if core.options.username == nil && status == .accessDenied {
                return .authenticationFailed(
                    "\(address) refused bucket \(core.options.bucket) without credentials (it has a password)")
            }
            return .bucketNotFound(core.options.bucket)
        case .open:
            return status == .accessDenied
                ? .accessDenied("\(address): the user may not open change streams (DCP_OPEN refused)")
                : .server(status: status.rawValue, message: "DCP_OPEN refused by \(address)")
        case .hello:
            return .bootstrapFailed("\(address) does not stream by collection (HELLO Collections refused)")
        case .control, .prepareLevels, .purgeSeqnos:  // the client asks neither optional one; no refusal of them is one
            return .server(status: status.rawValue, message: "DCP_CONTROL refused by \(address)")
        }
    }

    /// Sends the login's next request, or moves on to SELECT_BUCKET once it succeeded.
    private func loginStep(_ directive: SaslClientLogin.Directive) {
        switch directive {
        case .succeeded(let mechanism):
            login = nil
            if mechanism == "PLAIN" {
                core.logger.warning(
                    "change stream logged in with SASL PLAIN: the node offers no SCRAM mechanism",
                    metadata: ["node": "\(address)"])
            }
            follow(opening.loggedIn())
        case .failed(let failure):
            login = nil
            fail(.authenticationFailed("\(address) refused the login: \(failure)"))
        case .listMechanisms, .auth, .step:
            guard let request = directive.request else { return }
            send { $0.writeRequest(opcode: Opcode(request.opcode), opaque: 1, key: request.key, value: request.value) }
        }
    }

    func channelClosed() {
        channel = nil
        fail(.bootstrapFailed("connection to \(address) closed"))
    }
}

/// Decodes frames from a producer and hands them to the connection.
final class ChangeStreamChannelHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    let connection: ChangeStreamConnection
    var inbound = ByteBuffer()

    init(connection: ChangeStreamConnection) { self.connection = connection }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var b = unwrapInboundIn(data)
        if inbound.readableBytes == 0 {
            inbound = b
        } else {
            inbound.writeBuffer(&b)
        }
        while true {
            let frame: Frame?
            do { frame = try FrameDecoder.decode(&inbound, maxBodyLength: Limits.maxFrameBodySize) } catch {
                connection.core.logger.warning(
                    "malformed frame on a change stream", metadata: ["node": "\(connection.address)"])
                context.close(promise: nil)
                return
            }
            guard let frame else { break }
            connection.handle(frame)
        }
        if inbound.readableBytes == 0 { inbound = ByteBuffer() }
    }

    func channelInactive(context: ChannelHandlerContext) {
        connection.channelClosed()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        connection.core.logger.debug("change stream connection error", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }
}
