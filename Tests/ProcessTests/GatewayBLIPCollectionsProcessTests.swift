import Foundation
import NIOCore
import NIOHTTP1
import SetteeCore
import SetteeJSON
import SetteeReplication
import SetteeTestSupport
import Testing

/// BLIP over several collections (ADR 0149): a real `settee-server` with scope `tenant` and collections `c1`, `c2`,
/// a real `settee-gateway` serving database `db` over both, and the project's BLIP replicator running one
/// collection's push and the other's pull over one WebSocket (`BLIPCollectionsConnector`).
@Suite(.serialized, .onTestThreads) struct GatewayBLIPCollectionsProcessTests {
    static func ids(_ url: String) async throws -> Set<String> {
        try await GatewayCollectionsProcessTests.ids(url)
    }

    static func docs(_ prefix: String, _ count: Int, channel: (Int) -> String = { _ in "one" }) -> [JSON] {
        (0..<count).map {
            JSON.object([("_id", .string("\(prefix)-\($0)")), ("channels", .array([.string(channel($0))]))])
        }
    }

    /// A replicator of `collection` over the shared connection, with `local` (a walrus database of the gateway) as
    /// its local side.
    static func replicator(
        _ shared: BLIPCollectionsConnector, _ collection: String, role: BLIPEndpoint.Role, local: String,
        remote: String, continuous: Bool, filter: ReplicationFilter? = nil
    ) throws -> Replicator {
        let connector = try #require(shared.connector(for: collection, role: role))
        return Replicator(
            blip: connector, remoteIdentity: remote, local: try RemoteEndpoint(url: local), role: role,
            options: ReplicatorOptions(continuous: continuous, filter: filter, batchSize: 50, maxAttempts: 3))
    }

    static func run(_ r: Replicator) async {
        r.start()
        for await s in r.status where s.activity == .stopped { break }
        #expect(r.currentStatus.lastError == nil, "\(r.currentStatus)")
        #expect(r.currentStatus.docWriteFailures == 0)
    }

    /// Proves: over one WebSocket (one `_blipsync` connection, one `getCollections`), a continuous push into
    /// `tenant.c1` and a continuous pull of `tenant.c2` filtered to channel `one` run at once, each keyspace holding
    /// exactly its documents and the pull getting only c2's channel-`one` documents; then, on a new shared
    /// connection, the reverse (push into c2, pull of c1) one-shot; a second push of the same source sends nothing
    /// (its checkpoint is c2's); and a collection the database does not serve is refused (404) to its endpoint.
    @Test func pushToOneCollectionAndPullAnotherOverOneConnection() async throws {
        let (server, gateway) = try await GatewayCollectionsProcessTests.gatewayOverTenantCollections(
            "gw-blip-collections", peers: ["src1", "src2", "dst1", "dst2"])
        defer {
            gateway.stop()
            server.stopAndRemove()
        }
        let admin = "http://127.0.0.1:\(gateway.adminPort)"
        let c1 = admin + "/db.tenant.c1"
        let c2 = admin + "/db.tenant.c2"
        let ws = "ws://127.0.0.1:\(gateway.adminPort)/db"

        _ = try await GatewayReplicationProcessTests.bulkDocs(admin + "/src1", Self.docs("a", 30), newEdits: true)
        _ = try await GatewayReplicationProcessTests.bulkDocs(
            c2, Self.docs("b", 20) { $0 % 2 == 0 ? "one" : "two" }, newEdits: true)
        let wantA = Set((0..<30).map { "a-\($0)" })
        let allB = Set((0..<20).map { "b-\($0)" })
        let oneB = Set((0..<20).filter { $0 % 2 == 0 }.map { "b-\($0)" })

        // Continuous push into c1 and pull of c2 (channel `one`), sharing one connection.
        let shared = BLIPCollectionsConnector(
            connector: try WebSocketBLIPConnector(databaseURL: ws), collections: ["tenant.c1", "tenant.c2"])
        let push = try Self.replicator(
            shared, "tenant.c1", role: .pushTarget, local: admin + "/src1", remote: ws + ".tenant.c1",
            continuous: true)
        let pull = try Self.replicator(
            shared, "tenant.c2", role: .pullSource, local: admin + "/dst2", remote: ws + ".tenant.c2",
            continuous: true, filter: .channels(["one"]))
        push.start()
        pull.start()
        #expect(try await GatewayCollectionsProcessTests.awaitIDs(c1, wantA) == wantA)
        #expect(try await GatewayCollectionsProcessTests.awaitIDs(admin + "/dst2", oneB) == oneB)
        #expect(await shared.connectionsOpened == 1)
        await push.stop()
        await pull.stop()
        #expect(try await Self.ids(c2) == allB)
        #expect(try await Self.ids(admin + "/src1") == wantA)

        // The reverse, one-shot, on a new shared connection.
        _ = try await GatewayReplicationProcessTests.bulkDocs(admin + "/src2", Self.docs("c", 15), newEdits: true)
        let wantC = Set((0..<15).map { "c-\($0)" })
        let reverse = BLIPCollectionsConnector(
            connector: try WebSocketBLIPConnector(databaseURL: ws), collections: ["tenant.c1", "tenant.c2"])
        let pushC2 = try Self.replicator(
            reverse, "tenant.c2", role: .pushTarget, local: admin + "/src2", remote: ws + ".tenant.c2",
            continuous: false)
        let pullC1 = try Self.replicator(
            reverse, "tenant.c1", role: .pullSource, local: admin + "/dst1", remote: ws + ".tenant.c1",
            continuous: false)
        async let pushed: Void = Self.run(pushC2)
        async let pulled: Void = Self.run(pullC1)
        _ = await (pushed, pulled)
        #expect(try await Self.ids(c2) == allB.union(wantC))
        #expect(try await Self.ids(c1) == wantA)
        #expect(try await Self.ids(admin + "/dst1") == wantA)
        // The push's checkpoint is c2's: a second run finds nothing to send.
        let again = try Self.replicator(
            reverse, "tenant.c2", role: .pushTarget, local: admin + "/src2", remote: ws + ".tenant.c2",
            continuous: false)
        await Self.run(again)
        #expect(again.currentStatus.completed == 0, "\(again.currentStatus)")

        // A collection the database does not serve: its endpoint is refused with 404.
        let unknown = BLIPCollectionsConnector(
            connector: try WebSocketBLIPConnector(databaseURL: ws), collections: ["tenant.c9"])
        let refused = try Self.replicator(
            unknown, "tenant.c9", role: .pullSource, local: admin + "/dst1", remote: ws + ".tenant.c9",
            continuous: false)
        refused.start()
        for await s in refused.status where s.activity == .stopped { break }
        #expect("\(refused.currentStatus.lastError.map { "\($0)" } ?? "")".contains("404"), "\(refused.currentStatus)")
    }
}
