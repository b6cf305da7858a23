import Logging
import NIOCore
import NIOEmbedded
import SetteeProtocol
import Synchronization
import Testing

@testable import SetteeClient

/// `KVClientHandler` coalesces flushes (ADR 0081): requests written while the loop runs one batch of work leave
/// in one flush, and none waits for a flush that never comes.
@Suite struct KVClientFlushTests {
    /// Counts the writes and flushes that reach the socket end of the pipeline.
    final class SocketSide: ChannelOutboundHandler {
        typealias OutboundIn = ByteBuffer
        var writes = 0
        var flushes = 0
        func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
            writes += 1
            context.write(data, promise: promise)
        }
        func flush(context: ChannelHandlerContext) {
            flushes += 1
            context.flush()
        }
    }

    static func request(_ key: String) -> OutboundRequest {
        OutboundRequest(
            frame: RequestFrame(opcode: .get, key: ByteBuffer(string: key)), complete: { _ in },
            deadline: .now() + .seconds(60))
    }

    @Test func requestsWrittenInOneTickLeaveInOneFlush() throws {
        let loop = EmbeddedEventLoop()
        let socket = SocketSide()
        let handler = KVClientHandler(logger: Logger(label: "test"), onConfigPush: { _ in })
        let channel = EmbeddedChannel(handlers: [socket, handler], loop: loop)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 11210)).wait()
        for key in ["a", "b", "c"] {
            channel.pipeline.syncOperations.writeAndFlush(NIOAny(Self.request(key)), promise: nil)
        }
        // Written, not yet flushed: the flush is the loop's next task.
        #expect(socket.writes == 3)
        #expect(socket.flushes == 0)
        #expect(try channel.readOutbound(as: ByteBuffer.self) == nil)
        loop.run()
        #expect(socket.flushes == 1)
        var opaques: [UInt32] = []
        while var out = try channel.readOutbound(as: ByteBuffer.self) {
            let frame = try #require(try FrameDecoder.decode(&out, maxBodyLength: 1 << 20))
            #expect(frame.opcode == .get)
            opaques.append(frame.opaque)
        }
        #expect(opaques.count == 3)
        // A request written alone later is flushed too, in a flush of its own.
        channel.pipeline.syncOperations.writeAndFlush(NIOAny(Self.request("d")), promise: nil)
        loop.run()
        #expect(socket.flushes == 2)
        #expect(try channel.readOutbound(as: ByteBuffer.self) != nil)
        _ = try? channel.finish()
    }

    /// What a request's completion was called with, in order.
    final class Outcomes: Sendable {
        let all = Mutex<[String]>([])
    }

    /// Proves a request whose flush was still queued when its connection closed (a node that went away) is failed
    /// once, as lost after send, and that the queued flush then runs on the closed channel without harm.
    @Test func aConnectionClosedBeforeTheQueuedFlushFailsTheRequestOnce() throws {
        let loop = EmbeddedEventLoop()
        let socket = SocketSide()
        let handler = KVClientHandler(logger: Logger(label: "test"), onConfigPush: { _ in })
        let channel = EmbeddedChannel(handlers: [socket, handler], loop: loop)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 11210)).wait()
        let outcomes = Outcomes()
        let request = OutboundRequest(
            frame: RequestFrame(opcode: .get, key: ByteBuffer(string: "k")),
            complete: { result in
                let what: String
                switch result {
                case .success: what = "answered"
                case .failure(let e): what = "\((e as? AttemptError)?.failure ?? .notSent)"
                }
                outcomes.all.withLock { $0.append(what) }
            },
            deadline: .now() + .seconds(60))
        channel.pipeline.syncOperations.writeAndFlush(NIOAny(request), promise: nil)
        #expect(socket.flushes == 0)
        _ = try? channel.close().wait()
        loop.run()
        #expect(outcomes.all.withLock { $0 } == ["connectionLostAfterSend"])
        #expect(!channel.isActive)
    }
}
