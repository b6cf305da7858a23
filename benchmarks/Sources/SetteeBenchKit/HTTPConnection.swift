import NIOCore
import NIOHTTP1
import NIOPosix

/// One HTTP response as the load generator sees it, with the event-loop clock readings that latency is
/// measured from (taken where the bytes arrive, so a busy task scheduler does not inflate them).
public struct HTTPReply: Sendable {
    public var status: Int
    public var body: ByteBuffer
    /// `uptimeNanos()` when the request's last byte was handed to the socket.
    public var sentAt: UInt64
    /// When the response head arrived.
    public var headAt: UInt64
    /// When the response's end arrived.
    public var endAt: UInt64

    public var bodyString: String { String(buffer: body) }
}

public enum HTTPClientError: Error, CustomStringConvertible {
    case closed
    case status(Int, String)
    case malformed(String)

    public var description: String {
        switch self {
        case .closed: return "connection closed"
        case .status(let s, let what): return "HTTP \(s) \(what)"
        case .malformed(let what): return "malformed reply: \(what)"
        }
    }
}

/// A keep-alive HTTP/1.1 client connection over raw NIOHTTP1 channels: requests go out one after
/// another (no pipelining), replies are matched in order. Enough for a replicator's traffic and for
/// holding 1,000 long polls open, without an HTTP client library's per-request machinery.
public final class HTTPConnection: Sendable {
    let channel: any Channel
    private let handler: NIOLoopBound<HTTPClientHandler>
    /// `Host` header value.
    let host: String
    /// `Authorization` header value, if any.
    let authorization: String?

    private init(channel: any Channel, handler: NIOLoopBound<HTTPClientHandler>, host: String, authorization: String?) {
        self.channel = channel
        self.handler = handler
        self.host = host
        self.authorization = authorization
    }

    /// Connects to `host:port` (loopback only; the caller checks) with an optional Basic credential.
    public static func connect(
        group: any EventLoopGroup, host: String, port: Int, basicAuth: (user: String, password: String)? = nil
    ) async throws -> HTTPConnection {
        let channel = try await ClientBootstrap(group: group)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .connectTimeout(.seconds(10))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    try channel.pipeline.syncOperations.addHandler(HTTPClientHandler())
                }
            }
            .connect(host: host, port: port).get()
        let handler = try await channel.eventLoop.submit {
            NIOLoopBound(
                try channel.pipeline.syncOperations.handler(type: HTTPClientHandler.self), eventLoop: channel.eventLoop)
        }.get()
        let auth = basicAuth.map { "Basic " + Base64.encode(Array("\($0.user):\($0.password)".utf8)) }
        return HTTPConnection(channel: channel, handler: handler, host: "\(host):\(port)", authorization: auth)
    }

    /// Sends one request; the future completes with the reply (any status) or fails if the connection
    /// closes first. `onHead` (optional) completes when the response head arrives.
    public func send(
        _ method: HTTPMethod, _ uri: String, body: ByteBuffer? = nil, onHead: EventLoopPromise<UInt64>? = nil
    ) -> EventLoopFuture<HTTPReply> {
        let promise = channel.eventLoop.makePromise(of: HTTPReply.self)
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: host)
        headers.add(name: "Accept", value: "application/json")
        if let authorization { headers.add(name: "Authorization", value: authorization) }
        if let body {
            headers.add(name: "Content-Type", value: "application/json")
            headers.add(name: "Content-Length", value: String(body.readableBytes))
        } else if method == .POST || method == .PUT {
            headers.add(name: "Content-Length", value: "0")
        }
        let head = HTTPRequestHead(version: .http1_1, method: method, uri: uri, headers: headers)
        let handler = self.handler
        channel.eventLoop.execute {
            handler.value.send(head: head, body: body, promise: promise, onHead: onHead)
        }
        return promise.futureResult
    }

    /// `send` awaited, failing on a status outside 200..<300.
    public func request(_ method: HTTPMethod, _ uri: String, body: ByteBuffer? = nil) async throws -> HTTPReply {
        let reply = try await send(method, uri, body: body).get()
        guard (200..<300).contains(reply.status) else {
            throw HTTPClientError.status(reply.status, "\(method) \(uri.prefix(80)): \(reply.bodyString.prefix(200))")
        }
        return reply
    }

    public func close() async {
        try? await channel.close()
    }
}

/// Matches replies to requests in order on one channel; lives on its event loop.
final class HTTPClientHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    private struct Pending {
        var promise: EventLoopPromise<HTTPReply>
        var onHead: EventLoopPromise<UInt64>?
        var sentAt: UInt64
    }

    private var context: ChannelHandlerContext?
    private var pending = CircularBuffer<Pending>()
    private var status = 0
    private var headAt: UInt64 = 0
    private var body: ByteBuffer?
    private var closed = false

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    func send(
        head: HTTPRequestHead, body: ByteBuffer?, promise: EventLoopPromise<HTTPReply>,
        onHead: EventLoopPromise<UInt64>?
    ) {
        guard let context, !closed else {
            promise.fail(HTTPClientError.closed)
            onHead?.fail(HTTPClientError.closed)
            return
        }
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        if let body { context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil) }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        pending.append(Pending(promise: promise, onHead: onHead, sentAt: uptimeNanos()))
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            status = Int(head.status.code)
            headAt = uptimeNanos()
            body = nil
            if !pending.isEmpty, let onHead = pending[pending.startIndex].onHead {
                pending[pending.startIndex].onHead = nil
                onHead.succeed(headAt)
            }
        case .body(var part):
            if body == nil {
                body = part
            } else {
                body!.writeBuffer(&part)
            }
        case .end:
            let end = uptimeNanos()
            guard let p = pending.popFirst() else { return }
            p.promise.succeed(
                HTTPReply(
                    status: status, body: body ?? ByteBuffer(), sentAt: p.sentAt, headAt: headAt, endAt: end))
            body = nil
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        failAll()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        failAll()
        context.close(promise: nil)
    }

    private func failAll() {
        closed = true
        while let p = pending.popFirst() {
            p.promise.fail(HTTPClientError.closed)
            p.onHead?.fail(HTTPClientError.closed)
        }
    }
}

/// Standard base64 (RFC 4648, padded), for Basic credentials.
enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var i = 0
        while i < bytes.count {
            let b0 = UInt32(bytes[i])
            let b1 = i + 1 < bytes.count ? UInt32(bytes[i + 1]) : 0
            let b2 = i + 2 < bytes.count ? UInt32(bytes[i + 2]) : 0
            let n = b0 << 16 | b1 << 8 | b2
            out.append(alphabet[Int(n >> 18 & 63)])
            out.append(alphabet[Int(n >> 12 & 63)])
            out.append(i + 1 < bytes.count ? alphabet[Int(n >> 6 & 63)] : UInt8(ascii: "="))
            out.append(i + 2 < bytes.count ? alphabet[Int(n & 63)] : UInt8(ascii: "="))
            i += 3
        }
        return String(decoding: out, as: UTF8.self)
    }
}
