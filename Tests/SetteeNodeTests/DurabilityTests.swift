import Foundation
import NIOCore
import SetteeClusterMap
import SetteeCore
import SetteeProtocol
import SetteeStorage
import SetteeStreams
import SetteeTestSupport
import Testing

@testable import SetteeNode

@Suite(.serialized) struct DurabilityTests {
    static let vbuckets = 8

    /// A client on the active node, logged in as the administrator, with the bucket selected.
    private func client(_ node: TestDataNode) throws -> TestKVClient {
        let c = try TestKVClient(port: node.info.kvPort, timeoutSeconds: 30)
        guard try c.authenticate(user: adminUser, password: adminPassword) == .success else {
            throw TestError("auth failed")
        }
        guard try c.request(.selectBucket, key: bucketName).status == .success else { throw TestError("select") }
        return c
    }

    /// Framing extras for a durability requirement (id 1), with an optional timeout in milliseconds.
    private func durability(_ level: UInt8, timeoutMs: UInt16? = nil) -> [UInt8] {
        guard let t = timeoutMs else { return [0x11, level] }
        return [0x13, level, UInt8(t >> 8), UInt8(t & 0xff)]
    }

    private func set(_ c: TestKVClient, _ k: String, level: UInt8, timeoutMs: UInt16? = nil) throws -> Status {
        let vb = VBucketHash.vbucket(forKey: key(k), count: Self.vbuckets).rawValue
        return try c.request(
            .set, key: k, value: Array("{\"k\":\"\(k)\"}".utf8),
            extras: TestKVClient.setExtras(flags: 0, expiry: 0), vbucket: vb,
            framingExtras: durability(level, timeoutMs: timeoutMs)
        ).status
    }

    /// Majority durable writes succeed while the replica follows (and the replica holds each one when
    /// it is acknowledged: in memory for majority, on disk for persistToMajority); with the replica
    /// gone they time out as SYNC_WRITE_AMBIGUOUS (0xa3); with no replica in the vBucket's duty they
    /// are DURABILITY_IMPOSSIBLE (0xa1).
    @Test func majorityNeedsTheReplica() async throws {
        let cluster = try await TestCluster(nodes: 2, replicas: 1, vbuckets: Self.vbuckets)
        let map = VBucketMap(numReplicas: 1, chains: Array(repeating: [0, 1], count: Self.vbuckets), nodeCount: 2)
        cluster.apply(map)
        let c = try client(cluster.nodes[0])
        let replica = cluster.nodes[1].engine
        for i in 0..<20 {
            // The replica holds the prepare (the vBucket's next seqno) when the write is acknowledged; it
            // exposes it to GET_REPLICA once the commit follows.
            let k = key("m-\(i)")
            let vb = VBucketHash.vbucket(forKey: k, count: Self.vbuckets)
            let prepareSeqno = cluster.nodes[0].engine.seqnoInfo(vb).highSeqno.next
            #expect(try set(c, "m-\(i)", level: 1) == .success)
            #expect(replica.seqnoInfo(vb).highSeqno >= prepareSeqno)
            #expect(await eventually(timeout: 10) { (try? replica.getReplica(vb, k)) != nil })
        }
        // The prepare takes the next seqno of its vBucket (its commit a later one): the replica persisted it.
        let pvb = VBucketHash.vbucket(forKey: key("p-0"), count: Self.vbuckets)
        let prepareSeqno = cluster.nodes[0].engine.seqnoInfo(pvb).highSeqno.next
        #expect(try set(c, "p-0", level: 3) == .success)
        #expect(replica.seqnoInfo(pvb).persistedSeqno >= prepareSeqno)
        #expect(try set(c, "p-1", level: 2) == .success)

        cluster.nodes[1].manager.removeBucket(bucketName)  // the replica stops following
        #expect(try set(c, "late", level: 1, timeoutMs: 300) == .syncWriteAmbiguous)

        let lonely = VBucketMap(
            numReplicas: 1, chains: Array(repeating: [0, -1], count: Self.vbuckets), nodeCount: 2)
        cluster.apply(lonely, only: [0])
        #expect(try set(c, "never", level: 1) == .durabilityImpossible)
        await cluster.shutdown()
    }

    /// A durable write to a vBucket that is not active on the node is NOT_MY_VBUCKET, as any write is, so the client
    /// finds the active; and a durable write waiting when its vBucket stops being active here is answered ambiguous at
    /// the switch, not at its timeout (ADR 0118). Before, the first was DURABILITY_IMPOSSIBLE (the vBucket's replica
    /// set is empty on a replica), which the client does not retry, and the second waited out its 20 s.
    @Test func aVBucketNotActiveHereRefusesAndEndsDurableWrites() async throws {
        let cluster = try await TestCluster(nodes: 2, replicas: 1, vbuckets: Self.vbuckets)
        let map = VBucketMap(numReplicas: 1, chains: Array(repeating: [0, 1], count: Self.vbuckets), nodeCount: 2)
        cluster.apply(map)
        #expect(try set(client(cluster.nodes[1]), "stale", level: 1) == .notMyVBucket)
        // The replica stops following, so a durable write on node 0 waits; its vBucket then moves to node 1.
        cluster.nodes[1].manager.removeBucket(bucketName)
        let moved = VBucketMap(numReplicas: 1, chains: Array(repeating: [1, 0], count: Self.vbuckets), nodeCount: 2)
        let onActive = try client(cluster.nodes[0])  // connected before the move is scheduled
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.5) { cluster.apply(moved, only: [0]) }
        let start = ContinuousClock.now
        #expect(try set(onActive, "waits", level: 1, timeoutMs: 20_000) == .syncWriteAmbiguous)
        let waited = ContinuousClock.now - start
        #expect(waited < .seconds(10), "answered after \(waited), at its timeout")
        await cluster.shutdown()
    }

    /// Every write acknowledged as majority-durable survives losing the active: after promoting the
    /// replica (it becomes active for every vBucket), all of them read back from it.
    @Test func promotionKeepsAcknowledgedWrites() async throws {
        let cluster = try await TestCluster(nodes: 2, replicas: 1, vbuckets: Self.vbuckets)
        let map = VBucketMap(numReplicas: 1, chains: Array(repeating: [0, 1], count: Self.vbuckets), nodeCount: 2)
        cluster.apply(map)
        let c = try client(cluster.nodes[0])
        var acked: [String] = []
        for i in 0..<300 where try set(c, "w-\(i)", level: 1) == .success { acked.append("w-\(i)") }
        #expect(acked.count == 300)
        // The active is lost: the replica is promoted (failover) and stops following it.
        let promoted = VBucketMap(
            numReplicas: 1, chains: Array(repeating: [1, -1], count: Self.vbuckets), nodeCount: 2)
        cluster.apply(promoted, only: [1])
        let b = cluster.nodes[1].engine
        var missing = 0
        for k in acked {
            let vb = VBucketHash.vbucket(forKey: key(k), count: Self.vbuckets)
            if (try? b.get(vb, key(k)))?.value != Array("{\"k\":\"\(k)\"}".utf8) { missing += 1 }
        }
        #expect(missing == 0)
        #expect(b.vbucketState(VBucketID(0)) == .active)
        #expect(b.failoverHistory(VBucketID(0)).entries.count >= 2)
        await cluster.shutdown()
    }
}
