import Foundation
import SetteeClient
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Synchronization
import Testing

/// Majority-durable writes while a rebalance moves every vBucket's copies (ADR 0117: a moving vBucket's durable
/// write needs a majority of both chains).
@Suite("Durable writes during a rebalance (real processes)", .serialized, .onTestThreads)
struct DurableRebalanceProcessTests {
    final class Flags: Sendable {
        let stop = Atomic<Bool>(false)
        let progress = Atomic<Int>(0)
    }

    /// Proves, on real nodes with replicaNumber=1, that majority-durable writes keep succeeding while a node is
    /// added and rebalanced in (the second chain's copies acknowledge them), and that every write answered SUCCESS
    /// is read back afterwards. A write the rebalance made fail must say why (ambiguous, a timeout, a temporary
    /// failure), never report success for something lost.
    ///
    /// In `make test` again since ADR 0118: one loaded CI run (c18d060) had acknowledged 325 writes instead of about
    /// 3,000, and 54 reads afterwards timed out. The likely cause, a durable write whose vBucket left active waiting
    /// out the server's 30 s timeout and holding back every later answer of its ordered connection, is fixed there.
    @Test
    func majorityWritesDuringARebalanceAreKept() async throws {
        let nodes = try (0..<3).map { try ServerProcess(name: "drebal-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for s in nodes { try s.start() }
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])
        try ClusterHarness.formCluster([a, b], authType: "none")
        let client = try await BucketClient.connect(
            ClientOptions(
                seeds: [.http(NodeAddress(host: "127.0.0.1", port: a.adminPort))], bucket: "demo",
                username: "Administrator", password: "password", operationTimeoutMs: 10_000))
        try await ClusterDataProcessTests.waitForReplicaStreams(client)
        #expect(try ClusterHarness.addNode(a, c).status == 200)
        let flags = Flags()
        typealias Lane = (acknowledged: [Int], failed: [String], impossible: Int, latencies: [Duration])
        var writers: [Task<Lane, Never>] = []
        for lane in 0..<8 {
            writers.append(
                Task { () -> Lane in
                    var acknowledged: [Int] = []
                    var failed: [String] = []
                    var impossible = 0
                    var latencies: [Duration] = []
                    var i = lane
                    while !flags.stop.load(ordering: .relaxed) {
                        let sent = ContinuousClock.now
                        defer { latencies.append(ContinuousClock.now - sent) }
                        do {
                            _ = try await client.upsert(
                                "durable::\(i)", ClusterDataProcessTests.value(i), durability: .majority)
                            acknowledged.append(i)
                            flags.progress.add(1, ordering: .relaxed)
                        } catch {
                            failed.append("durable::\(i): \(error)")
                            if case .durabilityImpossible? = error as? ClientError { impossible += 1 }
                        }
                        i += 8
                    }
                    return (acknowledged, failed, impossible, latencies)
                })
        }
        for _ in 0..<200 where flags.progress.load(ordering: .relaxed) == 0 {
            try await Task.sleep(for: .milliseconds(50))
        }
        let before = flags.progress.load(ordering: .relaxed)
        let failure = try await ClusterHarness.rebalanceOffPool(a, known: [a, b, c], timeout: 600)
        let during = flags.progress.load(ordering: .relaxed) - before
        flags.stop.store(true, ordering: .relaxed)
        var written: [Int] = []
        var failed: [String] = []
        var impossible = 0
        var latencies: [Duration] = []
        for w in writers {
            let r = await w.value
            written += r.acknowledged
            failed += r.failed
            impossible += r.impossible
            latencies += r.latencies
        }
        latencies.sort()
        #expect(failure == nil, "\(failure ?? "")")
        #expect(during > 0, "no durable write succeeded while the rebalance ran")
        // A write the client sent with a stale map is NOT_MY_VBUCKET and retried, never DURABILITY_IMPOSSIBLE: the
        // node no longer active for its vBucket answered that (about 1% of the writes) before ADR 0118.
        #expect(impossible == 0, "\(impossible) durable writes were refused as impossible")
        #expect(
            failed.count * 20 <= written.count + failed.count,
            "\(failed.count) of \(written.count + failed.count) durable writes failed: \(failed.prefix(3))")
        await ClusterDataProcessTests.expectEveryWriteReadsBack(
            client, written, key: { "durable::\($0)" }, value: ClusterDataProcessTests.value)
        print(
            "durable rebalance: \(written.count) acknowledged (\(during) while the rebalance ran), "
                + "\(failed.count) failed\(failed.isEmpty ? "" : ", first: \(failed[0])"); write latency p50 "
                + "\(latencies.isEmpty ? .zero : latencies[latencies.count / 2]), p99 "
                + "\(latencies.isEmpty ? .zero : latencies[latencies.count * 99 / 100]), max \(latencies.last ?? .zero), "
                + "\(latencies.count(where: { $0 > .seconds(1) })) over 1 s")
        await client.close()
    }
}
