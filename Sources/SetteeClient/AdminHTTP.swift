import NIOCore
import NIOHTTP1
import NIOPosix
import SetteeCore

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
public enum AdminHTTP {
    public static func request(
        _ method: HTTPVerb, _ path: String, at address: NodeAddress, username: String?, password: String?,
        form: [(String, String)]? = nil, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        timeoutMs: Int = ClientLimits.httpTimeoutMs
    ) async throws -> HTTPResponse {
        let promise = group.next().makePromise(of: HTTPResponse.self)
        let bootstrap = ClientBootstrap(group: group)
            .connectTimeout(.milliseconds(Int64(timeoutMs)))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    try channel.pipeline.syncOperations.addHandler(ResponseCollector(promise: promise))
                }
            }
        let channel: any Channel
        do {
            channel = try await bootstrap.connect(host: address.host, port: address.port).get()
        } catch {
            let e = HTTPError("cannot connect to \(address): \(error)")
            promise.fail(e)
            throw e
        }
        let timer = channel.eventLoop.scheduleTask(in: .milliseconds(Int64(timeoutMs))) {
            promise.fail(HTTPError("no response from \(address) within \(timeoutMs) ms"))
            channel.close(promise: nil)
        }
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: address.description)
        headers.add(name: "Connection", value: "close")
        headers.add(name: "User-Agent", value: "settee-client/1")
        if let username {
            headers.add(name: "Authorization", value: "Basic " + base64(Array("\(username):\(password ?? "")".utf8)))
        }
        var body: ByteBuffer?
        if let form {
            let encoded = form.map { "\(percentEncode($0.0))=\(percentEncode($0.1))" }.joined(separator: "&")
            headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
            body = ByteBuffer(string: encoded)
        }
        headers.add(name: "Content-Length", value: String(body?.readableBytes ?? 0))
        let head = HTTPRequestHead(
            version: .http1_1, method: HTTPMethod(rawValue: method.rawValue), uri: path, headers: headers)
        channel.write(HTTPClientRequestPart.head(head), promise: nil)
        if let body { channel.write(HTTPClientRequestPart.body(.byteBuffer(body)), promise: nil) }
        channel.writeAndFlush(HTTPClientRequestPart.end(nil), promise: nil)
        defer {
            timer.cancel()
            channel.close(promise: nil)
        }
        return try await promise.futureResult.get()
    }

    /// `application/x-www-form-urlencoded` / path-segment escaping of everything but unreserved bytes.
    public static func percentEncode(_ s: String) -> String {
        var out = ""
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(b))
            default:
                let hex = String(b, radix: 16, uppercase: true)
                out += "%" + (hex.count == 1 ? "0" + hex : hex)
            }
        }
        return out
    }

    static func base64(_ bytes: [UInt8]) -> String {
        let table = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        var out: [UInt8] = []
        var i = 0
        while i < bytes.count {
            let b0 = bytes[i]
            let b1 = i + 1 < bytes.count ? bytes[i + 1] : 0
            let b2 = i + 2 < bytes.count ? bytes[i + 2] : 0
            out.append(table[Int(b0 >> 2)])
            out.append(table[Int((b0 & 0x03) << 4 | b1 >> 4)])
            out.append(i + 1 < bytes.count ? table[Int((b1 & 0x0f) << 2 | b2 >> 6)] : UInt8(ascii: "="))
            out.append(i + 2 < bytes.count ? table[Int(b2 & 0x3f)] : UInt8(ascii: "="))
            i += 3
        }
        return String(decoding: out, as: UTF8.self)
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
