import Foundation
import SetteeClient
import SetteeCore
import SetteeTestSupport
import Testing

/// A bucket's `basicStats` over a real 2-node cluster: the bucket's totals, as Couchbase reports them.
@Suite(.serialized, .onTestThreads) struct BucketTotalsProcessTests {
    static func basicStats(_ node: ServerProcess) throws -> [String: Any] {
        let b = try node.http("GET", "/pools/default/buckets/demo").json() as? [String: Any]
        return b?["basicStats"] as? [String: Any] ?? [:]
    }

    static func nodeStatuses(_ node: ServerProcess) throws -> [String] {
        let b = try node.http("GET", "/pools/default/buckets/demo").json() as? [String: Any]
        return (b?["nodes"] as? [[String: Any]] ?? []).compactMap { $0["status"] as? String }
    }

    @Test func itemCountIsTheClustersTotalOnEveryNode() async throws {
        // Proves: N items written through the smart client are reported as itemCount == N by every node's bucket
        // GET, bucket list and `settee bucket list` (each node reported only its own share: about N/2), opsPerSec
        // is above 0 right after the writes (it was always 0), and when a node dies the other one names it in
        // `nodesNotCounted` and shows it "unhealthy" in the bucket's nodes instead of silently dropping its share.
        let nodes = try (0..<2).map { try ServerProcess(name: "totals-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for s in nodes { try s.start() }
        try ClusterHarness.formCluster(nodes, authType: "none", replicaNumber: 1)
        for node in nodes { _ = try Self.basicStats(node) }  // first rate sample

        let client = try await BucketClient.connect(
            ClientOptions(
                seeds: [.http(NodeAddress(host: "127.0.0.1", port: nodes[0].adminPort))], bucket: "demo",
                username: "Administrator", password: "password", operationTimeoutMs: 10_000))
        let n = 300
        for i in 0..<n {
            let deadline = Date().addingTimeInterval(20)
            while true {
                do {
                    _ = try await client.upsert("item::\(i)", Array("{\"i\":\(i)}".utf8))
                    break
                } catch {
                    if Date() > deadline { throw error }
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
        }
        await client.close()

        // The rates first, right after the writes: each stats call (a peer's included) records a sample, and on a
        // loaded machine the checks below can outlast the rate window, after which no mutation is recent.
        let ops = try nodes.map { try Self.basicStats($0)["opsPerSec"] as? Double ?? 0 }
        for node in nodes {
            let stats = try Self.basicStats(node)
            #expect(stats["itemCount"] as? Int == n, "node \(node.adminPort): \(stats)")
            #expect((stats["nodesNotCounted"] as? [String])?.isEmpty == true)
            let list = try node.http("GET", "/pools/default/buckets").json() as? [[String: Any]] ?? []
            #expect((list.first?["basicStats"] as? [String: Any])?["itemCount"] as? Int == n)
            // A peer's own share (what the other node sums) is smaller than the total.
            let local = try node.http("GET", "/pools/default/buckets/demo?local=1").json() as? [String: Any]
            let share = (local?["basicStats"] as? [String: Any])?["itemCount"] as? Int ?? -1
            #expect(share > 0 && share < n, "share \(share)")
            let cli = try runCLI(["bucket", "list"], server: node)
            #expect(cli.status == 0 && cli.stdout.contains("items=\(n)"), "\(cli.stdout) \(cli.stderr)")
            #expect(try Self.nodeStatuses(node) == ["healthy", "healthy"])
        }
        #expect(ops.allSatisfy { $0 > 0 }, "opsPerSec \(ops)")

        nodes[1].kill9()
        let stats = try Self.basicStats(nodes[0])
        #expect(stats["nodesNotCounted"] as? [String] == [ClusterHarness.nodeName(nodes[1])], "\(stats)")
        #expect((stats["itemCount"] as? Int ?? n) < n)
        #expect(try Self.nodeStatuses(nodes[0]).contains("unhealthy"))
        let cli = try runCLI(["bucket", "list"], server: nodes[0])
        #expect(cli.stdout.contains("not counted: \(ClusterHarness.nodeName(nodes[1]))"), "\(cli.stdout)")
    }
}
