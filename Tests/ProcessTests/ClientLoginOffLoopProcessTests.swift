import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import SetteeAuth
import SetteeClient
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

/// The smart client's SCRAM login runs its PBKDF2 off the connection's event loop (`LoginHashing`).
@Suite(.serialized, .onTestThreads) struct ClientLoginOffLoopProcessTests {
    /// Proves a slow login does not stall the loop it runs on: a fake node on 127.0.0.1 asks for 20,000 PBKDF2
    /// rounds (seconds in a debug build; a client accepts up to `Limits.scramClientMaxIterations`), and a timer on
    /// the client's only event loop, standing for every other connection of that loop, keeps firing every 2 ms
    /// while the client logs in. The login itself completes (the fake checks the proof as a node does). Before, the PBKDF2 ran inside the
    /// loop's read callback, so the timer's longest gap was the whole PBKDF2 time.
    @Test func slowPBKDF2DoesNotStallTheEventLoop() async throws {
        let iterations = 20_000
        let began = ContinuousClock.now
        let keys = ScramKeys.derive(
            password: "p", salt: Array("slow-salt".utf8), iterations: iterations, hash: .sha512)
        let pbkdf2 = ContinuousClock.now - began
        let portBox = NIOLockedValueBox(0)
        let fake = try FakeKVNode { f in
            switch f.opcode {
            case .saslListMechs, .saslAuth, .saslStep: return FakeKVNode.sasl(f, keys: [keys])
            default:
                return FakeKVNode.handshake(
                    f,
                    config: {
                        FakeKVNode.forgedConfig(kvPort: portBox.withLockedValue { $0 })
                    })
            }
        }
        defer { fake.stop() }
        portBox.withLockedValue { $0 = fake.port }

        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let ticks = NIOLockedValueBox<[NIODeadline]>([])
        let ticker = loop.scheduleRepeatedTask(initialDelay: .milliseconds(2), delay: .milliseconds(2)) { _ in
            ticks.withLockedValue { $0.append(.now()) }
        }
        let options = ClientOptions(
            seeds: [.kv(NodeAddress(host: "127.0.0.1", port: fake.port))], bucket: "demo", username: "u",
            password: "p", operationTimeoutMs: 30_000, connectTimeoutMs: 30_000, configPollIntervalMs: 0)
        let loginStart = NIODeadline.now()
        let client = try await BucketClient.connect(options, group: group)
        let loginEnd = NIODeadline.now()
        await client.close()
        ticker.cancel()
        try await group.shutdownGracefully()

        #expect(fake.received.withLockedValue { $0 }.contains(.saslStep))
        let during = ticks.withLockedValue { $0 }.filter { $0 >= loginStart && $0 <= loginEnd }
        var longest = TimeAmount.zero
        for (a, b) in zip(during, during.dropFirst()) { longest = max(longest, b - a) }
        let pbkdf2Ms = Double(pbkdf2.components.attoseconds) / 1e15 + Double(pbkdf2.components.seconds) * 1000
        let longestMs = Double(longest.nanoseconds) / 1e6
        print("PBKDF2 \(iterations) rounds: \(pbkdf2Ms) ms; longest loop gap during login: \(longestMs) ms")
        // Meaningful only when the PBKDF2 is slow enough to see (about 3 s in a debug build on this machine).
        #expect(pbkdf2Ms > 50)
        #expect(during.count >= 3)
        #expect(longestMs < pbkdf2Ms / 2, "longest gap \(longestMs) ms vs PBKDF2 \(pbkdf2Ms) ms")
    }
}
