import Foundation
import NIOCore
import NIOHTTP1
import SetteeJSON
import SetteeLite
import SetteeReplication
import SetteeTestSupport
import Testing

/// Lite replicating two collections with the gateway, each filtered differently (issue 70 item 5's must-show,
/// docs/adr/0150): a real `settee-server` and `settee-gateway` with a database over `tenant.c1` and `tenant.c2`
/// (ADR 0142), and a Lite database with the same two collections.
@Suite(.serialized, .onTestThreads) struct LiteCollectionsProcessTests {
    /// Proves the must-show: one `ReplicatorConfiguration` over both collections, c1 filtered by channel `one`
    /// (pull), c2 by document ids (push and pull), push and pull against the gateway's keyspaces `db.tenant.c1` and
    /// `db.tenant.c2`. Afterwards each side holds exactly what its filter allows, in the right collection (nothing in
    /// the other keyspace, nothing in Lite's default collection), and a second run writes nothing (checkpoints are
    /// per collection).
    @Test func liteReplicatesTwoCollectionsEachFilteredItsOwnWay() async throws {
        try await Self.mustShow(blip: false)
    }

    /// Proves the must-show over BLIP (ADR 0150): the same configuration with `ws://…/db` runs all four replicators
    /// over one WebSocket to `db/_blipsync` (one `getCollections` naming both collections), with the same outcome,
    /// and `settee-lite start --collection` with the `ws://` URL pulls the collection over BLIP.
    @Test func liteReplicatesTwoCollectionsOverOneBLIPConnection() async throws {
        try await Self.mustShow(blip: true)
    }

    /// The must-show, over REST keyspaces (`blip` false) or one BLIP connection.
    static func mustShow(blip: Bool) async throws {
        let (server, gateway) = try await GatewayCollectionsProcessTests.gatewayOverTenantCollections(
            blip ? "lite-collections-blip" : "lite-collections",
            collections:
                #""c1":{"sync":"function(doc){channel(doc.channels);}"},"c2":{"sync":"function(doc){channel(doc.channels);}"}"#
        )
        defer {
            gateway.stop()
            server.stopAndRemove()
        }
        let admin = "http://127.0.0.1:\(gateway.adminPort)"
        let gw1 = admin + "/db.tenant.c1"
        let gw2 = admin + "/db.tenant.c2"
        func docs(_ prefix: String, _ n: Int, channel: (Int) -> String) -> [JSON] {
            (0..<n).map { JSON.object([("_id", .string("\(prefix)-\($0)")), ("channels", .string(channel($0)))]) }
        }
        _ = try await GatewayReplicationProcessTests.bulkDocs(
            gw1, docs("gw1", 10) { $0 % 2 == 0 ? "one" : "two" }, newEdits: true)
        _ = try await GatewayReplicationProcessTests.bulkDocs(gw2, docs("gw2", 10) { _ in "one" }, newEdits: true)

        let db = try Database(name: "lite", directory: TemporaryDirectory.make("lite-collections"))
        let url = (blip ? "ws://127.0.0.1:\(gateway.adminPort)" : admin) + "/db"
        defer { try? db.delete() }
        let c1 = try db.createCollection("c1", scope: "tenant")
        let c2 = try db.createCollection("c2", scope: "tenant")
        for i in 0..<6 {
            var d1 = Document(id: "lite1-\(i)")
            d1["channels"] = i % 2 == 0 ? "one" : "three"
            try c1.save(d1)
            var d2 = Document(id: "lite2-\(i)")
            d2["channels"] = "one"
            try c2.save(d2)
        }
        try db.save(Document(id: "default-only"))

        var config = ReplicatorConfiguration(target: .url(url))
        config.addCollection(c1, configuration: CollectionConfiguration(channels: ["one"]))
        let wanted2 = ["gw2-1", "gw2-4", "lite2-0", "lite2-3"]
        config.addCollection(c2, configuration: CollectionConfiguration(documentIDs: wanted2))
        let replicator = try CollectionsReplicator(config)
        replicator.start()
        for s in await replicator.waitUntilStopped() {
            #expect(s.lastError == nil && s.docWriteFailures == 0, "\(s)")
        }
        // Over BLIP the four replicators shared one WebSocket.
        #expect(await replicator.blip?.connectionsOpened == (blip ? 1 : nil))

        let lite1 = Set((0..<6).map { "lite1-\($0)" })
        let lite2 = Set((0..<6).map { "lite2-\($0)" })
        let gwOne1 = Set(stride(from: 0, to: 10, by: 2).map { "gw1-\($0)" })
        let gwAll2 = Set((0..<10).map { "gw2-\($0)" })
        let ids = { (c: DatabaseCollection) throws -> Set<String> in Set(try c.allDocuments().compactMap(\.id)) }
        // c1: the pull brought the gateway's channel-one documents only; the push sent every Lite document.
        #expect(try ids(c1) == lite1.union(gwOne1))
        #expect(try await GatewayCollectionsProcessTests.ids(gw1) == lite1.union((0..<10).map { "gw1-\($0)" }))
        // c2: only the listed ids crossed, each way.
        #expect(try ids(c2) == lite2.union(["gw2-1", "gw2-4"]))
        #expect(try await GatewayCollectionsProcessTests.ids(gw2) == gwAll2.union(["lite2-0", "lite2-3"]))
        // Nothing landed in Lite's default collection.
        #expect(try db.allDocuments().compactMap(\.id) == ["default-only"])

        // A second run: every checkpoint is its collection's, so nothing is written either way.
        let again = try CollectionsReplicator(config)
        again.start()
        for s in await again.waitUntilStopped() {
            #expect(s.lastError == nil && s.docsWritten == 0, "\(s)")
        }
        #expect(try ids(c1) == lite1.union(gwOne1))
        #expect(try await GatewayCollectionsProcessTests.ids(gw2) == gwAll2.union(["lite2-0", "lite2-3"]))

        // `settee-lite start --collection tenant.c2 --once` (a real process, unfiltered) pulls keyspace
        // `db.tenant.c2` into its own tenant.c2 collection, and nothing into its default collection.
        let cliDir = TemporaryDirectory.make("lite-collections-cli")
        let cli = try await LiteProcess.run([
            "start", "--db", cliDir, url, "--collection", "tenant.c2", "--once",
        ])
        #expect(cli.status == 0, "\(cli.output)")
        let pulled = try Database(name: "db", directory: cliDir)
        defer { pulled.close() }
        let pulled2 = try #require(try pulled.collection("c2", scope: "tenant"))
        #expect(try ids(pulled2) == gwAll2.union(["lite2-0", "lite2-3"]))
        #expect(pulled.documentCount == 0)
    }
}
