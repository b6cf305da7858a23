import Foundation
import NIOCore
import SetteeClusterMap
import SetteeCore
import SetteeProtocol
import SetteeStorage
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeNode

/// Durable writes over the wire as prepares (docs/internals/sync-writes.md), on a two-node cluster whose
/// replica can be made to stop acknowledging.
@Suite(.serialized) struct SyncWriteNodeTests {
    static let vbuckets = 8

    private func client(_ node: TestDataNode, hello: [HelloFeature] = []) throws -> TestKVClient {
        let c = try TestKVClient(port: node.info.kvPort, timeoutSeconds: 30)
        if !hello.isEmpty { try c.hello(hello) }
        guard try c.authenticate(user: adminUser, password: adminPassword) == .success else {
            throw TestError("auth failed")
        }
        guard try c.request(.selectBucket, key: bucketName).status == .success else { throw TestError("select") }
        return c
    }

    private func vb(_ k: String) -> UInt16 { VBucketHash.vbucket(forKey: key(k), count: Self.vbuckets).rawValue }

    /// Writes a SET frame without waiting for its answer; durable (majority) with `timeoutMs` when given.
    private func sendSet(
        _ c: TestKVClient, _ k: String, _ v: String, opaque: UInt32, timeoutMs: UInt16? = nil, level: UInt8 = 1
    ) throws {
        var b = ByteBuffer()
        let fe: [UInt8] = timeoutMs.map { [0x13, level, UInt8($0 >> 8), UInt8($0 & 0xff)] } ?? []
        b.writeRequest(
            opcode: .set, vbucket: vb(k), opaque: opaque, cas: 0, datatype: 0, framingExtras: fe,
            extras: TestKVClient.setExtras(flags: 0, expiry: 0), key: key(k), value: Array(v.utf8))
        try c.send(b)
    }

    private func sendGet(_ c: TestKVClient, _ k: String, opaque: UInt32) throws {
        var b = ByteBuffer()
        b.writeRequest(
            opcode: .get, vbucket: vb(k), opaque: opaque, cas: 0, datatype: 0, framingExtras: [], extras: [],
            key: key(k), value: [])
        try c.send(b)
    }

    private func started() async throws -> TestCluster {
        let cluster = try await TestCluster(nodes: 2, replicas: 1, vbuckets: Self.vbuckets)
        let map = VBucketMap(numReplicas: 1, chains: Array(repeating: [0, 1], count: Self.vbuckets), nodeCount: 2)
        cluster.apply(map)
        return cluster
    }

    /// Before the fix a durable write's value was readable while it waited for its majority, a second write
    /// overwrote it, and a timed-out one stayed visible. Now, with the replica no longer acknowledging: a GET
    /// (on the same connection, answered at once thanks to UnorderedExecution) returns the previous value, a
    /// plain SET of the key gets SYNC_WRITE_IN_PROGRESS (0xa2), the durable write times out as
    /// SYNC_WRITE_AMBIGUOUS (0xa3) and is aborted: the previous value stays. With the replica following, the
    /// committed value is what a GET returns right after the acknowledgement.
    @Test func preparedWriteIsInvisibleAndDoesNotBlockTheConnection() async throws {
        let cluster = try await started()
        let c = try client(cluster.nodes[0], hello: [.unorderedExecution, .xerror])
        #expect(try sendSetAndWait(c, "k", "\"old\"") == .success)
        // Committed case first: visible right after the acknowledgement.
        try sendSet(c, "c", "\"durable\"", opaque: 100, timeoutMs: 10_000)
        let committed = try c.receive()
        #expect(committed.opaque == 100 && committed.status == .success)
        #expect(try c.request(.get, key: "c", vbucket: vb("c")).valueBytes == Array("\"durable\"".utf8))

        cluster.nodes[1].manager.removeBucket(bucketName)  // the replica stops acknowledging
        let start = Date()
        try sendSet(c, "k", "\"new\"", opaque: 200, timeoutMs: 3_000)
        try sendGet(c, "k", opaque: 201)
        try sendSet(c, "k", "\"plain\"", opaque: 202)
        let get = try c.receive()
        #expect(get.opaque == 201 && get.status == .success)
        #expect(get.valueBytes == Array("\"old\"".utf8))
        #expect(Date().timeIntervalSince(start) < 2.0)  // not held behind the waiting write
        let second = try c.receive()
        #expect(second.opaque == 202 && second.status == .syncWriteInProgress)
        let durable = try c.receive()
        #expect(durable.opaque == 200 && durable.status == .syncWriteAmbiguous)
        #expect(Date().timeIntervalSince(start) >= 2.9)
        // Aborted: never visible, the previous value stays and the key takes writes again.
        #expect(try c.request(.get, key: "k", vbucket: vb("k")).valueBytes == Array("\"old\"".utf8))
        #expect(try sendSetAndWait(c, "k", "\"after\"") == .success)
        await cluster.shutdown()
    }

