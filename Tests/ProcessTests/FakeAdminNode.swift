import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import SetteeTLS

/// A rogue "node" for `/controller/addNode` on 127.0.0.1: an HTTP(S) listener that answers the two calls a join
/// makes (`GET /settee/internal/node`, `POST /settee/internal/join`) as a fresh node would, and records every
/// request it gets, bodies included, so a test can tell whether the cluster document (and its secret) reached it.
/// With TLS it presents its own self-signed certificate.
final class FakeAdminNode: Sendable {
    struct Received: Sendable {
        var method: String
        var uri: String
        var body: [UInt8]
    }

    let port: Int
    /// `sha256:` fingerprint of the certificate it presents (nil without TLS).
    let fingerprint: String?
    /// Requests received, in order.
    let requests = NIOLockedValueBox<[Received]>([])
    /// TCP connections accepted (a refused TLS handshake still counts one).
    let connections = NIOLockedValueBox(0)
    private let channel: any Channel

    init(tls: Bool) async throws {
        let identity = tls ? try SelfSignedIdentity(commonName: "rogue node", hosts: ["127.0.0.1"]) : nil
        let context = try identity.map { try NIOSSLContext(configuration: $0.serverConfiguration()) }
        fingerprint = identity?.fingerprint
        let requests = self.requests
        let connections = self.connections
        let box = NIOLockedValueBox<Int>(0)
        let fingerprint = self.fingerprint
        channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    connections.withLockedValue { $0 += 1 }
                    if let context {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                    }
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(
                        Responder(
                            requests: requests, port: { box.withLockedValue { $0 } }, fingerprint: fingerprint))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        port = channel.localAddress?.port ?? 0
        box.withLockedValue { $0 = port }
    }

    func close() async { try? await channel.close() }

    /// Answers as an uninitialised node: its node info for both join calls, 404 for anything else.
    private final class Responder: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart
        let requests: NIOLockedValueBox<[Received]>
        let port: @Sendable () -> Int
        let fingerprint: String?
        var head: HTTPRequestHead?
        var body: [UInt8] = []

        init(requests: NIOLockedValueBox<[Received]>, port: @escaping @Sendable () -> Int, fingerprint: String?) {
            self.requests = requests
            self.port = port
            self.fingerprint = fingerprint
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let h):
                head = h
                body = []
            case .body(var b):
                body += b.readBytes(length: b.readableBytes) ?? []
            case .end:
                guard let head else { return }
                requests.withLockedValue {
                    $0.append(Received(method: head.method.rawValue, uri: head.uri, body: body))
                }
                let p = port()
                var info = """
                    {"otpNode":"rogue_\(p)@127.0.0.1","host":"127.0.0.1","adminPort":\(p),"kvPort":\(p),\
                    "viewsPort":\(p),"nodeUUID":"0123456789abcdef0123456789abcdef","servesViews":false
                    """
                if let fingerprint { info += ",\"adminTLSPort\":\(p),\"tlsFingerprint\":\"\(fingerprint)\"" }
                info += "}"
                let known = head.uri.hasPrefix("/settee/internal/node") || head.uri.hasPrefix("/settee/internal/join")
                let bytes = Array((known ? info : "{}").utf8)
                var headers = HTTPHeaders()
                headers.add(name: "Content-Type", value: "application/json")
                headers.add(name: "Content-Length", value: "\(bytes.count)")
                let status: HTTPResponseStatus = known ? .ok : .notFound
                context.write(
                    wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))),
                    promise: nil)
                context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: bytes)))), promise: nil)
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            }
        }
    }
}
