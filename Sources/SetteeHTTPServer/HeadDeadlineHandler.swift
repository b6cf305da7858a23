import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import SetteeCore
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Wraps any HTTP/1 child channel (Hummingbird's `HTTP1Channel`, the websocket upgrade channel, either inside TLS)
/// with what Hummingbird lacks: a deadline for each request head (slowloris: a client dribbling a head a byte at a
/// time kept its connection until the idle timeout, which counts decoded parts, not bytes), a minimum rate for each
/// request body (the same attack on a body under a huge `Content-Length`, `HeadDeadline.BodyRate`), and an answer to input
/// the HTTP parser rejects (400 and close, where Hummingbird only logs the failure). Every HTTP port uses it
/// through `HTTPServerBuilder.settee` (admin, views) or directly (the gateway's websocket-capable ports).
///
/// Two handlers share one `HeadDeadline`: `HeadDeadlineHandler` sits below the HTTP codec (after TLS, so it sees
/// plaintext and its answers are encrypted) and sees bytes arrive; `RequestPartObserver` sits right after the HTTP
/// decoder and sees heads, ends and parse errors.
public struct HeadDeadlineChildChannel<Inner: ServerChildChannel>: ServerChildChannel {
    public typealias Value = Inner.Value
    let inner: Inner
    let headDeadline: TimeAmount
    let upgradable: Bool
    let closes: UnansweredCloseCounts?
    let idleTimeout: TimeAmount
    let bodyRate: HeadDeadline.BodyRate

    /// `upgradable`: the pipeline can switch to another protocol (websocket), so a head asking to upgrade ends the
    /// timing for that connection. `closes`: where the port counts the connections it closes unanswered
    /// (`UnansweredClose`), with `idleTimeout` the port's idle timeout (to name Hummingbird's idle closes).
    /// `bodyRate`: how fast a request body must arrive (`Limits.httpBodyGraceSeconds`, `httpMinBodyBytesPerSecond`).
    public init(
        inner: Inner, headDeadline: TimeAmount, upgradable: Bool, closes: UnansweredCloseCounts? = nil,
        idleTimeout: TimeAmount = .seconds(Limits.httpIdleTimeoutSeconds), bodyRate: HeadDeadline.BodyRate = .standard
    ) {
        self.inner = inner
        self.headDeadline = headDeadline
        self.upgradable = upgradable
        self.closes = closes
        self.idleTimeout = idleTimeout
        self.bodyRate = bodyRate
    }

    public func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        // A process's first connections are set up one at a time (ADR 0099): the first use of the pipeline's generic
        // types instantiates their metadata, and on two event loops at once (a gateway's public and admin ports taking
        // their first connections together) the Swift runtime crashed the gateway in that instantiation.
        firstSetups.withLock { done in
            guard done < Self.serializedFirstSetups else { return nil }
            done += 1
            return setupPipeline(channel: channel, logger: logger)
        } ?? setupPipeline(channel: channel, logger: logger)
    }

    /// How many of a process's first connections `setup` serializes (each port's first, with room to spare).
    static var serializedFirstSetups: Int { 16 }

    private func setupPipeline(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        inner.setup(channel: channel, logger: logger).flatMapThrowing {
            [headDeadline, upgradable, closes, idleTimeout, bodyRate] value in
            let pipeline = channel.pipeline.syncOperations
            let encoder = try pipeline.handler(type: HTTPResponseEncoder.self)
            let decoder = try pipeline.handler(type: ByteToMessageHandler<HTTPRequestDecoder>.self)
            let bytes = HeadDeadlineHandler(
                headDeadline: headDeadline, upgradable: upgradable, logger: logger, closes: closes,
                idleTimeout: idleTimeout, bodyRate: bodyRate)
            // Just above TLS (if any) and below the HTTP codec: plaintext in, raw answers out.
            try pipeline.addHandler(bytes, position: .before(encoder))
            try pipeline.addHandler(RequestPartObserver(bytes: bytes), position: .after(decoder))
            return value
        }
    }

    public func handle(value: Value, logger: Logger) async {
        await inner.handle(value: value, logger: logger)
    }
}

/// Connections `HeadDeadlineChildChannel.setup` has set up one at a time, up to its `serializedFirstSetups`.
private let firstSetups = Mutex(0)

