import Foundation
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// OBSERVE (0x92) on a replica copy, over the wire of a real two-node cluster: how an SDK without mutation tokens
/// polls for `replicateTo` (the replica's node answers with the replicated CAS) and `persistTo` beyond the active.
@Suite(.onTestThreads) struct ObserveReplicaProcessTests {
    /// Proves, on two real nodes with replicaNumber 1: the replica's node answers OBSERVE for a vBucket it holds as
    /// replica (not NOT_MY_VBUCKET), reports a write made on the active with the active's CAS once it has arrived,
    /// then as persisted on the replica's disk; one request mixing a key of a vBucket active there and one of a
    /// vBucket replica there is answered for both, in order; an absent key is "not found" with CAS 0; a deletion on
    /// the active reaches the replica as "not found" once on its disk.
    @Test func theReplicasNodeAnswersObserveForItsReplicaVBuckets() throws {
        let a = try ServerProcess(name: "observe-replica-a")
        let b = try ServerProcess(name: "observe-replica-b")
        defer { [a, b].forEach { $0.stopAndRemove() } }
        try a.start()
        try b.start()
        try ClusterHarness.formCluster([a, b], authType: "none")
        #expect(
            try ClusterHarness.eventually {
                let maps = try [a, b].map { try ClusterHarness.map($0) }
                return maps[0].servers.count == 2 && maps.allSatisfy { $0.chains == maps[0].chains }
            })
        let map = try ClusterHarness.map(a)
        var clients: [String: TestKVClient] = [:]
        for s in [a, b] { clients["127.0.0.1:\(s.kvPort)"] = try TestKVClient(port: s.kvPort) }
        func chain(_ key: String) -> (vb: UInt16, active: Int, replica: Int) {
            let vb = VBucketHash.vbucket(forKey: Array(key.utf8)).rawValue
            let c = map.chains[Int(vb)]
            return (vb, c[0], c.count > 1 ? c[1] : -1)
        }
        // Two keys active on different nodes, so the replica of one is the node the other is active on.
        let k1 = "replicated"
        let c1 = chain(k1)
        try #require(c1.active >= 0 && c1.replica >= 0 && c1.active != c1.replica, "chain \(c1)")
        var n = 0
        while chain("local\(n)").active != c1.replica { n += 1 }
        let k2 = "local\(n)"
        let c2 = chain(k2)
        let active = try #require(clients[map.servers[c1.active]])
        let replica = try #require(clients[map.servers[c1.replica]])

        let extras = TestKVClient.setExtras(flags: 0, expiry: 0)
        let set1 = try active.request(.set, key: k1, value: Array("1".utf8), extras: extras)
        let set2 = try replica.request(.set, key: k2, value: Array("2".utf8), extras: extras)
        #expect(set1.status == .success && set2.status == .success)

        func observe(_ client: TestKVClient, _ keys: [Observe.Key]) throws -> [Observe.Answer] {
            let r = try client.request(.observe, value: Observe.requestValue(keys), vbucket: 0)
            #expect(r.status == .success, "OBSERVE answered \(r.status)")
            return try #require(Observe.answers(decoding: r.value))
        }
        /// Polls the replica's node for `k1` until `done` holds; the last answer.
        func pollReplica(_ done: (Observe.Answer) -> Bool) throws -> Observe.Answer? {
            let deadline = Date().addingTimeInterval(20)
            var last: Observe.Answer?
            while Date() < deadline {
                last = try observe(replica, [Observe.Key(vbucket: c1.vb, key: Array(k1.utf8))]).first
                if let last, done(last) { break }
                usleep(20_000)
            }
            return last
        }

        let arrived = try pollReplica { $0.cas == set1.cas }
        #expect(arrived?.cas == set1.cas, "the replica never showed the active's CAS: \(String(describing: arrived))")
        #expect(arrived?.state == .notPersisted || arrived?.state == .persisted)
        let onDisk = try pollReplica { $0.state == .persisted }
        #expect(onDisk?.state == .persisted && onDisk?.cas == set1.cas)

        // One request to the replica's node: a key of a vBucket it holds as replica, one it holds as active, and
        // an absent key. Answered in the request's order.
        let mixed = try observe(
            replica,
            [
                Observe.Key(vbucket: c1.vb, key: Array(k1.utf8)), Observe.Key(vbucket: c2.vb, key: Array(k2.utf8)),
                Observe.Key(vbucket: c1.vb, key: Array("never-written".utf8)),
            ])
        #expect(mixed.map(\.key) == [Array(k1.utf8), Array(k2.utf8), Array("never-written".utf8)])
        #expect(mixed.map(\.vbucket) == [c1.vb, c2.vb, c1.vb])
        #expect(mixed[0].cas == set1.cas && mixed[1].cas == set2.cas && mixed[2].cas == 0)
        #expect(mixed[0].state == .persisted && mixed[2].state == .notFound)
        #expect(mixed[1].state == .notPersisted || mixed[1].state == .persisted)

        let del = try active.request(.delete, key: k1)
        #expect(del.status == .success)
        let gone = try pollReplica { $0.state == .notFound }
        #expect(gone?.state == .notFound, "the deletion did not reach the replica's disk: \(String(describing: gone))")
    }
}