    /// An answered durable write leaves no timeout task behind. Each used to stay scheduled for its whole timeout
    /// (30 s by default) after the answer, holding the request's read buffer: under a stream of majority writes a
    /// node's memory grew by about a kilobyte per write. 200 writes with a 60 s timeout, all committed, leave none;
    /// one that times out (the replica gone) leaves none either.
    @Test func answeredDurableWritesLeaveNoTimeoutScheduled() async throws {
        let cluster = try await started()
        let counters = cluster.nodes[0].kv.counters
        let c = try client(cluster.nodes[0], hello: [.unorderedExecution, .xerror])
        for i in 0..<200 { try sendSet(c, "t\(i)", "\(i)", opaque: UInt32(1_000 + i), timeoutMs: 60_000) }
        var committed = Set<UInt32>()
        for _ in 0..<200 {
            let r = try c.receive()
            if r.status == .success { committed.insert(r.opaque) }
        }
        #expect(committed == Set((0..<200).map { UInt32(1_000 + $0) }))
        #expect(counters.durableTimeoutsScheduled.load(ordering: .relaxed) == 0)

        cluster.nodes[1].manager.removeBucket(bucketName)  // the replica stops acknowledging
        try sendSet(c, "late", "1", opaque: 2_000, timeoutMs: 500)
        #expect(counters.durableTimeoutsScheduled.load(ordering: .relaxed) <= 1)
        let r = try c.receive()
        #expect(r.opaque == 2_000 && r.status == .syncWriteAmbiguous)
        #expect(counters.durableTimeoutsScheduled.load(ordering: .relaxed) == 0)
        await cluster.shutdown()
    }

    /// The same on a bucket without replicas, where a persistToMajority write waits for this node's disk only (the
    /// `.persist` path): 100 writes answered, no timeout task left.
    @Test func answeredPersistedWritesLeaveNoTimeoutScheduled() async throws {
        let cluster = try await TestCluster(nodes: 1, replicas: 0, vbuckets: Self.vbuckets)
        cluster.apply(VBucketMap(numReplicas: 0, chains: Array(repeating: [0], count: Self.vbuckets), nodeCount: 1))
        let counters = cluster.nodes[0].kv.counters
        let c = try client(cluster.nodes[0], hello: [.unorderedExecution, .xerror])
        for i in 0..<100 {
            try sendSet(c, "p\(i)", "\(i)", opaque: UInt32(3_000 + i), timeoutMs: 60_000, level: 3)
        }
        var persisted = Set<UInt32>()
        for _ in 0..<100 {
            let r = try c.receive()
            if r.status == .success { persisted.insert(r.opaque) }
        }
        #expect(persisted == Set((0..<100).map { UInt32(3_000 + $0) }))
        #expect(counters.durableTimeoutsScheduled.load(ordering: .relaxed) == 0)
        await cluster.shutdown()
    }

    /// STAT shows durable writes' outcomes under kv_engine's names (ADR 0086): on the active, 20 majority writes
    /// committed and one aborted when the replica stopped acknowledging (its writer answered ambiguous); on the
    /// replica, the 21 prepares it received. Before, no statistic told an operator that writes were being aborted.
    @Test func statCountsSyncWriteOutcomes() async throws {
        let cluster = try await started()
        let c = try client(cluster.nodes[0], hello: [.unorderedExecution, .xerror])
        for i in 0..<20 { try sendSet(c, "s\(i)", "\(i)", opaque: UInt32(4_000 + i), timeoutMs: 60_000) }
        for _ in 0..<20 { #expect(try c.receive().status == .success) }
        let replicaHeld = cluster.nodes[1].engine.stats().syncWrites.replicaAccepted
        cluster.nodes[1].manager.removeBucket(bucketName)  // the replica stops acknowledging
        try sendSet(c, "late", "1", opaque: 5_000, timeoutMs: 500)
        #expect(try c.receive().status == .syncWriteAmbiguous)
        let stats = try c.stats()
        #expect(stats["vb_active_sync_write_accepted_count"] == "21")
        #expect(stats["vb_active_sync_write_committed_count"] == "20")
        #expect(stats["vb_active_sync_write_aborted_count"] == "1")
        #expect(stats["vb_replica_sync_write_accepted_count"] == "0")
        #expect(replicaHeld == 20)
        await cluster.shutdown()
    }

    /// Without UnorderedExecution responses keep request order: the GET after a waiting durable write is
    /// answered after it (and still returns the committed value).
    @Test func withoutUnorderedExecutionResponsesStayInOrder() async throws {
        let cluster = try await started()
        let c = try client(cluster.nodes[0])
        #expect(try sendSetAndWait(c, "k", "1") == .success)
        cluster.nodes[1].manager.removeBucket(bucketName)
        try sendSet(c, "k", "2", opaque: 300, timeoutMs: 500)
        try sendGet(c, "k", opaque: 301)
        let first = try c.receive()
        #expect(first.opaque == 300 && first.status == .syncWriteAmbiguous)
        let second = try c.receive()
        #expect(second.opaque == 301 && second.valueBytes == Array("1".utf8))
        await cluster.shutdown()
    }

    /// The HELLO answer agrees to UnorderedExecution (0x0e), which the official SDKs ask for by default.
    @Test func helloAgreesToUnorderedExecution() async throws {
        let cluster = try await started()
        let c = try TestKVClient(port: cluster.nodes[0].info.kvPort, timeoutSeconds: 30)
        let r = try c.request(.hello, key: "t", value: [0x00, 0x0e, 0x00, 0x07])
        #expect(r.valueBytes == [0x00, 0x0e, 0x00, 0x07])
        await cluster.shutdown()
    }

    private func sendSetAndWait(_ c: TestKVClient, _ k: String, _ v: String) throws -> Status {
        try c.request(
            .set, key: k, value: Array(v.utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 0), vbucket: vb(k)
        ).status
    }
}
