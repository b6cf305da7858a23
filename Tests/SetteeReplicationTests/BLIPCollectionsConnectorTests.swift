import SetteeBLIP
import SetteeJSON
import SetteeReplication
import Synchronization
import Testing

/// Several collections over one BLIP connection (ADR 0149), in memory: `BLIPCollectionsConnector` on the active side,
/// a `BLIPReplicationServer` whose `collections` resolver serves two `MemoryEndpoint`s on the passive side, over a
/// `BLIPSessionPair` (the real codec, no socket).
@Suite struct BLIPCollectionsConnectorTests {
    /// Opens each connection as a new pair whose server resolves `s.c1` and `s.c2`; counts the connections.
    final class CollectionsPairConnector: BLIPConnector {
        let c1: MemoryEndpoint
        let c2: MemoryEndpoint
        let opened = Atomic<Int>(0)

        init(c1: MemoryEndpoint, c2: MemoryEndpoint) {
            self.c1 = c1
            self.c2 = c2
        }

        func connect(handler: any BLIPRequestHandler) async throws -> any BLIPReplicationConnection {
            opened.add(1, ordering: .relaxed)
            let (c1, c2) = (self.c1, self.c2)
            let server = BLIPReplicationServer(
                endpoint: MemoryEndpoint("default"),
                collections: { name in name == "s.c1" ? c1 : name == "s.c2" ? c2 : nil })
            let pair = BLIPSessionPair(client: handler, server: server)
            let running = Task {
                _ = await pair.run()
                server.close()
            }
            return BLIPReplicationServerTests.PairConnection(pair: pair, running: running)
        }
    }

    static func ids(_ e: MemoryEndpoint) -> Set<String> { e.store.withLock { Set($0.docs.keys) } }

    /// Proves: a continuous pull of `s.c2` and a push into `s.c1` share one connection (one `getCollections`), each
    /// collection's documents go only where they belong, each push's checkpoint is the collection's (a second push
    /// sends nothing), and a name the passive side does not resolve is refused with 404.
    @Test func aPullAndAPushOfTwoCollectionsShareOneConnection() async throws {
        let (c1, c2) = (MemoryEndpoint("c1"), MemoryEndpoint("c2"))
        let (local1, local2) = (MemoryEndpoint("local1"), MemoryEndpoint("local2"))
        for i in 0..<12 { local1.put("a\(i)", rev: "1-a\(i)", body: [("n", .int(i))]) }
        for i in 0..<9 { c2.put("b\(i)", rev: "1-b\(i)", body: [("n", .int(i))]) }
        let base = CollectionsPairConnector(c1: c1, c2: c2)
        let shared = BLIPCollectionsConnector(connector: base, collections: ["s.c1", "s.c2", "s.c3"])
        let pull = Replicator(
            blip: try #require(shared.connector(for: "s.c2", role: .pullSource)), remoteIdentity: "memory:c2",
            local: local2, role: .pullSource, options: ReplicatorOptions(continuous: true))
        pull.start()
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(20)
        while Self.ids(local2).count < 9 && clock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(Self.ids(local2) == Set((0..<9).map { "b\($0)" }))

        func push() async throws -> ReplicationStatus {
            let r = Replicator(
                blip: try #require(shared.connector(for: "s.c1", role: .pushTarget)), remoteIdentity: "memory:c1",
                local: local1, role: .pushTarget, options: ReplicatorOptions(batchSize: 5))
            r.start()
            return await r.waitUntilStopped()
        }
        let first = try await push()
        #expect(first.lastError == nil && first.docsWritten == 12, "\(first)")
        let again = try await push()
        #expect(again.lastError == nil && again.docsWritten == 0, "\(again)")
        #expect(Self.ids(c1) == Set((0..<12).map { "a\($0)" }))
        #expect(Self.ids(c2) == Set((0..<9).map { "b\($0)" }))
        #expect(c1.store.withLock { $0.locals.keys.contains { $0.hasPrefix("checkpoint/cp-") } })
        #expect(base.opened.load(ordering: .relaxed) == 1)
        #expect(await shared.connectionsOpened == 1)

        let unknown = Replicator(
            blip: try #require(shared.connector(for: "s.c3", role: .pullSource)), remoteIdentity: "memory:c3",
            local: MemoryEndpoint("local3"), role: .pullSource, options: ReplicatorOptions(maxAttempts: 1))
        unknown.start()
        let refused = await unknown.waitUntilStopped()
        if case .http(let status, _, _) = refused.lastError {
            #expect(status == 404)
        } else {
            Issue.record("expected a 404, got \(refused)")
        }
        #expect(shared.connector(for: "s.c9", role: .pullSource) == nil)
        await pull.stop()
    }

    /// Proves: the passive side runs one subscription per collection index, so continuous pulls of two collections
    /// over one connection both get their own collection's documents (and nothing of the other's).
    @Test func twoPullsOverOneConnectionEachGetTheirCollection() async throws {
        let (c1, c2) = (MemoryEndpoint("c1"), MemoryEndpoint("c2"))
        for i in 0..<7 { c1.put("x\(i)", rev: "1-x\(i)", body: [("n", .int(i))]) }
        for i in 0..<5 { c2.put("y\(i)", rev: "1-y\(i)", body: [("n", .int(i))]) }
        let base = CollectionsPairConnector(c1: c1, c2: c2)
        let shared = BLIPCollectionsConnector(connector: base, collections: ["s.c1", "s.c2"])
        let (l1, l2) = (MemoryEndpoint("l1"), MemoryEndpoint("l2"))
        var pulls: [Replicator] = []
        for (name, local) in [("s.c1", l1), ("s.c2", l2)] {
            let r = Replicator(
                blip: try #require(shared.connector(for: name, role: .pullSource)), remoteIdentity: "memory:" + name,
                local: local, role: .pullSource, options: ReplicatorOptions(continuous: true))
            r.start()
            pulls.append(r)
        }
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(20)
        while (Self.ids(l1).count < 7 || Self.ids(l2).count < 5) && clock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(Self.ids(l1) == Set((0..<7).map { "x\($0)" }))
        #expect(Self.ids(l2) == Set((0..<5).map { "y\($0)" }))
        #expect(base.opened.load(ordering: .relaxed) == 1)
        for r in pulls { await r.stop() }
    }
}
