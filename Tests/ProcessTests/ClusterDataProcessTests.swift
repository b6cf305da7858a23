import Foundation
import Logging
import NIOCore
import SetteeClient
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The cluster issue's acceptance scenario over real processes and the smart client.
@Suite("Cluster data path (real processes)", .serialized, .onTestThreads)
struct ClusterDataProcessTests {
    /// How many keys the scenario writes: 20,000 in `make test`, or SETTEE_CLUSTER_KEYS. `make torture` runs it
    /// with the cluster issue's 100,000 (at that size the scenario was 15% of `make test`'s CPU time).
    static let keyCount = Int(ProcessInfo.processInfo.environment["SETTEE_CLUSTER_KEYS"] ?? "") ?? 20_000

    static func value(_ i: Int) -> [UInt8] { Array("{\"n\":\(i),\"pad\":\"settee-cluster-test\"}".utf8) }

    /// Runs `count` operations with at most `width` in flight; returns the errors seen (by description).
    static func parallel(
        _ count: Int, width: Int = 64, _ op: @escaping @Sendable (Int) async throws -> Void
    ) async -> [String] {
        await withTaskGroup(of: [String].self) { group in
            for lane in 0..<width {
                group.addTask {
                    var errors: [String] = []
                    var i = lane
                    while i < count {
                        do { try await op(i) } catch { errors.append("\(i): \(error)") }
                        i += width
                    }
                    return errors
                }
            }
            var all: [String] = []
            for await e in group { all += e }
            return all
        }
    }

    /// Reads back every acknowledged write `i` (key `key(i)`, value `value(i)`) in parallel: the writes whose value
    /// differs, and the reads that failed.
    static func readBack(
        _ client: BucketClient, _ written: [Int], key: @escaping @Sendable (Int) -> String,
        value: @escaping @Sendable (Int) -> [UInt8]
    ) async -> (lost: [Int], readErrors: [String]) {
        let lost = Mutex<[Int]>([])
        let readErrors = await parallel(written.count) { n in
            let i = written[n]
            let r = try await client.get(key(i))
            if r.value != value(i) { lost.withLock { $0.append(i) } }
        }
        return (lost.withLock { $0 }, readErrors)
    }

