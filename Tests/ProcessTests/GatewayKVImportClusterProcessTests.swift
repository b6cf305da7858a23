import Foundation
import SetteeClient
import SetteeCore
import SetteeDocument
import SetteeGateway
import SetteeJSON
import SetteeTestSupport
import Testing

/// An SDK's KV writes to documents a gateway holds on a real 2-node cluster bucket: imports continue the
/// document's history.
@Suite(.serialized, .onTestThreads) struct GatewayKVImportClusterProcessTests {
    @Test func sdkUpsertAndDeleteContinueTheHistory() async throws {
        // Proves, over a cluster bucket and the smart client: an SDK upsert of a document at `2-…` is imported as
        // `3-…` whose `_revisions` continue from `2-…` (one leaf, no second root), and an SDK delete reaches
        // `_changes` as a deleted `4-…` child instead of the document vanishing from the feed.
        let a = try ServerProcess(name: "gw-kvimp-a")
        let b = try ServerProcess(name: "gw-kvimp-b")
        defer { [a, b].forEach { $0.stopAndRemove() } }
        try a.start()
        try b.start()
        try ClusterHarness.formCluster([a, b], authType: "sasl")
        let bucket = try await GatewayClusterProcessTests.mount(a)
        let db = try await GatewayClusterProcessTests.gateway(bucket)
        let client = try await BucketClient.connect(
            ClientOptions(
                seeds: [.http(NodeAddress(host: "127.0.0.1", port: a.adminPort))], bucket: "demo",
                username: "Administrator", password: "password", operationTimeoutMs: 10_000))

        let r1 = try await db.put("doc", body: GatewayClusterProcessTests.body(#"{"channels":["c"],"v":1}"#), user: nil)
        let r2 = try await db.put(
            "doc", body: GatewayClusterProcessTests.body(#"{"_rev":"\#(r1)","channels":["c"],"v":2}"#), user: nil)
        _ = try await client.upsert("doc", Array(#"{"channels":["c"],"v":3}"#.utf8))
        var imported = false
        for _ in 0..<100 where !imported {
            imported = (try? await db.get("doc", user: nil).body["v"]?.intValue) == 3
            if !imported { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(imported)
        let (body, _) = try await db.get("doc", revs: true, user: nil)
        #expect(body["_rev"]?.stringValue?.hasPrefix("3-") == true, "\(body)")
        let ids = body["_revisions"]?["ids"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(ids.dropFirst().first == r2.digest, "\(body)")
        #expect(try await db.openRevs("doc", revs: nil, revs: true, user: nil).count == 1)

        _ = try await client.remove("doc")
        var tombstone: ChangeRow?
        for _ in 0..<100 where tombstone == nil {
            tombstone = try await db.changes(ChangesQuery(), user: nil).rows.first { $0.id == "doc" && $0.deleted }
            if tombstone == nil { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(tombstone?.changes.first?.generation == 4, "\(String(describing: tombstone))")
        await client.close()
        await db.close()
        await bucket.close()
    }
}
