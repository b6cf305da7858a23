import NIOCore
import NIOEmbedded
import NIOPosix
import SetteeCore
import SetteeProtocol
import Testing

@testable import SetteeNode

/// The per-connection set-up of the KV port (issue 16): what a connect flood costs the node for each connection.
@Suite struct KVConnectionSetupTests {
    /// Proves the deadline spread needs no random numbers: any 1,000 consecutive connection counts (here across the
    /// 2^32 reduction and Int's wrap) give units in `[0, 1)` that put 90-110 deadlines in every tenth of the window,
    /// closer to even than the random draw's 15 % bound (HandshakeDeadlineTests).
    @Test func consecutiveConnectionsSpreadTheirDeadlinesEvenly() {
        for start in [0, 4_294_967_000, Int.max - 500, Int.min] {
            var buckets = [Int](repeating: 0, count: 10)
            for i in 0..<1_000 {
                let unit = HandshakeDeadline.unit(sequence: start &+ i)
                #expect(unit >= 0 && unit < 1, "sequence \(start &+ i): \(unit)")
                buckets[min(9, max(0, Int(unit * 10)))] += 1
            }
            #expect(buckets.allSatisfy { $0 >= 90 && $0 <= 110 }, "start \(start): \(buckets)")
        }
        // Neighbours land far apart: two connections accepted together do not expire together.
        let gap = abs(HandshakeDeadline.unit(sequence: 7) - HandshakeDeadline.unit(sequence: 8))
        #expect(gap > 0.3)
    }

    /// Proves an idle connection holds no output storage (5,000 strangers held 20 MB of 4 KiB buffers) and that the
    /// first frame gets the usual buffer and its answer.
    @Test func anIdleConnectionHoldsNoOutputBuffer() async throws {
        let f = try await KVHandlerChannelTests.Fixture(open: true)
        let capacity = { @Sendable in
            try f.channel.pipeline.syncOperations.handler(type: KVConnectionHandler.self).out.capacity
        }
        let idle = try await f.channel.eventLoop.submit(capacity).get()
        #expect(idle == 0)
        try await f.channel.writeInbound(f.request(.noop))
        let frames = try await f.responses()
        #expect(frames.count == 1 && frames.first?.status == .success)
        let used = try await f.channel.eventLoop.submit(capacity).get()
        #expect(used >= KVConnectionHandler.outCapacity)
        await f.finish()
    }

    /// Proves the options the child initializer sets synchronously are the ones a KV connection needs: no Nagle
    /// delay, 16 reads per wake-up, the output water marks of `Limits` and the shared receive allocator.
    @Test func childOptionsAreSetOnTheConnectionsLoop() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let server = try await ServerBootstrap(group: group).bind(host: "127.0.0.1", port: 0).get()
        let port = try #require(server.localAddress?.port)
        let client = try await ClientBootstrap(group: group).connect(host: "127.0.0.1", port: port).get()
        try await client.eventLoop.submit { try KVServer.setChildOptions(client) }.get()
        let nodelay = try await client.getOption(ChannelOptions.socketOption(.tcp_nodelay)).get()
        let perRead = try await client.getOption(ChannelOptions.maxMessagesPerRead).get()
        let marks = try await client.getOption(ChannelOptions.writeBufferWaterMark).get()
        #expect(nodelay != 0)
        #expect(perRead == 16)
        #expect(marks.low == Limits.kvOutputLowWaterBytes && marks.high == Limits.kvOutputHighWaterBytes)
        try await client.close()
        try await server.close()
        try await group.shutdownGracefully()
    }
}
