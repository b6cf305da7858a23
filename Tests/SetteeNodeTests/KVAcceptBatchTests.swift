import Foundation
import NIOCore
import NIOPosix
import SetteeClusterMap
import SetteeCore
import SetteeRegistry
import Synchronization
import Testing

@testable import SetteeNode

/// The KV listener's accept batch (issue 16): a burst of connects is accepted a few at a time, so a client on the
/// listener's event loop waits for at most `Limits.kvAcceptsPerRead` connection setups per tick.
@Suite struct KVAcceptBatchTests {
    /// Proves the bound is small (a batch of set-ups costs at most a fraction of a millisecond) and is the one the
    /// started listener uses, with the named backlog, and that a burst larger than many batches is still accepted
    /// in full.
    @Test func theListenerAcceptsAFewConnectionsPerReadAndStillTakesABurst() async throws {
        #expect(Limits.kvAcceptsPerRead >= 1 && Limits.kvAcceptsPerRead <= 8)
        #expect(Limits.kvListenBacklog >= 128)
        let dir = NSTemporaryDirectory() + "settee-kvaccept-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let info = NodeInfo(
            otpNode: NodeID("n0@127.0.0.1"), host: "127.0.0.1", adminPort: 0, kvPort: 0, viewsPort: 0, nodeUUID: "")
        let registry = try NodeRegistry(dataDirectory: dir, node: info, logger: quietLogger)
        let node = KVNode(registry: registry, logger: quietLogger)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let server = try await KVServer.start(node: node, host: "127.0.0.1", port: 0, group: group)
        let perRead = try await server.channel.getOption(ChannelOptions.maxMessagesPerRead).get()
        let backlog = try await server.channel.getOption(ChannelOptions.backlog).get()
        #expect(perRead == UInt(Limits.kvAcceptsPerRead))
        #expect(backlog == Limits.kvListenBacklog)

        let burst = 20 * Limits.kvAcceptsPerRead
        let port = server.port
        let clients = try await Self.connect(burst, port: port, group: group)
        let accepted = try await Self.accepted(burst, by: node, polls: 500)
        #expect(accepted == burst, "accepted \(accepted) of \(burst) connects")
        try await Self.stop(clients, server, node, group)
    }

    /// Proves the listener obeys its `AcceptPacer` on real sockets (ADR 0062): past the saved-up burst it accepts no
    /// faster than its rate (connects wait in the backlog), and still accepts every connect in the end.
    @Test func aPacedListenerTakesItsBurstThenWaitsAndStillAcceptsAll() async throws {
        let dir = NSTemporaryDirectory() + "settee-kvpace-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let info = NodeInfo(
            otpNode: NodeID("n0@127.0.0.1"), host: "127.0.0.1", adminPort: 0, kvPort: 0, viewsPort: 0, nodeUUID: "")
        let registry = try NodeRegistry(dataDirectory: dir, node: info, logger: quietLogger)
        let rate = 100
        let node = KVNode(registry: registry, logger: quietLogger, acceptsPerSecond: rate)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let server = try await KVServer.start(node: node, host: "127.0.0.1", port: 0, group: group)
        let burst = Limits.kvAcceptBurst + 40
        let port = server.port
        let began = ContinuousClock.now
        let clients = try await Self.connect(burst, port: port, group: group)
        // However slow the machine, accepts in the first t seconds are at most burst + rate × t + one batch.
        let early = node.counters.totalConnections.load(ordering: .relaxed)
        let elapsed = (ContinuousClock.now - began).components
        let seconds = Double(elapsed.seconds) + Double(elapsed.attoseconds) / 1e18
        #expect(
            Double(early) <= Double(Limits.kvAcceptBurst + Limits.kvAcceptsPerRead) + Double(rate) * seconds + 1,
            "accepted \(early) in \(seconds) s at \(rate)/s")
        let accepted = try await Self.accepted(burst, by: node, polls: 1_000)
        #expect(accepted == burst, "accepted \(accepted) of \(burst) connects")
        try await Self.stop(clients, server, node, group)
    }

    /// `n` connects to `port` at once, each its own task (a burst as an SDK pool or an attacker makes).
    static func connect(_ n: Int, port: Int, group: MultiThreadedEventLoopGroup) async throws -> [any Channel] {
        try await withThrowingTaskGroup(of: (any Channel).self) { tasks in
            for _ in 0..<n {
                tasks.addTask { try await ClientBootstrap(group: group).connect(host: "127.0.0.1", port: port).get() }
            }
            var all: [any Channel] = []
            for try await c in tasks { all.append(c) }
            return all
        }
    }

    /// The node's accepted-connection count once it reaches `n`, or after `polls` waits of 10 ms.
    static func accepted(_ n: Int, by node: KVNode, polls: Int) async throws -> Int {
        var accepted = 0
        for _ in 0..<polls {
            accepted = node.counters.totalConnections.load(ordering: .relaxed)
            if accepted >= n { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        return accepted
    }

    static func stop(
        _ clients: [any Channel], _ server: KVServer, _ node: KVNode, _ group: MultiThreadedEventLoopGroup
    ) async throws {
        for c in clients { try? await c.close() }
        await server.close()
        node.shutdownPool()
        try await group.shutdownGracefully()
    }
}
