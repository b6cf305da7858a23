import Foundation
import NIOCore
import SetteeClusterMap
import SetteeCore
import SetteeProtocol
import SetteeStorage
import Synchronization
import Testing

@testable import SetteeNode

@Suite(.serialized) struct ReplicationTests {
    /// A replica follows its active over real DCP connections: after 100,000 writes (and some deletions)
    /// spread over the vBuckets of two nodes, every vBucket's replica holds exactly the active's items,
    /// with the same seqnos, CAS, revSeqnos and flags.
    @Test func replicaFollowsActive() async throws {
        let cluster = try await TestCluster(nodes: 2, replicas: 1, vbuckets: 64)
        let map = VBucketMap.build(numVBuckets: 64, nodeCount: 2, numReplicas: 1)
        cluster.apply(map)
        let engines = cluster.nodes.map(\.engine)
        let start = Date()
        for i in 0..<100_000 {
            let k = key("doc-\(i)")
            let vb = VBucketHash.vbucket(forKey: k, count: 64)
            let owner = engines[map.chains[vb.index][0]]
            _ = try owner.store(
                .set, vb, k, value: Array("{\"i\":\(i)}".utf8), flags: UInt32(i), expiry: 0, datatype: .json,
                cas: .zero)
            if i % 100 == 99 {
                let d = key("doc-\(i - 50)")
                let dvb = VBucketHash.vbucket(forKey: d, count: 64)
                _ = try engines[map.chains[dvb.index][0]].delete(dvb, d, cas: .zero)
            }
        }
        func synced() -> Bool {
            (0..<64).allSatisfy { v in
                let vb = VBucketID(UInt16(v))
                let chain = map.chains[v]
                return engines[chain[0]].seqnoInfo(vb).highSeqno == engines[chain[1]].seqnoInfo(vb).highSeqno
            }
        }
        let written = Date()
        #expect(await eventually(timeout: 120) { synced() })
        // A figure for the report, not an assertion (the machine is shared).
        print(
            "replicaFollowsActive: 100k writes + 1k deletes in \(Int(written.timeIntervalSince(start) * 1000)) ms, "
                + "replica in sync \(Int(Date().timeIntervalSince(written) * 1000)) ms after the last write; "
                + "snapshots \(cluster.nodes[1].manager.counters.snapshotsApplied.load(ordering: .relaxed)), "
                + "items \(cluster.nodes[1].manager.counters.itemsReceived.load(ordering: .relaxed))")
        var same = true
        for v in 0..<64 {
            let chain = map.chains[v]
            same = try same && sameContents(engines[chain[0]], engines[chain[1]], VBucketID(UInt16(v)))
        }
        #expect(same)
        #expect(cluster.nodes[1].manager.status(bucket: bucketName, vb: VBucketID(0))?.streamConnected == true)
        #expect(cluster.nodes[1].manager.status(bucket: bucketName, vb: VBucketID(0))?.state == .replica)
        await cluster.shutdown()
    }

    /// After the consumer's connection drops it reconnects and resumes from its persisted position: only
    /// the changes made since are sent again, not the whole history.
    @Test func resumeAfterReconnect() async throws {
        let cluster = try await TestCluster(nodes: 2, replicas: 1, vbuckets: 16)
        let map = VBucketMap(numReplicas: 1, chains: Array(repeating: [0, 1], count: 16), nodeCount: 2)
        cluster.apply(map)
        let (a, b) = (cluster.nodes[0].engine, cluster.nodes[1].engine)
        func write(_ range: Range<Int>) throws {
            for i in range {
                let k = key("r-\(i)")
                _ = try a.store(
                    .set, VBucketHash.vbucket(forKey: k, count: 16), k, value: [1, 2, 3], flags: 0, expiry: 0,
                    datatype: .raw, cas: .zero)
            }
        }
        func synced() -> Bool {
            (0..<16).allSatisfy { v in
                let vb = VBucketID(UInt16(v))
                return a.seqnoInfo(vb).highSeqno == b.seqnoInfo(vb).highSeqno
            }
        }
        try write(0..<5000)
        #expect(await eventually { synced() })
        let received = cluster.nodes[1].manager.counters.itemsReceived.load(ordering: .relaxed)
        #expect(received >= 5000)
        cluster.nodes[1].manager.dropConnections(bucket: bucketName)
        try await Task.sleep(nanoseconds: 50_000_000)
        try write(5000..<5020)
        #expect(await eventually { synced() })
        let again = cluster.nodes[1].manager.counters.itemsReceived.load(ordering: .relaxed) - received
        #expect(again >= 20 && again < 200)
        var same = true
        for v in 0..<16 { same = try same && sameContents(a, b, VBucketID(UInt16(v))) }
        #expect(same)
        await cluster.shutdown()
    }

    /// A consumer whose copy diverged (it took writes under its own history) is told to roll back by
    /// the producer when it reconnects; it drops its copy and rebuilds it, ending equal to the active.
    @Test func rollbackWhenConsumerDiverged() async throws {
        let cluster = try await TestCluster(nodes: 2, replicas: 1, vbuckets: 4)
        let map = VBucketMap(numReplicas: 1, chains: Array(repeating: [0, 1], count: 4), nodeCount: 2)
        cluster.apply(map)
        let (a, b) = (cluster.nodes[0].engine, cluster.nodes[1].engine)
        let vb = VBucketID(2)
        for i in 0..<200 {
            _ = try a.store(.set, vb, key("d-\(i)"), value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        #expect(await eventually { b.seqnoInfo(vb).highSeqno == a.seqnoInfo(vb).highSeqno })
        // Diverge: the replica becomes active on its own, takes writes, and goes back to replica.
        b.setVBucketState(vb, .active)
        for i in 0..<5 {
            _ = try b.store(.set, vb, key("x-\(i)"), value: [9], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        b.setVBucketState(vb, .replica)
        for i in 200..<210 {
            _ = try a.store(.set, vb, key("d-\(i)"), value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        cluster.nodes[1].manager.dropConnections(bucket: bucketName)
        #expect(await eventually { cluster.nodes[1].manager.counters.rollbacks.load(ordering: .relaxed) >= 1 })
        #expect(await eventually { (try? sameContents(a, b, vb)) == true })
        #expect(throws: EngineError.keyNotFound) { try b.getReplica(vb, key("x-0")) }
        #expect(b.failoverHistory(vb) == a.failoverHistory(vb))
        await cluster.shutdown()
    }
}
