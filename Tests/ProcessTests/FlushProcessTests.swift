import Foundation
import NIOCore
import SetteeClient
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A bucket flush on a cluster of real processes is one cluster-wide operation.
@Suite("Bucket flush on a cluster (real processes)", .serialized, .onTestThreads)
struct FlushProcessTests {
    static func value(_ i: Int) -> [UInt8] { Array("{\"n\":\(i)}".utf8) }

    /// Majority-durable writes of `keys`, retried for a while: they succeed only once every vBucket's replica
    /// stream is following (after a flush the streams restart), so they also prove replication works.
    static func writeDurably(_ client: BucketClient, _ keys: [String], base: Int = 0) async throws {
        for (i, k) in keys.enumerated() {
            let deadline = Date().addingTimeInterval(30)
            while true {
                do {
                    _ = try await client.upsert(k, value(base + i), durability: .majority)
                    break
                } catch {
                    if Date() > deadline { throw error }
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
        }
    }

    /// Keys among `keys` the client still reads.
    static func survivors(_ client: BucketClient, _ keys: [String]) async -> [String] {
        var left: [String] = []
        for k in keys {
            do {
                _ = try await client.get(k)
                left.append(k)
            } catch ClientError.keyNotFound {
                continue
            } catch {
                left.append("\(k) (\(error))")
            }
        }
        return left
    }

    /// The rows of view `f/n` through `node` (scatter/gather over the cluster, `stale=false`): id and value.
    static func viewRows(_ node: ServerProcess) throws -> [(id: String, n: Int)] {
        let r = try node.views("GET", "/demo/_design/f/_view/n?stale=false")
        let rows = (ClusterHarness.json(r)["rows"] as? [[String: Any]]) ?? []
        return rows.map { (($0["id"] as? String) ?? "", ($0["value"] as? Int) ?? -1) }
    }

    /// Every vBucket's high seqno on `node` (`/settee/internal/seqnos`, which the admin may read).
    static func highSeqnos(_ node: ServerProcess) throws -> [Int] {
        let rows = (try node.http("GET", "/settee/internal/seqnos?bucket=demo").json()) as? [[Any]] ?? []
        return rows.map { ($0.count > 1 ? $0[1] as? Int : nil) ?? -1 }
    }

    /// Proves, on three nodes with one replica: (1) REST doFlush sent to one node empties the bucket on every
    /// node (every key gone, every vBucket copy, active or replica, back at seqno 0); (2) majority-durable writes
    /// succeed right after, so replica streams restarted on the new history; (3) a binary FLUSH sent to one node
    /// does the same (it used to empty only that node's share: 5 of 8 keys survived); (4) adding a fourth node
    /// and rebalancing completes promptly (it failed after 300 s with "copies did not catch up in time": new
    /// copies streamed from 0 towards a high seqno with no items below it) and every key written after the
    /// flush is read back from the new map.
    @Test func flushIsClusterWideAndRebalanceFollows() async throws {
        let nodes = try (0..<4).map { try ServerProcess(name: "flush-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for s in nodes { try s.start() }
        let (a, b, c, d) = (nodes[0], nodes[1], nodes[2], nodes[3])
        try ClusterHarness.formCluster([a, b, c], authType: "none")
        let edit = try a.http("POST", "/pools/default/buckets/demo", form: [("flushEnabled", "1")])
        #expect(edit.status == 200, "\(edit.text)")
        let everyNodeMayFlush = try ClusterHarness.eventually {
            try [a, b, c].allSatisfy { n in
                let bucket = ClusterHarness.json(try n.http("GET", "/pools/default/buckets/demo"))
                return (bucket["controllers"] as? [String: Any])?["flush"] != nil
            }
        }
        #expect(everyNodeMayFlush)

        let client = try await BucketClient.connect(
            ClientOptions(
                seeds: [.http(NodeAddress(host: "127.0.0.1", port: a.adminPort))], bucket: "demo",
                username: "Administrator", password: "password", operationTimeoutMs: 10_000))
        let first = (0..<16).map { "before::\($0)" }
        try await Self.writeDurably(client, first)
        let design = Array(#"{"views":{"n":{"map":"function(doc, meta){ emit(meta.id, doc.n); }"}}}"#.utf8)
        #expect(try a.views("PUT", "/demo/_design/f", body: design).status == 201)
        #expect(try Self.viewRows(a).count == first.count)
        #expect(await Self.survivors(client, first).count == first.count)

        // (1) REST doFlush through the last node (not the orchestrator when names sort that way: either path).
        let flush = try c.http("POST", "/pools/default/buckets/demo/controller/doFlush")
        #expect(flush.status == 200, "\(flush.text)")
        #expect(await Self.survivors(client, first).isEmpty)
        for n in [a, b, c] {
            let highs = try Self.highSeqnos(n)
            #expect(
                highs.count == 1024 && highs.allSatisfy { $0 == 0 },
                "node \(n.adminPort): \(highs.filter { $0 != 0 }.count) vBuckets not at 0")
        }

        // (2) Replication follows the new history; the same keys written again with new values reach the view
        // index even where the new high seqno caught up with what the index had stored before the flush.
        let second = (0..<8).map { "before::\($0)" }
        try await Self.writeDurably(client, second, base: 100)
        #expect(await Self.survivors(client, second).count == second.count)
        let rows = try Self.viewRows(b)
        #expect(rows.map(\.id).sorted() == second.sorted())
        #expect(rows.allSatisfy { $0.n >= 100 }, "rows indexed before the flush survived it: \(rows)")

        // (3) A binary FLUSH to one node flushes every node.
        let kv = try TestKVClient(port: b.kvPort)
        #expect(try kv.authenticate(user: "Administrator", password: "password") == .success)
        #expect(try kv.request(.selectBucket, key: "demo").status == .success)
        #expect(try kv.request(.flush, vbucket: 0).status == .success)
        #expect(await Self.survivors(client, second).isEmpty)
        for n in [a, b, c] { #expect(try Self.highSeqnos(n).allSatisfy { $0 == 0 }) }

        // (4) A rebalance after the flush completes promptly and moves what was written since.
        let third = (0..<8).map { "after::\($0)" }
        try await Self.writeDurably(client, third)
        let added = try ClusterHarness.addNode(a, d)
        #expect(added.status == 200, "\(added.text)")
        let started = Date()
        let progress = try ClusterHarness.rebalance(a, known: [a, b, c, d], timeout: 90)
        #expect(progress["errorMessage"] == nil, "\(progress)")
        #expect(Date().timeIntervalSince(started) < 60)
        let servesFour = try ClusterHarness.eventually { try ClusterHarness.map(a).servers.count == 4 }
        #expect(servesFour)
        try await Self.writeDurably(client, ["last"])
        #expect(await Self.survivors(client, third + ["last"]).count == third.count + 1)
        await client.close()
    }

    /// A bucket created without flush refuses both forms with Couchbase's answers and keeps its data.
    @Test func flushDisabledIsRefusedEverywhere() async throws {
        let nodes = try (0..<2).map { try ServerProcess(name: "noflush-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for s in nodes { try s.start() }
        try ClusterHarness.formCluster(nodes, authType: "none")
        let client = try await BucketClient.connect(
            ClientOptions(
                seeds: [.http(NodeAddress(host: "127.0.0.1", port: nodes[0].adminPort))], bucket: "demo",
                username: "Administrator", password: "password", operationTimeoutMs: 10_000))
        let keys = (0..<8).map { "keep::\($0)" }
        try await Self.writeDurably(client, keys)
        let rest = try nodes[1].http("POST", "/pools/default/buckets/demo/controller/doFlush")
        #expect(
            rest.status == 400 && rest.text.contains("Flush is disabled for the bucket"), "\(rest.status) \(rest.text)")
        let kv = try TestKVClient(port: nodes[1].kvPort)
        #expect(try kv.authenticate(user: "Administrator", password: "password") == .success)
        #expect(try kv.request(.selectBucket, key: "demo").status == .success)
        let refused = try kv.request(.flush, vbucket: 0)
        #expect(refused.status == .notSupported)
        #expect(String(decoding: refused.value.readableBytesView, as: UTF8.self).contains("Flush is disabled"))
        #expect(await Self.survivors(client, keys).count == keys.count)
        await client.close()
    }
}
