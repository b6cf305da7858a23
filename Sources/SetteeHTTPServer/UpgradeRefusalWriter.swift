import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1

/// Gives a refused WebSocket upgrade the server's own answer (the gateway's `/_blipsync`, a Lite P2P listener's).
/// HummingbirdWebSocket answers every upgrade its `shouldUpgrade` refuses with an empty 400 and closes; a Couchbase
/// Lite client must instead see 401 (with `WWW-Authenticate`) for a refused login and a 400 that says which
/// subprotocols are spoken (Sync Gateway's answers before the upgrade). The decision
/// (`GatewayResponder.blipSyncUpgrade`, `PeerListener.blipUpgrade`) leaves its reply here, on the connection's
/// pipeline, before refusing; the refusal's head and body are then replaced by it as they pass, just above the HTTP
/// encoder. A connection whose refusal left no reply (the websocket `_changes` feed's) is answered as before.
public final class UpgradeRefusalWriter: ChannelOutboundHandler, RemovableChannelHandler {
    public typealias OutboundIn = HTTPServerResponsePart
    public typealias OutboundOut = HTTPServerResponsePart

    /// The answer to write instead of the next response; nil: pass responses through.
    public var reply: (status: Int, headers: HTTPFields, body: [UInt8])?
    private var replacing = false

    public init() {}

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard let reply else {
            context.write(data, promise: promise)
            return
        }
        switch unwrapOutboundIn(data) {
        case .head(var head):
            replacing = true
            head.status = HTTPResponseStatus(statusCode: reply.status)
            var headers = HTTPHeaders()
            for field in reply.headers { headers.add(name: field.name.rawName, value: field.value) }
            headers.replaceOrAdd(name: "Content-Length", value: String(reply.body.count))
            headers.replaceOrAdd(name: "Connection", value: "close")
            head.headers = headers
            context.write(wrapOutboundOut(.head(head)), promise: promise)
        case .body:
            // The refusal's own body (none) gives way to the reply's.
            promise?.succeed(())
        case .end(let trailers):
            if replacing {
                context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: reply.body)))), promise: nil)
                self.reply = nil
                replacing = false
            }
            context.write(wrapOutboundOut(.end(trailers)), promise: promise)
        }
    }

    /// Leaves `reply` on `channel`'s writer (a no-op for a channel without one), on its event loop, before the
    /// caller refuses the upgrade.
    public static func leave(_ reply: (status: Int, headers: HTTPFields, body: [UInt8]), on channel: (any Channel)?)
        async
    {
        guard let channel else { return }
        _ = try? await channel.eventLoop.submit {
            try channel.pipeline.syncOperations.handler(type: UpgradeRefusalWriter.self).reply = reply
        }.get()
    }
}

/// `inner` (the HTTP/1 pipeline with its WebSocket upgrade) with an `UpgradeRefusalWriter` above its encoder.
public struct UpgradeRefusalChildChannel<Inner: ServerChildChannel>: ServerChildChannel {
    public typealias Value = Inner.Value
    let inner: Inner

    public init(inner: Inner) { self.inner = inner }

    public func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        inner.setup(channel: channel, logger: logger).flatMapThrowing { value in
            let pipeline = channel.pipeline.syncOperations
            let encoder = try pipeline.handler(type: HTTPResponseEncoder.self)
            try pipeline.addHandler(UpgradeRefusalWriter(), position: .after(encoder))
            return value
        }
    }

    public func handle(value: Value, logger: Logger) async {
        await inner.handle(value: value, logger: logger)
    }
}
