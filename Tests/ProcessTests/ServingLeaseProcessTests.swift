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

/// A node paused past the failover timeout answers nothing as an active once it resumes (ADR 0124).
@Suite("Serving lease (real processes)", .serialized, .onTestThreads)
struct ServingLeaseProcessTests {
    static func value(_ n: Int) -> [UInt8] { Array("\(n)".utf8) }

    /// Proves the lease on real processes: three nodes, replicaNumber 2, auto-failover at its minimum timeout (5 s).
    /// Keys active on c are written (1, majority-durable); c is SIGSTOPped and failed over automatically; through the
    /// new actives the keys are written again (2). Then requests are queued in c's sockets, as from clients whose map
    /// still names c: GETs of the rewritten keys and SETs (3) of others, invoked after every write of 2 was
    /// acknowledged. On SIGCONT c reads them before its first tick can run. Every answer must be NOT_MY_VBUCKET (the
    /// status SDKs retry, with c's config as body): a GET answering 1 would be a stale read (the write of 2 completed
    /// before it was invoked, a history no register allows), a SET answering SUCCESS would be acknowledged on a node
    /// that is no longer in the cluster and lost. Afterwards every key reads 2 through the cluster, and c counts the
    /// refusals in STAT `lease_refusals`. Before the lease, c answered such requests from its old state whenever they
    /// reached it before its fence timer ran (issue 69: stale reads in 3 of 6 runs, once a lost SET).
    @Test func aNodeResumedAfterItsFailoverAnswersQueuedRequestsNotMyVBucket() async throws {
        let nodes = try (0..<3).map { try ServerProcess(name: "lease-\($0)") }
        defer {
            for s in nodes { FailoverSafetyProcessTests.signal(s, SIGCONT) }
            nodes.forEach { $0.stopAndRemove() }
        }
        for s in nodes { try s.start() }
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])
        try ClusterHarness.formCluster([a, b, c], authType: "none", replicaNumber: 2)
        let settings = try a.http("POST", "/settings/autoFailover", form: [("enabled", "true"), ("timeout", "5")])
        #expect(settings.status == 200, "\(settings.text)")
        let before = try ClusterHarness.map(a)
        let cIndex = before.servers.firstIndex(of: "127.0.0.1:\(c.kvPort)") ?? -1
        var onC: [String] = []
        var i = 0
        while onC.count < 40 && i < 100_000 {
            let key = "lease::\(i)"
            let vb = Int(VBucketHash.vbucket(forKey: Array(key.utf8)).rawValue)
            if vb < before.chains.count, before.chains[vb].first == cIndex { onC.append(key) }
            i += 1
        }
        #expect(onC.count == 40, "too few keys active on c")
        let (readKeys, writeKeys) = (Array(onC.prefix(20)), Array(onC.dropFirst(20)))

        let first = try await FailoverSafetyProcessTests.connect([a, b, c], operationTimeoutMs: 10_000)
        try await ClusterDataProcessTests.waitForReplicaStreams(first)
        for key in onC { _ = try await first.upsert(key, Self.value(1), durability: .majority) }
        await first.close()
        // Connections a client whose map still names c holds open.
        let readConnection = try TestKVClient(port: c.kvPort)
        let writeConnection = try TestKVClient(port: c.kvPort)
        for conn in [readConnection, writeConnection] {
            #expect(try conn.request(.selectBucket, key: "demo").status == .success)
            #expect(try conn.request(.get, key: readKeys[0]).status == .success, "c serves before the pause")
        }

        FailoverSafetyProcessTests.signal(c, SIGSTOP)
        let failedOver = await waitUntil(40) {
            (try? ClusterHarness.members(a)[ClusterHarness.nodeName(c)]) == "inactiveFailed"
                && (try? ClusterHarness.map(b).servers.contains("127.0.0.1:\(c.kvPort)")) == false
        }
        #expect(failedOver, "c was not failed over")
        let survivors = try await FailoverSafetyProcessTests.connect([a, b], operationTimeoutMs: 10_000)
        for key in onC { _ = try await survivors.upsert(key, Self.value(2)) }

        // Invoked after every write of 2 completed; waiting in c's sockets while it is stopped.
        var gets = ByteBuffer()
        var getOpaques: [UInt32: String] = [:]
        for key in readKeys {
            let opaque = readConnection.opaque()
            getOpaques[opaque] = key
            gets.writeRequest(
                opcode: .get, vbucket: VBucketHash.vbucket(forKey: Array(key.utf8)).rawValue, opaque: opaque, cas: 0,
                datatype: 0, framingExtras: [], extras: [], key: Array(key.utf8), value: [])
        }
        var sets = ByteBuffer()
        var setOpaques: [UInt32: String] = [:]
        for key in writeKeys {
            let opaque = writeConnection.opaque()
            setOpaques[opaque] = key
            sets.writeRequest(
                opcode: .set, vbucket: VBucketHash.vbucket(forKey: Array(key.utf8)).rawValue, opaque: opaque, cas: 0,
                datatype: 0, framingExtras: [], extras: TestKVClient.setExtras(flags: 0, expiry: 0),
                key: Array(key.utf8), value: Self.value(3))
        }
        try readConnection.send(gets)
        try writeConnection.send(sets)
        FailoverSafetyProcessTests.signal(c, SIGCONT)

        var stale: [String] = []
        var acknowledged: [String] = []
        var statuses: [String: Int] = [:]
        for _ in readKeys {
            let f = try readConnection.receive()
            statuses["\(f.status)", default: 0] += 1
            if f.status == .success { stale.append("\(getOpaques[f.opaque] ?? "?")=\(String(buffer: f.value))") }
        }
        for _ in writeKeys {
            let f = try writeConnection.receive()
            statuses["\(f.status)", default: 0] += 1
            if f.status == .success { acknowledged.append(setOpaques[f.opaque] ?? "?") }
        }
        #expect(stale.isEmpty, "c answered GETs from its state before the failover: \(stale.prefix(5))")
        #expect(statuses == ["\(Status.notMyVBucket)": onC.count], "c's answers: \(statuses)")

        // The history, read back through the cluster: each key holds 2, or 3 where c acknowledged a SET (lost if not).
        var lost: [String] = []
        var wrong: [String] = []
        for key in onC {
            let got = String(decoding: try await survivors.get(key).value, as: UTF8.self)
            if acknowledged.contains(key) {
                if got != "3" { lost.append(key) }
            } else if got != "2" {
                wrong.append("\(key)=\(got)")
            }
        }
        #expect(lost.isEmpty, "SETs c acknowledged after it resumed are lost: \(lost.prefix(5))")
        #expect(wrong.isEmpty, "keys changed by nobody's acknowledged write: \(wrong.prefix(5))")
        // Which rule refused them depends on what c runs first after SIGCONT: its KV loops reading the queued requests
        // (the lease refuses them; every run on a quiet machine) or its brain adopting the failover config (the vBucket
        // is no longer active; seen under a load average of 20 on 2 cores). Both are safe, which is what this test
        // checks; that the lease alone is needed is `ClusterBrainSimulationTests.pausedActiveServesStaleWithoutTheLease`'s.
        let refusals = Int((try? TestKVClient(port: c.kvPort).stats())?["lease_refusals"] ?? "") ?? -1
        print("paused node resumed after its failover: answers \(statuses), lease_refusals \(refusals)")
        await survivors.close()
    }
}
