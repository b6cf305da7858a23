import NIOCore
import NIOHTTP1
import NIOPosix
import SetteeCore
import SetteeTLS

/// A response from an admin port.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var body: [UInt8]
    public var text: String { String(decoding: body, as: UTF8.self) }
    public init(status: Int, body: [UInt8]) {
        self.status = status
        self.body = body
    }
}

/// The HTTP methods the admin API uses (kept here so callers need not import NIOHTTP1).
public enum HTTPVerb: String, Sendable {
    case GET, POST, DELETE, PUT
}

/// Why an HTTP request got no response.
public struct HTTPError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// A minimal HTTP/1.1 client for the admin REST API (bootstrap configs, the CLI's management calls):
/// one request per connection (`Connection: close`), Basic auth, bounded body. Off the data path, so
/// simplicity wins over connection reuse.
///
/// The request is written by the event loop the moment the connection is up, never by the calling task after it
/// resumes: a caller whose executor is busy (a starved cooperative pool) would otherwise leave a connected socket
/// silent, and the node's head deadline (`Limits.httpHeadDeadlineSeconds`) closes such a connection unanswered
/// (issue 16, ADR 0053).
public enum AdminHTTP {
    public static func request(
        _ method: HTTPVerb, _ path: String, at address: NodeAddress, username: String?, password: String?,
        form: [(String, String)]? = nil, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        timeoutMs: Int = ClientLimits.httpTimeoutMs, tls: TLSClientContext? = nil
    ) async throws -> HTTPResponse {
        try await send(
            method, path, at: address, username: username, password: password, form: form, group: group,
            timeoutMs: timeoutMs, tls: tls
        ).get()
    }

    /// `request` as a future: connects, writes the request from the connect's completion on the event loop, and
    /// completes with the response (or the error that ended the exchange). The connection is closed at the end.
    public static func send(
        _ method: HTTPVerb, _ path: String, at address: NodeAddress, username: String?, password: String?,
        form: [(String, String)]? = nil, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        timeoutMs: Int = ClientLimits.httpTimeoutMs, tls: TLSClientContext? = nil
    ) -> EventLoopFuture<HTTPResponse> {
        let promise = group.next().makePromise(of: HTTPResponse.self)
        let bootstrap = ClientBootstrap(group: group)
            .connectTimeout(.milliseconds(Int64(timeoutMs)))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    // HTTPS: the request waits in NIOSSL until the handshake and certificate check are done.
                    if let tls { try channel.pipeline.syncOperations.addHandler(tls.makeHandler(host: address.host)) }
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    try channel.pipeline.syncOperations.addHandler(ResponseCollector(promise: promise))
                }
            }
        let parts = requestParts(method, path, at: address, username: username, password: password, form: form)
        bootstrap.connect(host: address.host, port: address.port).whenComplete { result in
            switch result {
            case .failure(let error):
                promise.fail(HTTPError("cannot connect to \(address): \(error)"))
            case .success(let channel):
                let timer = channel.eventLoop.scheduleTask(in: .milliseconds(Int64(timeoutMs))) {
                    promise.fail(HTTPError("no response from \(address) within \(timeoutMs) ms"))
                    channel.close(promise: nil)
                }
                promise.futureResult.whenComplete { _ in
                    timer.cancel()
                    channel.close(promise: nil)
                }
                for part in parts.dropLast() { channel.write(part, promise: nil) }
                if let end = parts.last { channel.writeAndFlush(end, promise: nil) }
            }
        }
        return promise.futureResult
    }

    /// Head, optional form body and end of one request.
    private static func requestParts(
        _ method: HTTPVerb, _ path: String, at address: NodeAddress, username: String?, password: String?,
        form: [(String, String)]?
    ) -> [HTTPClientRequestPart] {
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: address.description)
        headers.add(name: "Connection", value: "close")
        headers.add(name: "User-Agent", value: "settee-client/1")
        if let username {
            headers.add(name: "Authorization", value: BasicAuth.header(user: username, password: password ?? ""))
        }
        var body: ByteBuffer?
        if let form {
            let encoded = form.map { "\(PercentEncoding.encode($0.0))=\(PercentEncoding.encode($0.1))" }
                .joined(separator: "&")
            headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
            body = ByteBuffer(string: encoded)
        }
        headers.add(name: "Content-Length", value: String(body?.readableBytes ?? 0))
        let head = HTTPRequestHead(
            version: .http1_1, method: HTTPMethod(rawValue: method.rawValue), uri: path, headers: headers)
        var parts: [HTTPClientRequestPart] = [.head(head)]
        if let body { parts.append(.body(.byteBuffer(body))) }
        parts.append(.end(nil))
        return parts
    }
}

/// Collects one response (head + body) and completes the promise at its end or at EOF.
final class ResponseCollector: ChannelInboundHandler {
    typealias InboundIn = HTTPClientResponsePart

    private let promise: EventLoopPromise<HTTPResponse>
    private var status = 0
    private var body: [UInt8] = []
    private var done = false

    init(promise: EventLoopPromise<HTTPResponse>) { self.promise = promise }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            status = Int(head.status.code)
        case .body(let buf):
            if body.count + buf.readableBytes > ClientLimits.maxHTTPResponseBody {
                finish(.failure(HTTPError("response body over \(ClientLimits.maxHTTPResponseBody) bytes")))
                context.close(promise: nil)
                return
            }
            body.append(contentsOf: buf.readableBytesView)
        case .end:
            finish(.success(HTTPResponse(status: status, body: body)))
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        finish(.failure(HTTPError("connection closed before a complete response")))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        finish(.failure(HTTPError("HTTP error: \(error)")))
        context.close(promise: nil)
    }

    private func finish(_ result: Result<HTTPResponse, any Error>) {
        guard !done else { return }
        done = true
        promise.completeWith(result)
    }
}
