import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1

/// Wraps the gateway's HTTP/websocket child channel with what the upgrade pipeline lacks on its own:
///
/// - a deadline for the first request head: before the upgrade decision Hummingbird's idle handler is not
///   in the pipeline yet, so a client that connects and dribbles a header (slowloris) or sends nothing
///   would hold its descriptor for ever;
/// - an answer to input the HTTP parser rejects (raw non-ASCII byte in the path, garbage, an oversized
///   header block): 400 and close, where the upgrade pipeline would only log the failure and leave the
///   connection open.
///
/// Later requests of a kept-alive connection are covered by Hummingbird's idle timeout (`http1.idleTimeout`).
struct GuardedChildChannel<Inner: ServerChildChannel>: ServerChildChannel {
    typealias Value = Inner.Value
    let inner: Inner
    let headDeadline: TimeAmount

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        inner.setup(channel: channel, logger: logger).flatMapThrowing { value in
            let raw = RawGuard(headDeadline: headDeadline, logger: logger)
            try channel.pipeline.syncOperations.addHandler(raw, position: .first)
            try channel.pipeline.syncOperations.addHandler(ParseErrorGuard(raw: raw, logger: logger))
            return value
        }
    }

    func handle(value: Value, logger: Logger) async {
        await inner.handle(value: value, logger: logger)
    }
}

/// Sits next to the socket: sees the raw request bytes (to time the first request head) and writes a fixed
/// response as raw bytes, below the HTTP encoder.
final class RawGuard: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    let headDeadline: TimeAmount
    let logger: Logger
    var context: ChannelHandlerContext?
    var timer: Scheduled<Void>?
    /// Set once the first head's blank line went past; later heads are Hummingbird's idle handler's job.
    var headComplete = false
    /// The last bytes seen, so a `\r\n\r\n` split across reads is found.
    var tail: [UInt8] = []
    var answered = false

    init(headDeadline: TimeAmount, logger: Logger) {
        self.headDeadline = headDeadline
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if context.channel.isActive { arm(context: context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        disarm()
        self.context = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        arm(context: context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        disarm()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if !headComplete {
            let bytes = unwrapInboundIn(data).readableBytesView
            let blankLine: [UInt8] = [13, 10, 13, 10]
            if (tail + bytes.prefix(3)).firstRange(of: blankLine) != nil || bytes.firstRange(of: blankLine) != nil {
                headComplete = true
                tail = []
                disarm()
            } else {
                tail = Array((tail + bytes.suffix(3)).suffix(3))
            }
        }
        context.fireChannelRead(data)
    }

    private func arm(context: ChannelHandlerContext) {
        guard timer == nil, !headComplete else { return }
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: headDeadline) { [logger] in
            logger.debug("closing a connection that sent no complete request head in time")
            bound.value.close(promise: nil)
        }
    }

    private func disarm() {
        timer?.cancel()
        timer = nil
    }

    /// Writes `400 Bad Request` with `Connection: close`, then closes the connection.
    func badRequestAndClose() {
        guard let context, !answered else { return }
        answered = true
        disarm()
        let text = "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(channel.allocator.buffer(string: text))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }
}

/// Sits after the HTTP decoder: answers a request the parser rejects with 400 and closes the connection.
final class ParseErrorGuard: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    let raw: RawGuard
    let logger: Logger

    init(raw: RawGuard, logger: Logger) {
        self.raw = raw
        self.logger = logger
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard error is HTTPParserError else {
            context.fireErrorCaught(error)
            return
        }
        logger.debug("HTTP parse error: answering 400 and closing", metadata: ["error": "\(error)"])
        raw.badRequestAndClose()
    }
}
