import Foundation
import SetteeClient
import SetteeCore
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Views on a node brought back into the cluster by full recovery.
@Suite("Views after full recovery (real processes)", .serialized, .onTestThreads)
struct ViewsRecoveryProcessTests {
    static let design = Array(#"{"views":{"ids":{"map":"function(doc, meta){ emit(meta.id, doc.n); }"}}}"#.utf8)

    /// The rows and error rows of a `stale=false` query through `node`.
    static func query(_ node: ServerProcess) throws -> (status: Int, ids: [String], errors: Int, text: String) {
        let r = try node.views("GET", "/demo/_design/rec/_view/ids?stale=false")
        let json = (try? r.json()) as? [String: Any] ?? [:]
        let rows = json["rows"] as? [[String: Any]] ?? []
        let errors = json["errors"] as? [Any] ?? []
        return (r.status, rows.compactMap { $0["id"] as? String }, errors.count, String(r.text.prefix(400)))
    }

    /// Proves that full recovery rebuilds a node's views as a fresh node has them: three nodes with a design
    /// document and 60 documents; the third is killed, failed over, restarted (it opens its old views) and
    /// brought back by full recovery and a rebalance, which drops its bucket directory and opens the bucket
    /// again. Its views used to stay bound to the dropped copy: design-document PUTs answered 500
    /// (`design-documents.json.tmp`: errno 2) and queries returned part of the rows with an error row. Now a PUT
    /// through it answers 201 and queries through any node return every row and no error row.
    @Test func fullRecoveryRebuildsViews() async throws {
        let nodes = try (0..<3).map { try ServerProcess(name: "vrec-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for s in nodes { try s.start() }
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])
        try ClusterHarness.formCluster(nodes, authType: "none")
        for n in nodes { try n.waitForViews() }
        let put = try a.views("PUT", "/demo/_design/rec", body: Self.design)
        #expect(put.status == 201, "\(put.text)")

        let client = try await BucketClient.connect(
            ClientOptions(
                seeds: [.http(NodeAddress(host: "127.0.0.1", port: a.adminPort))], bucket: "demo",
                username: "Administrator", password: "password", operationTimeoutMs: 10_000))
        let ids = (0..<60).map { "doc\($0)" }
        try await FlushProcessTests.writeDurably(client, ids)
        await client.close()
        let before = try Self.query(a)
        #expect(before.status == 200)
        #expect(before.ids.sorted() == ids.sorted())
        #expect(before.errors == 0)

        c.kill9()
        let failover = try a.http("POST", "/controller/failOver", form: [("otpNode", ClusterHarness.nodeName(c))])
        #expect(failover.status == 200, "\(failover.text)")
        try c.start()
        try c.waitForViews()
        let knowsFailed = try ClusterHarness.eventually {
            try ClusterHarness.members(c)[ClusterHarness.nodeName(c)] == "inactiveFailed"
        }
        #expect(knowsFailed)
        let recovery = try a.http(
            "POST", "/controller/setRecoveryType",
            form: [("otpNode", ClusterHarness.nodeName(c)), ("recoveryType", "full")])
        #expect(recovery.status == 200, "\(recovery.text)")
        let progress = try ClusterHarness.rebalance(a, known: [a, b, c], timeout: 120)
        #expect(progress["errorMessage"] == nil, "\(progress)")
        let active = try ClusterHarness.eventually {
            try ClusterHarness.members(a).values.allSatisfy { $0 == "active" }
        }
        #expect(active)

        let again = try c.views("PUT", "/demo/_design/rec", body: Self.design)
        #expect(again.status == 201, "\(again.status) \(again.text)")
        for n in [a, c] {
            let after = try Self.query(n)
            #expect(after.status == 200)
            #expect(after.ids.sorted() == ids.sorted())
            #expect(after.errors == 0)
        }
    }
}