/// Times request heads (`HeadDeadline`) and writes the fixed answers (408, 400) as raw bytes below the HTTP encoder.
/// Also keeps the connection's `UnansweredClose` ledger: every response byte passes here, and so does every close
/// asked by the handlers above, so when the node closes a connection without answering it is counted by reason.
final class HeadDeadlineHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    let headDeadline: TimeAmount
    let logger: Logger
    var state: HeadDeadline
    var context: ChannelHandlerContext?
    var timer: Scheduled<Void>?
    /// The body-rate timer (`HeadDeadline.bodyDeadlinePassed`).
    var bodyTimer: Scheduled<Void>?
    let closes: UnansweredCloseCounts?
    let idleTimeout: TimeAmount
    var ledger: UnansweredClose

    init(
        headDeadline: TimeAmount, upgradable: Bool, logger: Logger, closes: UnansweredCloseCounts? = nil,
        idleTimeout: TimeAmount = .seconds(Limits.httpIdleTimeoutSeconds), bodyRate: HeadDeadline.BodyRate = .standard
    ) {
        self.headDeadline = headDeadline
        self.logger = logger
        self.state = HeadDeadline(upgradable: upgradable, bodyRate: bodyRate)
        self.closes = closes
        self.idleTimeout = idleTimeout
        self.ledger = UnansweredClose(now: NIODeadline.now().uptimeNanoseconds)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if context.channel.isActive { perform(state.connectionStarted()) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        cancelTimer()
        self.context = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        perform(state.connectionStarted())
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        _ = state.closed()
        cancelTimer()
        countUnansweredClose()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        noticeUpgrade(context)
        state.bytesArrived(unwrapInboundIn(data).readableBytes)
        ledger.bytesArrived(now: NIODeadline.now().uptimeNanoseconds)
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        ledger.responseWritten(now: NIODeadline.now().uptimeNanoseconds)
        state.responseWritten()
        context.write(data, promise: promise)
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        if mode == .all { ledger.closeRequested() }
        context.close(mode: mode, promise: promise)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if !Self.peerClosed(error) {
            // NIOSSL's errors (this target does not import NIOSSL): NIOSSLError, BoringSSLError, ...
            let tls = String(reflecting: type(of: error)).hasPrefix("NIOSSL.")
            ledger.errorCaught(tls: tls, parse: error is HTTPParserError)
        }
        context.fireErrorCaught(error)
    }

    /// Errors that report the client's own close (NIOSSL's EOF during the handshake or without close_notify, as a
    /// port probe that connects and closes draws; a reset): not a close the node made.
    static func peerClosed(_ error: any Error) -> Bool {
        if let io = error as? IOError { return io.errnoCode == ECONNRESET || io.errnoCode == EPIPE }
        let text = String(describing: error)
        return text.contains("EOF during handshake") || text.contains("uncleanShutdown")
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent { ledger.quiesce() }
        context.fireUserInboundEventTriggered(event)
    }

    /// At the close: counts it (and logs it, at most once per reason per second) when the node closed the
    /// connection without answering (`UnansweredClose.closed`). No user data: the reason and the port's counts.
    private func countUnansweredClose() {
        guard let closes else { return }
        let now = NIODeadline.now().uptimeNanoseconds
        let idle = UInt64(max(0, idleTimeout.nanoseconds))
        guard let reason = ledger.closed(now: now, idleTimeoutNanos: idle) else { return }
        if closes.record(reason, now: now) {
            logger.debug(
                "HTTP connection closed without a response",
                metadata: ["reason": "\(reason.rawValue)", "count": "\(closes.count(reason))"])
        }
    }

    /// After a head that asked to upgrade: whether the upgrade happened (the HTTP decoder left the pipeline), which
    /// ends the timing. A refused upgrade keeps the decoder, and the connection stays under the deadline.
    private func noticeUpgrade(_ context: ChannelHandlerContext) {
        guard state.upgradeAsked else { return }
        let decoder = try? context.pipeline.syncOperations.handler(type: ByteToMessageHandler<HTTPRequestDecoder>.self)
        if decoder == nil { perform(state.upgraded()) }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        // After the decoder ran over this burst: a head it completed has disarmed; one still partial is timed.
        perform(state.readComplete(now: NIODeadline.now().uptimeNanoseconds))
        context.fireChannelReadComplete()
    }

    /// Called by `RequestPartObserver` for each decoded part.
    func observed(head: HTTPRequestHead) {
        perform(
            state.headDecoded(
                upgrade: head.headers.contains(name: "upgrade"), now: NIODeadline.now().uptimeNanoseconds))
    }

    func observedEnd() { perform(state.endDecoded()) }

    func observedParseError(_ error: any Error) {
        logger.debug("HTTP parse error: answering 400 and closing", metadata: ["error": "\(error)"])
        ledger.errorCaught(tls: false, parse: true)
        perform(state.parseFailed())
    }

    private func perform(_ action: HeadDeadline.Action) {
        guard let context else { return }
        switch action {
        case .none:
            break
        case .arm:
            timer?.cancel()
            let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
            timer = context.eventLoop.scheduleTask(in: headDeadline) { bound.value.deadlinePassed() }
        case .disarm:
            timer?.cancel()
            timer = nil
        case .armBody(let afterNanos):
            bodyTimer?.cancel()
            let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
            let delay = TimeAmount.nanoseconds(Int64(clamping: afterNanos))
            bodyTimer = context.eventLoop.scheduleTask(in: delay) { bound.value.bodyDeadlinePassed() }
        case .disarmBody:
            bodyTimer?.cancel()
            bodyTimer = nil
        case .answerTimeoutAndClose:
            answerAndClose(context, "408 Request Timeout")
        case .answerBadRequestAndClose:
            answerAndClose(context, "400 Bad Request")
        case .close:
            cancelTimer()
            ledger.closing(.headDeadline)
            context.close(promise: nil)
        }
    }

    private func deadlinePassed() {
        timer = nil
        // Bytes sent right behind an upgrade request may have armed the timer before the switch completed.
        if let context { noticeUpgrade(context) }
        let action = state.deadlinePassed()
        if action != .none {
            logger.debug("closing a connection whose request head was not complete in time")
        }
        perform(action)
    }

    private func bodyDeadlinePassed() {
        bodyTimer = nil
        let action = state.bodyDeadlinePassed(now: NIODeadline.now().uptimeNanoseconds)
        if action == .answerTimeoutAndClose || action == .close {
            logger.debug("closing a connection whose request body fell below its minimum rate")
            ledger.closing(.bodyRate)
        }
        perform(action)
    }

    /// Cancels both timers (the head's and the body's).
    private func cancelTimer() {
        timer?.cancel()
        timer = nil
        bodyTimer?.cancel()
        bodyTimer = nil
    }

    /// Writes a fixed response with `Connection: close` below the HTTP encoder, then closes the connection: when
    /// the write completes, or after `Limits.httpAnswerThenCloseGraceSeconds` if it does not (TLS holds the write of
    /// a client that never finished its handshake, and a client that does not read holds it in the socket).
    private func answerAndClose(_ context: ChannelHandlerContext, _ status: String) {
        cancelTimer()
        let text = "HTTP/1.1 \(status)\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
        let channel = context.channel
        let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
        let backstop = context.eventLoop.scheduleTask(in: .seconds(Limits.httpAnswerThenCloseGraceSeconds)) {
            bound.value.ledger.closing(.answerUnwritten)
            channel.close(promise: nil)
        }
        context.writeAndFlush(wrapOutboundOut(.byteBuffer(channel.allocator.buffer(string: text)))).whenComplete {
            result in
            backstop.cancel()
            // Written from this handler's context, so `write` above did not see it.
            if case .success = result {
                bound.value.ledger.responseWritten(now: NIODeadline.now().uptimeNanoseconds)
            } else {
                bound.value.ledger.closing(.answerUnwritten)
            }
            channel.close(promise: nil)
        }
    }
}

/// Sits right after the HTTP decoder: reports heads, ends and parse errors to the connection's
/// `HeadDeadlineHandler`. Its input is typed `Any` because after a websocket upgrade the decoder is gone and
/// frames (or raw bytes) pass here; only `HTTPServerRequestPart`s are looked at.
final class RequestPartObserver: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = Any
    typealias InboundOut = Any
    let bytes: HeadDeadlineHandler

    init(bytes: HeadDeadlineHandler) { self.bytes = bytes }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) as? HTTPServerRequestPart {
        case .head(let head): bytes.observed(head: head)
        case .end: bytes.observedEnd()
        case .body, nil: break
        }
        context.fireChannelRead(data)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard error is HTTPParserError else {
            context.fireErrorCaught(error)
            return
        }
        bytes.observedParseError(error)
    }
}
