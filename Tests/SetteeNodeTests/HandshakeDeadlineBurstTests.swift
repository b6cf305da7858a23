import NIOCore
import NIOEmbedded
import SetteeCore
import Synchronization
import Testing

@testable import SetteeNode

/// The KV handshake deadline on a burst of strangers, through real `KVConnectionHandler`s on one testing event loop
/// (ADR 0042): the pure `HandshakeDeadline.delay` is tested in `HandshakeDeadlineTests`; this proves the handler uses
/// it.
@Suite(.serialized) struct HandshakeDeadlineBurstTests {
    /// Proves 1,000 strangers that connected in the same tick are closed over the spread window (10-15 s for a 10 s
    /// deadline), at most a tenth of them in any 100 ms step (about 20 expected), none before the deadline and all by
    /// its end. Before the spread, every one expired at exactly 10 s, in one step.
    @Test func aBurstOfStrangersIsNotClosedInOneTick() async throws {
        let f = try await KVHandlerChannelTests.Fixture(open: false, handshakeDeadline: .seconds(10))
        let loop = f.channel.testingEventLoop
        let node = f.node
        var strangers: [NIOAsyncTestingChannel] = []
        for i in 0..<1_000 {
            let c = try await NIOAsyncTestingChannel(loop: loop) { channel in
                try channel.pipeline.syncOperations.addHandler(KVConnectionHandler(node: node))
            }
            try await c.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 41_000 + i))
            strangers.append(c)
        }
        await loop.advanceTime(by: .milliseconds(9_990))
        #expect(strangers.allSatisfy { $0.isActive }, "a stranger was closed before the deadline")
        var open = strangers.count
        var mostInOneStep = 0
        let windowMs = 10_000 * Limits.kvHandshakeDeadlineSpreadPercent / 100
        for _ in 0...(windowMs / 100 + 1) {
            await loop.advanceTime(by: .milliseconds(100))
            let now = strangers.filter(\.isActive).count
            mostInOneStep = max(mostInOneStep, open - now)
            open = now
        }
        #expect(open == 0, "\(open) strangers still open after the spread window")
        #expect(mostInOneStep <= strangers.count / 10, "\(mostInOneStep) strangers closed in one 100 ms step")
        #expect(node.counters.handshakeTimeouts.load(ordering: .relaxed) >= 1_000)
        for c in strangers { _ = try? await c.finish() }
        await f.finish()
    }
}