    /// Expects every acknowledged write `i` to read back as `value(i)` under `key(i)`, and every read to succeed.
    static func expectEveryWriteReadsBack(
        _ client: BucketClient, _ written: [Int], key: @escaping @Sendable (Int) -> String,
        value: @escaping @Sendable (Int) -> [UInt8], sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        let (lost, readErrors) = await readBack(client, written, key: key, value: value)
        #expect(
            readErrors.isEmpty, "\(readErrors.count) reads failed: \(readErrors.prefix(3))",
            sourceLocation: sourceLocation)
        #expect(
            lost.isEmpty, "lost \(lost.count) of \(written.count) acknowledged writes", sourceLocation: sourceLocation)
    }

    /// Replica streams of a bucket just created connect within about a second (their first attempts may find the
    /// bucket not yet open on the source and back off): majority writes to 64 keys across the nodes, retried until
    /// they succeed (for up to 30 s each), show the streams are up before a test's measured writes start.
    static func waitForReplicaStreams(_ client: BucketClient) async throws {
        for i in 0..<64 {
            let deadline = Date().addingTimeInterval(30)
            while true {
                do {
                    _ = try await client.upsert("probe::\(i)", Self.value(i), durability: .majority)
                    break
                } catch {
                    if Date() > deadline { throw error }
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
        }
    }

    /// Proves, on three real nodes with replicaNumber=1: every write acknowledged with majority durability
    /// survives a SIGKILL of one node and its failover (0 lost, all read back through the smart client); then a
    /// fresh node is added and rebalanced in while a writer keeps writing, with 0 failed operations after the
    /// client's retries, a final map balanced as the issue defines it, and every key (old and written during
    /// the rebalance) readable from its new owner.
    @Test func majorityWritesSurviveFailoverAndRebalanceUnderLoad() async throws {
        let nodes = try (0..<4).map { try ServerProcess(name: "cdata-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for s in nodes { try s.start() }
        let (a, b, c, d) = (nodes[0], nodes[1], nodes[2], nodes[3])
        try ClusterHarness.formCluster([a, b, c], authType: "none")

        let client = try await BucketClient.connect(
            ClientOptions(
                seeds: [.http(NodeAddress(host: "127.0.0.1", port: a.adminPort))], bucket: "demo",
                username: "Administrator", password: "password", operationTimeoutMs: 10_000))
        try await Self.waitForReplicaStreams(client)
        let n = Self.keyCount
        let started = Date()
        let writeErrors = await Self.parallel(n) { i in
            _ = try await client.upsert("key::\(i)", Self.value(i), durability: .majority)
        }
        #expect(writeErrors.isEmpty, "\(writeErrors.count) durable writes failed, first: \(writeErrors.prefix(3))")
        let writeSeconds = Date().timeIntervalSince(started)

        // SIGKILL c and fail it over: its active vBuckets' replicas take over.
        try a.enableAudit()
        c.kill9()
        let failover = try a.http("POST", "/controller/failOver", form: [("otpNode", ClusterHarness.nodeName(c))])
        #expect(failover.status == 200)
        // Audited (issue 72 item 3): the node failed over, hard, by whom.
        let audited = try a.auditRecords(id: 40971)
        #expect(audited.first?["otp_node"] as? String == ClusterHarness.nodeName(c), "\(audited)")
        #expect(audited.first?["type"] as? String == "hard")
        let missing = Mutex<[Int]>([])
        let readErrors = await Self.parallel(n) { i in
            let r = try await client.get("key::\(i)")
            if r.value != Self.value(i) { missing.withLock { $0.append(i) } }
        }
        #expect(readErrors.isEmpty, "\(readErrors.count) reads failed after failover, first: \(readErrors.prefix(3))")
        #expect(missing.withLock { $0.isEmpty })

        // Add d and rebalance while a writer runs.
        #expect(try ClusterHarness.addNode(a, d).status == 200)
        // Plain writes: until the rebalance re-creates the replicas lost with c, a vBucket that had its only
        // replica there cannot meet majority durability (DURABILITY_IMPOSSIBLE, as in Couchbase).
        let stop = Atomic<Bool>(false)
        let liveWrites = Atomic<Int>(0)
        let writer = Task { () -> [String] in
            var errors: [String] = []
            var i = 0
            while !stop.load(ordering: .relaxed) {
                do {
                    _ = try await client.upsert("live::\(i)", Self.value(i))
                    liveWrites.add(1, ordering: .relaxed)
                    i += 1
                } catch {
                    errors.append("live::\(i): \(error)")
                }
            }
            return errors
        }
        // The writer is under way before the rebalance starts.
        for _ in 0..<200 where liveWrites.load(ordering: .relaxed) == 0 { try await Task.sleep(for: .milliseconds(50)) }
        let rebalanceStarted = Date()
        let failure = try await ClusterHarness.rebalanceOffPool(a, known: [a, b, c, d], timeout: 600)
        let rebalanceSeconds = Date().timeIntervalSince(rebalanceStarted)
        stop.store(true, ordering: .relaxed)
        let liveErrors = await writer.value
        #expect(failure == nil, "\(failure ?? "")")
        #expect(liveErrors.isEmpty, "\(liveErrors.count) writes failed during rebalance: \(liveErrors.prefix(3))")
        let live = liveWrites.load(ordering: .relaxed)
        #expect(live > 0)

        let final = try ClusterHarness.map(a)
        let balanced = ClusterHarness.isBalanced(final.chains, nodes: 3, replicas: 1)
        #expect(balanced, "\(ClusterHarness.summary(final))")
        #expect(final.servers.count == 3)

        let stillMissing = Mutex<[String]>([])
        // A read that timed out is resent (reads are idempotent): on a CI machine running other process
        // tests beside this one, a get occasionally waits out its 10 s deadline. Lost keys still fail.
        let retriedReads = Mutex(0)
        let finalErrors = await Self.parallel(n + live) { i in
            let key = i < n ? "key::\(i)" : "live::\(i - n)"
            var attempt = 0
            while true {
                do {
                    let r = try await client.get(key)
                    if r.value != Self.value(i < n ? i : i - n) { stillMissing.withLock { $0.append(key) } }
                    return
                } catch  where attempt < 3 && "\(error)".contains("timed out") {
                    attempt += 1
                    retriedReads.withLock { $0 += 1 }
                }
            }
        }
        print("final reads resent after a timeout: \(retriedReads.withLock { $0 })")
        #expect(finalErrors.isEmpty, "\(finalErrors.count) reads failed after rebalance: \(finalErrors.prefix(3))")
        #expect(stillMissing.withLock { $0.isEmpty })
        // Copies a node no longer holds are dropped: every dead vBucket ends up empty.
        let cleaned = try ClusterHarness.eventually(30) {
            try [a, b, d].allSatisfy { node in
                let rows = try node.http("GET", "/settee/internal/seqnos?bucket=demo").json() as? [[Any]] ?? []
                return rows.count == 1024
                    && rows.allSatisfy { ($0.first as? String) != "dead" || ($0[1] as? Int ?? -1) == 0 }
            }
        }
        #expect(cleaned)
        await client.close()
        print(
            "cluster scenario: \(n) majority writes in \(String(format: "%.1f", writeSeconds)) s; rebalance 3→3+1−1 "
                + "in \(String(format: "%.1f", rebalanceSeconds)) s with \(live) concurrent writes")
    }

    /// Runs memcaslap (binary, 90/10, not vBucket-aware) against `port` for `seconds`; returns its output.
    static func memcaslap(port: Int, seconds: Int, label: String) throws -> (status: Int32, output: String) {
        let run = try ChildProcess.run(
            "/usr/bin/memcaslap",
            ["-s", "127.0.0.1:\(port)", "-B", "-T", "1", "-c", "8", "-t", "\(seconds)s", "-X", "512"],
            output: .log(TestOutput.directory.appendingPathComponent("memcaslap-\(label)-\(port).log")))
        return (run.status, run.output)
    }

    /// memcaslap's operation count, failure lines and get-miss line.
    static func memcaslapOutcome(_ output: String) -> (ops: Int, failures: [String], misses: String) {
        let lines = output.split(separator: "\n").map(String.init)
        let run = (lines.first { $0.hasPrefix("Run time") } ?? "").split(separator: " ")
        let ops = run.firstIndex(of: "Ops:").flatMap { Int(run[$0 + 1]) } ?? 0
        let failures = lines.filter { $0.lowercased().contains("error") || $0.lowercased().contains("fail") }
        return (ops, failures, lines.first { $0.hasPrefix("get_misses:") } ?? "")
    }

    /// Proves the cluster scenario for vBucket-unaware clients: memcaslap drives load through `settee-router`
    /// while a fourth node is added and rebalanced in (no errors, no misses of keys it wrote, no failed
    /// forwards), then again after a node is SIGKILLed and failed over.
    @Test func memcaslapThroughRouterDuringRebalanceAndFailover() async throws {
        let nodes = try (0..<4).map { try ServerProcess(name: "crouter-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for s in nodes { try s.start() }
        let (a, b, c, d) = (nodes[0], nodes[1], nodes[2], nodes[3])
        try ClusterHarness.formCluster([a, b, c], authType: "sasl")
        let router = try RouterProcess(server: a)

        // Load during a rebalance that adds d.
        #expect(try ClusterHarness.addNode(a, d).status == 200)
        let routerPort = router.port
        // memcaslap and the rebalance poll block: each on a thread of its own, not the cooperative pool.
        let load = Task { try await offPool { try Self.memcaslap(port: routerPort, seconds: 12, label: "rebalance") } }
        try await Task.sleep(for: .seconds(2))
        let failure = try await ClusterHarness.rebalanceOffPool(a, known: [a, b, c, d], timeout: 300)
        #expect(failure == nil, "\(failure ?? "")")
        let during = try await load.value
        let outcome = Self.memcaslapOutcome(during.output)
        #expect(during.status == 0)
        #expect(outcome.ops > 1000, "\(during.output.suffix(1500))")
        #expect(outcome.failures.isEmpty, "\(outcome.failures)")
        #expect(outcome.misses == "get_misses: 0", "\(during.output.suffix(1500))")
        let balanced = ClusterHarness.isBalanced(try ClusterHarness.map(a).chains, nodes: 4, replicas: 1)
        #expect(balanced)

        // SIGKILL c, fail it over, load again.
        c.kill9()
        #expect(
            try b.http("POST", "/controller/failOver", form: [("otpNode", ClusterHarness.nodeName(c))]).status == 200)
        let after = try Self.memcaslap(port: router.port, seconds: 4, label: "failover")
        let afterOutcome = Self.memcaslapOutcome(after.output)
        #expect(after.status == 0)
        #expect(afterOutcome.ops > 500, "\(after.output.suffix(1500))")
        #expect(afterOutcome.failures.isEmpty, "\(afterOutcome.failures)")
        #expect(afterOutcome.misses == "get_misses: 0", "\(after.output.suffix(1500))")
    }
}
