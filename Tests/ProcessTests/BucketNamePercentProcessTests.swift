import Foundation
import SetteeClient
import SetteeCore
import SetteeTestSupport
import Testing

/// Bucket names with `%` travel through every internal call: rebalance and flush (issue 69 item 5).
@Suite("Bucket names with % (real processes)", .serialized, .onTestThreads)
struct BucketNamePercentProcessTests {
    /// Names bucket naming allows (`A-Z a-z 0-9 _ . - %`, `BucketName`) that a second percent-decode breaks: `a%b`
    /// does not decode at all (the internal seqno call answered 404, "n1 returned 404 for seqnos of a%b"), `p%41q`
    /// decodes to another name (`pAq`), and `%25` to `%`.
    static let names = ["a%b", "p%41q", "%25"]

    static func client(_ bucket: String, _ seeds: [ServerProcess]) async throws -> BucketClient {
        try await BucketClient.connect(
            ClientOptions(
                seeds: seeds.map { .http(NodeAddress(host: "127.0.0.1", port: $0.adminPort)) }, bucket: bucket,
                username: "Administrator", password: "password", operationTimeoutMs: 10_000))
    }

    /// Keys of `keys` that `client` still reads.
    static func readable(_ client: BucketClient, _ keys: [String]) async -> [String] {
        var out: [String] = []
        for k in keys where (try? await client.get(k)) != nil { out.append(k) }
        return out
    }

    /// Proves, on real processes, that buckets named with `%` rebalance and flush: two nodes with three such buckets
    /// (one replica, 30 keys each), a third node added and rebalanced in (the rebalance asks every node for each
    /// bucket's seqnos by name), every key read back, every bucket's map then naming the three nodes; a REST flush of
    /// each through a node that is not the orchestrator (it coordinates the per-node flush calls by name) empties it.
    /// A name with `+` or a space, which bucket naming does not allow, is refused with 400 and never reaches an
    /// internal call.
    @Test func bucketsNamedWithPercentRebalanceAndFlush() async throws {
        let nodes = try (0..<3).map { try ServerProcess(name: "pctname-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for s in nodes { try s.start() }
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])
        try ClusterHarness.formCluster([a, b], authType: "none", replicaNumber: 1)
        for name in Self.names {
            let r = try a.http(
                "POST", "/pools/default/buckets",
                form: [
                    ("name", name), ("ramQuotaMB", "100"), ("replicaNumber", "1"), ("authType", "none"),
                    ("flushEnabled", "1"),
                ])
            #expect(r.status == 202, "create \(name): \(r.status) \(r.text)")
        }
        for name in ["a+b", "a b"] {
            let r = try a.http("POST", "/pools/default/buckets", form: [("name", name), ("ramQuotaMB", "100")])
            #expect(r.status == 400, "create \(name): \(r.status) \(r.text)")
        }
        let served = try ClusterHarness.eventually(30) {
            try Self.names.allSatisfy { name in
                try [a, b].allSatisfy {
                    try ClusterHarness.map($0, bucket: PercentEncoding.encode(name)).chains.count == 1024
                }
            }
        }
        #expect(served, "not every node serves every bucket's map")
        let keys = (0..<30).map { "pct::\($0)" }
        for name in Self.names {
            let client = try await Self.client(name, [a, b])
            for k in keys { _ = try await client.upsert(k, Array("{\"b\":\"\(name)\"}".utf8)) }
            await client.close()
        }

        let added = try ClusterHarness.addNode(a, c)
        #expect(added.status == 200, "\(added.text)")
        let error = try await ClusterHarness.rebalanceOffPool(a, known: [a, b, c])
        #expect(error == nil, "rebalance failed: \(error ?? "")")
        for name in Self.names {
            let map = try ClusterHarness.map(c, bucket: PercentEncoding.encode(name))
            #expect(map.servers.count == 3 && map.chains.count == 1024, "\(name): \(ClusterHarness.summary(map))")
            let client = try await Self.client(name, [a, b, c])
            let read = await Self.readable(client, keys)
            #expect(read.count == keys.count, "\(name): \(keys.count - read.count) keys lost by the rebalance")
            for k in keys {
                let v = try? await client.get(k)
                #expect(v.map { String(decoding: $0.value, as: UTF8.self) } == "{\"b\":\"\(name)\"}", "\(name) \(k)")
            }

            // Through the node whose name sorts last: it forwards to, or is, the orchestrator; both paths call the
            // per-node flush by name.
            let flush = try c.http("POST", "/pools/default/buckets/\(PercentEncoding.encode(name))/controller/doFlush")
            #expect(flush.status == 200, "flush \(name): \(flush.status) \(flush.text)")
            let left = await Self.readable(client, keys)
            #expect(left.isEmpty, "\(name): \(left.count) keys survived the flush")
            await client.close()
        }
    }
}
