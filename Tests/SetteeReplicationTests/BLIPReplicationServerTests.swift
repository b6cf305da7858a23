import SetteeBLIP
import SetteeJSON
import SetteeReplication
import Synchronization
import Testing

/// The passive side of the BLIP replication protocol (`BLIPReplicationServer`, ADR 0128) against the active one
/// (`BLIPEndpoint` in a `Replicator`), over an in-memory `BLIPSessionPair` (the real codec, no socket), both over
/// `MemoryEndpoint`s.
@Suite struct BLIPReplicationServerTests {
    /// Opens each connection as a new `BLIPSessionPair` whose server side is a `BLIPReplicationServer` over `served`.
    struct PairConnector: BLIPConnector {
        let served: MemoryEndpoint

        func connect(handler: any BLIPRequestHandler) async throws -> any BLIPReplicationConnection {
            let server = BLIPReplicationServer(endpoint: served)
            let pair = BLIPSessionPair(client: handler, server: server)
            let running = Task {
                _ = await pair.run()
                server.close()
            }
            return PairConnection(pair: pair, running: running)
        }
    }

    struct PairConnection: BLIPReplicationConnection {
        let pair: BLIPSessionPair
        let running: Task<Void, Never>
        var peer: any BLIPPeer { pair.client }
        func close(code: UInt16) async {
            await pair.client.close(code: code)
            await running.value
        }
        func waitUntilClosed() async { _ = await pair.client.waitUntilEnded() }
    }

    /// A peer that is never reached (the requests tested send nothing back).
    struct NoPeer: BLIPPeer {
        func send(_ request: BLIPMessage) async throws -> BLIPMessage? { throw BLIPConnectionError.closed }
    }

    static func run(_ local: MemoryEndpoint, _ served: MemoryEndpoint, _ role: BLIPEndpoint.Role) async
        -> ReplicationStatus
    {
        let replicator = Replicator(
            blip: PairConnector(served: served), remoteIdentity: "memory:" + served.identity, local: local, role: role,
            options: ReplicatorOptions(batchSize: 7))
        replicator.start()
        return await replicator.waitUntilStopped()
    }

    static func leaves(_ endpoint: MemoryEndpoint, _ id: String) -> [String] {
        endpoint.store.withLock { $0.docs[id]?.leaves ?? [] }
    }

    /// Proves a push and a pull through the passive side carry every revision (both branches of a conflict made on
    /// the two sides included, so both hold the same leaves), checkpoint on the passive side
    /// (`_local/checkpoint/cp-…`), and that a second push and pull find nothing to do.
    @Test func pushAndPullThroughThePassiveSide() async throws {
        let (a, b) = (MemoryEndpoint("a"), MemoryEndpoint("b"))
        for i in 0..<30 { a.put("a\(i)", rev: "1-a\(i)", body: [("n", .int(i))]) }
        for i in 0..<20 { b.put("b\(i)", rev: "1-b\(i)", body: [("n", .int(i))]) }
        a.put("c", rev: "1-c", body: [("v", .string("base"))])
        b.put("c", rev: "1-c", body: [("v", .string("base"))])
        a.put("c", rev: "2-aaaa", parent: "1-c", body: [("v", .string("A"))])
        b.put("c", rev: "2-bbbb", parent: "1-c", body: [("v", .string("B"))])

        let push = await Self.run(a, b, .pushTarget)
        #expect(push.lastError == nil && push.docsWritten == 31, "push: \(push)")
        let pull = await Self.run(a, b, .pullSource)
        #expect(pull.lastError == nil, "pull: \(pull)")
        for i in 0..<30 { #expect(Self.leaves(b, "a\(i)") == ["1-a\(i)"]) }
        for i in 0..<20 { #expect(Self.leaves(a, "b\(i)") == ["1-b\(i)"]) }
        #expect(Self.leaves(a, "c") == ["2-aaaa", "2-bbbb"] && Self.leaves(b, "c") == ["2-aaaa", "2-bbbb"])
        let checkpoints = b.store.withLock { $0.locals.keys.filter { $0.hasPrefix("checkpoint/cp-") } }
        #expect(checkpoints.count == 2)

        let again = await Self.run(a, b, .pushTarget)
        #expect(again.lastError == nil && again.docsWritten == 0, "second push: \(again)")
        let pullAgain = await Self.run(a, b, .pullSource)
        #expect(pullAgain.lastError == nil && pullAgain.docsWritten == 0, "second pull: \(pullAgain)")
    }

    /// Proves the passive side's refusals: an unknown profile is BLIP/404, a `setCheckpoint` with a stale `rev` is
    /// 409, a second `subChanges` on one connection is 409, a `getAttachment` of nothing in flight is 403, and the
    /// subprotocol chosen is the first offered that the connector speaks.
    @Test func refusals() async throws {
        let served = MemoryEndpoint("b")
        let server = BLIPReplicationServer(endpoint: served)
        func ask(_ profile: String, _ properties: [(String, String)] = [], body: String = "") async -> BLIPMessage {
            await server.handle(
                BLIPMessage(
                    number: 1,
                    properties: [(name: "Profile", value: profile)] + properties.map { (name: $0.0, value: $0.1) },
                    body: Array(body.utf8)), peer: NoPeer())
        }
        let unknown = await ask("frobnicate")
        #expect(unknown.type == .error && unknown["Error-Domain"] == "BLIP" && unknown["Error-Code"] == "404")
        let missing = await ask("getCheckpoint", [("client", "cp-x")])
        #expect(missing.type == .error && missing["Error-Code"] == "404")
        let first = await ask("setCheckpoint", [("client", "cp-x")], body: #"{"remote":5}"#)
        #expect(first.type == .response && first["rev"] == "0-1")
        let stale = await ask("setCheckpoint", [("client", "cp-x"), ("rev", "0-7")], body: #"{"remote":6}"#)
        #expect(stale.type == .error && stale["Error-Code"] == "409")
        let got = await ask("getCheckpoint", [("client", "cp-x")])
        #expect(got["rev"] == "0-1" && (try? JSON.parse(got.body))?["remote"]?.intValue == 5)
        let sub = await ask("subChanges")
        #expect(sub.type == .response)
        let second = await ask("subChanges")
        #expect(second.type == .error && second["Error-Code"] == "409")
        let attachment = await ask("getAttachment", [("digest", "sha1-AAAA")])
        #expect(attachment.type == .error && attachment["Error-Code"] == "403")
        server.close()
        #expect(
            BLIPReplicationServer.subprotocol(offered: "chat, BLIP_3+CBMobile_2 ,BLIP_3+CBMobile_3")
                == "BLIP_3+CBMobile_2")
        #expect(BLIPReplicationServer.subprotocol(offered: "chat") == nil)
        #expect(BLIPReplicationServer.subprotocol(offered: nil) == nil)
    }
}
