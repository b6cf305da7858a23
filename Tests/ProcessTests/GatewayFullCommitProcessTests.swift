import Foundation
import SetteeCore
import SetteeGateway
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `_ensure_full_commit` on a cluster bucket waits for the gateway's acknowledged writes to be persisted on the active
/// and on a majority of each vBucket's copies (ADR 0039 decision 6), on real nodes.
@Suite("Gateway full commit on a cluster bucket (real node)", .serialized, .onTestThreads)
struct GatewayFullCommitProcessTests {
    /// Proves: after 40 acknowledged writes, with the node paused (SIGSTOP) the barrier does not pretend: it fails
    /// as temporary after its bound (it used to return at once, waiting for nothing); resumed, the same barrier (the
    /// marks were kept) passes; with nothing written since, the next one returns at once.
    @Test func barrierWaitsForTheNodeAndKeepsItsMarks() async throws {
        let node = try ServerProcess.started(name: "gw-fullcommit")
        defer { node.stopAndRemove() }
        try node.initialize(authType: "sasl")
        let bucket = try await GatewayClusterProcessTests.mount(node)
        for i in 0..<40 { _ = try await bucket.upsert("fc-\(i)", value: Array("{\"n\":\(i)}".utf8), expiry: 0) }

        if let p = node.process { kill(p.processIdentifier, SIGSTOP) }
        let started = Date()
        var refused: GatewayBucketError? = nil
        do { try await bucket.ensureFullCommit() } catch { refused = error }
        let waited = Date().timeIntervalSince(started)
        if let p = node.process { kill(p.processIdentifier, SIGCONT) }
        print(
            "full-commit barrier against a paused node failed after \(String(format: "%.1f", waited)) s: \(refused.map { "\($0)" } ?? "-")"
        )
        guard case .temporary? = refused else {
            Issue.record("the barrier passed with the node paused: \(String(describing: refused))")
            await bucket.close()
            return
        }
        #expect(waited >= 9)

        try await bucket.ensureFullCommit()
        let again = Date()
        try await bucket.ensureFullCommit()
        #expect(Date().timeIntervalSince(again) < 1)
        await bucket.close()
    }

    /// Proves the barrier waits for a majority of copies, not the active alone: on two nodes with replicaNumber 1,
    /// writes only to vBuckets active on node A with their replica on B pass the barrier while both run; written again
    /// with B paused (SIGSTOP), where A alone persists them and the barrier used to pass, it fails as temporary after
    /// its bound; with B resumed, the kept marks pass.
    @Test func barrierWaitsForAMajorityOfCopies() async throws {
        let a = try ServerProcess(name: "gw-fc-maj-a")
        let b = try ServerProcess(name: "gw-fc-maj-b")
        defer { [a, b].forEach { $0.stopAndRemove() } }
        try a.start()
        try b.start()
        try ClusterHarness.formCluster([a, b], authType: "sasl", replicaNumber: 1)
        let map = try ClusterHarness.map(a)
        guard let ia = map.servers.firstIndex(where: { $0.hasSuffix(":\(a.kvPort)") }),
            let ib = map.servers.firstIndex(where: { $0.hasSuffix(":\(b.kvPort)") })
        else {
            Issue.record("nodes not in the map's server list: \(map.servers)")
            return
        }
        // Keys whose vBucket is active on A with its replica on B.
        var keys: [String] = []
        var i = 0
        while keys.count < 20 && i < 10_000 {
            let key = "fc-maj-\(i)"
            let vb = VBucketHash.vbucket(forKey: key, count: map.chains.count)
            if map.chains[vb.index] == [ia, ib] { keys.append(key) }
            i += 1
        }
        #expect(keys.count == 20)
        let bucket = try await GatewayClusterProcessTests.mount(a)
        for (n, key) in keys.enumerated() {
            _ = try await bucket.upsert(key, value: Array("{\"n\":\(n)}".utf8), expiry: 0)
        }
        let healthy = Date()
        try await bucket.ensureFullCommit()
        print(
            "full-commit barrier on 2 healthy copies of 20 vBuckets: \(Int(Date().timeIntervalSince(healthy) * 1000)) ms"
        )

        for (n, key) in keys.enumerated() {
            _ = try await bucket.upsert(key, value: Array("{\"n\":\(n + 100)}".utf8), expiry: 0)
        }
        if let p = b.process { kill(p.processIdentifier, SIGSTOP) }
        let started = Date()
        var refused: GatewayBucketError? = nil
        do { try await bucket.ensureFullCommit() } catch { refused = error }
        let waited = Date().timeIntervalSince(started)
        if let p = b.process { kill(p.processIdentifier, SIGCONT) }
        print(
            "full-commit barrier with the replica node paused failed after \(String(format: "%.1f", waited)) s: \(refused.map { "\($0)" } ?? "-")"
        )
        guard case .temporary? = refused else {
            Issue.record("the barrier passed with only the active holding the writes: \(String(describing: refused))")
            await bucket.close()
            return
        }
        #expect(waited >= 9)
        try await bucket.ensureFullCommit()
        await bucket.close()
    }
}
