import Foundation
import NIOCore
import SetteeClusterMap
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import SetteeStorage
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeNode

/// DCP and collections on the wire (ADR 0138): what a consumer without HELLO Collections, a collection-aware one
/// (with and without a stream filter) and a replica receive from the same vBucket.
@Suite(.serialized) struct DCPCollectionsTests {
    /// A producer connection as the administrator, HELLO Collections first when `collections`.
    private func producer(_ node: TestDataNode, name: String, collections: Bool) throws -> TestKVClient {
        let c = try TestKVClient(port: node.info.kvPort, timeoutSeconds: 10)
        #expect(try c.authenticate(user: adminUser, password: adminPassword) == .success)
        if collections { try c.hello([.collections]) }
        #expect(try c.request(.selectBucket, key: bucketName).status == .success)
        var open = ByteBuffer()
        open.writeInteger(UInt32(0))
        open.writeInteger(DCPOpenFlags.producer)
        #expect(
            try c.request(.dcpOpen, key: name, extras: Array(open.readableBytesView), vbucket: 0).status == .success)
        return c
    }

    private func streamRequest(_ c: TestKVClient, vb: UInt16, value: String = "") throws -> Frame {
        var x = ByteBuffer()
        DCPExtras.StreamRequest(start: 0, end: UInt64.max, uuid: 0, snapStart: 0, snapEnd: 0).write(to: &x)
        return try c.request(
            .dcpStreamRequest, value: Array(value.utf8), extras: Array(x.readableBytesView), vbucket: vb)
    }

    /// A snapshot marker, then `count` mutations (system events between them skipped): their keys.
    private func snapshot(_ c: TestKVClient, mutations count: Int) throws -> [[UInt8]] {
        #expect(try c.receive().opcode == .dcpSnapshotMarker)
        var keys: [[UInt8]] = []
        while keys.count < count {
            let f = try c.receive()
            if f.opcode == .dcpSystemEvent { continue }
            #expect(f.opcode == .dcpMutation)
            keys.append(Array(f.key.readableBytesView))
        }
        return keys
    }

    /// Proves a consumer without HELLO Collections gets the default collection only, an escaped binary key
    /// unescaped; a collection-aware one gets every live collection with LEB128-prefixed keys, or those its filter
    /// names (`collections`, `scope`); a replica connection gets engine keys verbatim; an unknown collection or
    /// scope in the filter is refused with the manifest uid, a filter from a consumer that is not collection-aware or
    /// naming both is EINVAL; a dropped collection's items stop, and a stream filtered to it alone ends FilterEmpty.
    @Test func eachConsumerGetsItsCollections() async throws {
        let cluster = try await TestCluster(nodes: 1, replicas: 0, vbuckets: 4)
        let node = cluster.nodes[0]
        try node.registry.editCollections(bucket: bucketName) { m throws(CollectionsManifest.EditError) in
            try m.createScope("s")
            try m.createCollection("c", inScope: "s")  // id 8
            try m.createCollection("d", inScope: "s")  // id 9
        }
        let e = node.engine
        // Their events (ADR 0143) now, at seqnos 1...3 of each vBucket, not whenever the purger's thread runs.
        e.writeCollectionEvents()
        let vb = VBucketID(0)
        let binary: [UInt8] = [0xff, 0x41]
        let stored: [[UInt8]] = [
            key("plain"), CollectionKey.engineKey(collection: 8, logicalKey: key("a")),
            CollectionKey.engineKey(collection: 9, logicalKey: key("b")),
            CollectionKey.engineKey(collection: 0, logicalKey: binary),
        ]
        for k in stored {
            _ = try e.store(.set, vb, k, value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }

        // Not collection-aware: the default collection's two keys, as the client wrote them.
        let legacy = try producer(node, name: "legacy", collections: false)
        #expect(try streamRequest(legacy, vb: 0).status == .success)
        #expect(try snapshot(legacy, mutations: 2) == [key("plain"), binary])
        // The sentinel written next starts the next snapshot on the wire: no named collection's key came between.
        _ = try e.store(.set, vb, key("z"), value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(try snapshot(legacy, mutations: 1) == [key("z")])
        #expect(try streamRequest(legacy, vb: 1, value: #"{"collections":["8"]}"#).status == .invalidArguments)

        // Collection-aware, no filter: every collection, keys as LEB128(id) ‖ logical key.
        let aware = try producer(node, name: "aware", collections: true)
        #expect(try streamRequest(aware, vb: 0).status == .success)
        var keys: [[UInt8]] = []
        while keys.count < 5 {
            let f = try aware.receive()
            if f.opcode == .dcpMutation { keys.append(Array(f.key.readableBytesView)) }
        }
        #expect(keys == [[0] + key("plain"), [8] + key("a"), [9] + key("b"), [0] + binary, [0] + key("z")])

        // Filters.
        let one = try producer(node, name: "one", collections: true)
        #expect(try streamRequest(one, vb: 0, value: #"{"collections":["8"],"uid":"3"}"#).status == .success)
        let scoped = try producer(node, name: "scoped", collections: true)
        #expect(try streamRequest(scoped, vb: 0, value: #"{"scope":"8"}"#).status == .success)
        let refused = try producer(node, name: "refused", collections: true)
        let unknown = try streamRequest(refused, vb: 1, value: #"{"collections":["4d"]}"#)
        #expect(unknown.status == .unknownCollection)
        #expect(String(buffer: unknown.value) == #"{"manifest_uid":"3"}"#)
        #expect(try streamRequest(refused, vb: 1, value: #"{"scope":"4d"}"#).status == .unknownScope)
        #expect(
            try streamRequest(refused, vb: 1, value: #"{"scope":"8","collections":["8"]}"#).status == .invalidArguments)
        #expect(try streamRequest(refused, vb: 1, value: #"{"collections":"8"}"#).status == .invalidArguments)
        #expect(try streamRequest(refused, vb: 1, value: #"{"sid":1}"#).status == .invalidArguments)
        #expect(try streamRequest(refused, vb: 1, value: "not json").status == .invalidArguments)
        _ = try e.store(.set, vb, key("y"), value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        func keysUntilDefault(_ c: TestKVClient, _ last: [UInt8]) throws -> [[UInt8]] {
            var keys: [[UInt8]] = []
            // The filtered streams see no default key: read until their last expected key.
            while keys.last != last {
                let f = try c.receive()
                if f.opcode == .dcpMutation { keys.append(Array(f.key.readableBytesView)) }
            }
            return keys
        }
        // A collection-aware stream's snapshot keeps the batch's range (8, or 9 when `y` was written before the scan)
        // and ends with SEQNO_ADVANCED to its end after `a` (seqno 5, after c's begin event at 2): the records past
        // `a` are not the stream's, and the consumer commits the snapshot there (kv_engine's seqno-advanced.md).
        let marker = try one.receive()
        #expect(marker.opcode == .dcpSnapshotMarker)
        let markerEnd = marker.extras.getInteger(at: marker.extras.readerIndex + 8, as: UInt64.self) ?? 0
        #expect(markerEnd == 8 || markerEnd == 9, "marker end \(markerEnd)")
        var oneKeys: [[UInt8]] = []
        var advanced: UInt64?
        while advanced == nil {
            let f = try one.receive()
            if f.opcode == .dcpMutation { oneKeys.append(Array(f.key.readableBytesView)) }
            if f.opcode == .dcpSeqnoAdvanced {
                advanced = f.extras.getInteger(at: f.extras.readerIndex, as: UInt64.self)
            }
        }
        #expect(oneKeys == [[8] + key("a")] && advanced == markerEnd)
        #expect(try keysUntilDefault(scoped, [9] + key("b")) == [[8] + key("a"), [9] + key("b")])

        // A replica's connection: engine keys verbatim, every collection.
        let replica = try producer(node, name: DCPNames.replicaPrefix + "n9@127.0.0.1", collections: false)
        #expect(try streamRequest(replica, vb: 0).status == .success)
        let events = [
            CollectionSystemEvent.engineKey(scope: 8), CollectionSystemEvent.engineKey(collection: 8),
            CollectionSystemEvent.engineKey(collection: 9),
        ]
        #expect(try snapshot(replica, mutations: 9) == events + stored + [key("z"), key("y")])

        // Drop d: a new aware stream leaves its item out; a stream filtered to c alone ends when c is dropped.
        try node.registry.editCollections(bucket: bucketName) { m throws(CollectionsManifest.EditError) in
            try m.dropCollection("d", inScope: "s")
        }
        e.writeCollectionEvents()
        #expect(try streamRequest(refused, vb: 1, value: #"{"collections":["9"]}"#).status == .unknownCollection)
        let after = try producer(node, name: "after", collections: true)
        #expect(try streamRequest(after, vb: 0).status == .success)
        #expect(
            try snapshot(after, mutations: 5) == [
                [0] + key("plain"), [8] + key("a"), [0] + binary, [0] + key("z"), [0] + key("y"),
            ])
        try node.registry.editCollections(bucket: bucketName) { m throws(CollectionsManifest.EditError) in
            try m.dropCollection("c", inScope: "s")
        }
        e.writeCollectionEvents()
        _ = try e.store(.set, vb, key("x"), value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        // c's end event goes out, then the end; between them only markers and SEQNO_ADVANCED (`y`, d's end event
        // and `x` are not the stream's).
        var ended: Frame?
        var end: Frame?
        while end == nil {
            let f = try one.receive()
            switch f.opcode {
            case .dcpSystemEvent: ended = f
            case .dcpStreamEnd: end = f
            default: #expect(f.opcode == .dcpSnapshotMarker || f.opcode == .dcpSeqnoAdvanced, "\(f.opcode)")
            }
        }
        #expect(ended.flatMap { $0.extras.getInteger(at: $0.extras.readerIndex + 8, as: UInt32.self) } == 1)
        let streamEnd = try #require(end)
        #expect(
            streamEnd.extras.getInteger(at: streamEnd.extras.readerIndex, as: UInt32.self)
                == DCPStreamEndFlag.filterEmpty.rawValue)
        await cluster.shutdown()
    }

    /// Proves a snapshot whose last seqnos send a consumer nothing (here a durable write's prepare, which only
    /// replicas get) is whole when it arrives (ADR 0161): a consumer without HELLO Collections gets a marker ending at
    /// its last mutation, a collection-aware one the whole range and SEQNO_ADVANCED to its end, and both get the
    /// commit in the next snapshot. Before, both got the range to the prepare and no end, so a consumer that commits
    /// a snapshot at its end item held the documents until the vBucket's next write.
    @Test func aSnapshotWhoseLastSeqnosSendNothingIsWhole() async throws {
        let cluster = try await TestCluster(nodes: 1, replicas: 0, vbuckets: 4)
        let e = cluster.nodes[0].engine
        let vb = VBucketID(0)
        for i in 0..<3 {
            _ = try e.store(.set, vb, key("k\(i)"), value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        let prepare = try e.store(
            .set, vb, key("k3"), value: [2], flags: 0, expiry: 0, datatype: .raw, cas: .zero, syncWrite: true
        ).token.seqno
        #expect(prepare == SeqNo(4) && e.pendingSyncWrites(vb) == 1)
        func marker(_ f: Frame) -> (start: UInt64?, end: UInt64?) {
            #expect(f.opcode == .dcpSnapshotMarker)
            let at = f.extras.readerIndex
            return (f.extras.getInteger(at: at, as: UInt64.self), f.extras.getInteger(at: at + 8, as: UInt64.self))
        }

        let legacy = try producer(cluster.nodes[0], name: "tail-legacy", collections: false)
        #expect(try streamRequest(legacy, vb: 0).status == .success)
        #expect(marker(try legacy.receive()).end == 3)
        for i in 0..<3 { #expect(Array(try legacy.receive().key.readableBytesView) == key("k\(i)")) }

        let aware = try producer(cluster.nodes[0], name: "tail-aware", collections: true)
        #expect(try streamRequest(aware, vb: 0).status == .success)
        #expect(marker(try aware.receive()).end == 4)
        for i in 0..<3 { #expect(Array(try aware.receive().key.readableBytesView) == [0] + key("k\(i)")) }
        let advanced = try aware.receive()
        #expect(advanced.opcode == .dcpSeqnoAdvanced)
        #expect(advanced.extras.getInteger(at: advanced.extras.readerIndex, as: UInt64.self) == 4)

        // The commit comes in the next snapshot, past the prepare's seqno.
        #expect(e.commitSyncWrite(vb, key("k3"), seqno: prepare))
        for (c, k) in [(legacy, key("k3")), (aware, [0] + key("k3"))] {
            let m = marker(try c.receive())
            #expect(m.start == 5 && m.end == 5)
            let f = try c.receive()
            #expect(f.opcode == .dcpMutation && Array(f.key.readableBytesView) == k)
        }
        await cluster.shutdown()
    }

    /// Proves STATS `collections`, `scopes` and `collections-details` count each live collection's items (the
    /// default's escaped binary keys with it, deletions not), as cbstats shows them, and leave a dropped one out.
    @Test func collectionStatsCountItemsPerCollection() async throws {
        let cluster = try await TestCluster(nodes: 1, replicas: 0, vbuckets: 4)
        let node = cluster.nodes[0]
        try node.registry.editCollections(bucket: bucketName) { m throws(CollectionsManifest.EditError) in
            try m.createScope("s")
            try m.createCollection("c", inScope: "s")  // id 8
            try m.createCollection("d", inScope: "s")  // id 9
        }
        let e = node.engine
        func put(_ collection: UInt32, _ k: [UInt8]) throws {
            let vb = VBucketHash.vbucket(forKey: k, count: 4)
            _ = try e.store(
                .set, vb, CollectionKey.engineKey(collection: collection, logicalKey: k), value: [1], flags: 0,
                expiry: 0, datatype: .raw, cas: .zero)
        }
        for i in 0..<7 { try put(8, key("c\(i)")) }
        for i in 0..<3 { try put(0, key("d\(i)")) }
        try put(0, [0xff, 0x01])
        try put(9, key("gone"))
        let deleted = key("c0")
        _ = try e.delete(
            VBucketHash.vbucket(forKey: deleted, count: 4), CollectionKey.engineKey(collection: 8, logicalKey: deleted),
            cas: .zero)

        let c = try TestKVClient(port: node.info.kvPort, timeoutSeconds: 10)
        #expect(try c.authenticate(user: adminUser, password: adminPassword) == .success)
        #expect(try c.request(.selectBucket, key: bucketName).status == .success)
        let stats = try c.stats("collections")
        #expect(stats["manifest_uid"] == "3")
        #expect(stats["0x0:0x0:name"] == "_default" && stats["0x0:0x0:items"] == "4")
        #expect(stats["0x8:0x8:name"] == "c" && stats["0x8:0x8:scope_name"] == "s" && stats["0x8:0x8:items"] == "6")
        #expect(stats["0x8:0x9:items"] == "1" && stats["0x8:0x9:maxTTL"] == "0")
        let scopes = try c.stats("scopes")
        #expect(scopes["0x8:name"] == "s" && scopes["0x8:collections"] == "2" && scopes["0x8:items"] == "7")
        let details = try c.stats("collections-details")
        let perVB = (0..<4).compactMap { details["vb_\($0):0x8:0x8:items"].flatMap { Int($0) } }
        #expect(perVB.count == 4 && perVB.reduce(0, +) == 6)

        try node.registry.editCollections(bucket: bucketName) { m throws(CollectionsManifest.EditError) in
            try m.dropCollection("d", inScope: "s")
        }
        let after = try c.stats("collections")
        #expect(after["0x8:0x9:items"] == nil && after["0x8:0x8:items"] == "6")
        // The registry's edit reached the engine: the dropped collection's item is purged in the background.
        let gone = key("gone")
        #expect(
            await eventually {
                e.collectionItemsToPurge == 0
                    && (try? e.get(
                        VBucketHash.vbucket(forKey: gone, count: 4),
                        CollectionKey.engineKey(collection: 9, logicalKey: gone))) == nil
            })
        #expect(try c.stats("")["ep_collections_items_to_purge"] == "0")
        await cluster.shutdown()
    }

    /// The next `count` SYSTEM_EVENT frames of `c` (other frames skipped): seqno, event id, version, key, value.
    private func systemEvents(_ c: TestKVClient, _ count: Int) throws -> [(UInt64, UInt32, UInt8, [UInt8], [UInt8])] {
        var out: [(UInt64, UInt32, UInt8, [UInt8], [UInt8])] = []
        while out.count < count {
            let f = try c.receive()
            guard f.opcode == .dcpSystemEvent else { continue }
            let x = f.extras.readerIndex
            out.append(
                (
                    f.extras.getInteger(at: x, as: UInt64.self) ?? 0,
                    f.extras.getInteger(at: x + 8, as: UInt32.self) ?? 0,
                    f.extras.getInteger(at: x + 12, as: UInt8.self) ?? 0, Array(f.key.readableBytesView),
                    Array(f.value.readableBytesView)
                ))
        }
        return out
    }

    /// Proves collection and scope changes reach collection-aware consumers as DCP_SYSTEM_EVENT (ADR 0143) at their
    /// own seqnos, with kv_engine's event ids, keys and values; a collection filter gets its collections' events only;
    /// a consumer without HELLO Collections gets none (its snapshot starts after them); a replica connection gets the
    /// event items as mutations with their engine keys; a drop arrives as an end event with no key.
    @Test func collectionChangesReachAwareConsumersAsSystemEvents() async throws {
        let cluster = try await TestCluster(nodes: 1, replicas: 0, vbuckets: 4)
        let node = cluster.nodes[0]
        try node.registry.editCollections(bucket: bucketName) { m throws(CollectionsManifest.EditError) in
            try m.createScope("s")  // scope 8, uid 1
            try m.createCollection("c", inScope: "s", maxTTL: 60)  // id 8, uid 2
            try m.createCollection("d", inScope: "s")  // id 9, uid 3
        }
        // The purger's thread writes them too; either way each vBucket holds them once.
        node.engine.writeCollectionEvents()
        let vb = VBucketID(0)
        _ = try node.engine.store(.set, vb, key("x"), value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)

        let aware = try producer(node, name: "aware-events", collections: true)
        #expect(try streamRequest(aware, vb: 0).status == .success)
        let created = try systemEvents(aware, 3)
        #expect(created.map(\.0) == [1, 2, 3] && created.map(\.1) == [3, 0, 0] && created.map(\.2) == [0, 1, 0])
        #expect(created.map(\.3) == [key("s"), key("c"), key("d")])
        #expect(created[0].4 == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8])
        #expect(created[1].4 == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 8, 0, 0, 0, 60])
        #expect(created[2].4 == [0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 8, 0, 0, 0, 9])
        let x = try aware.receive()
        #expect(x.opcode == .dcpMutation && Array(x.key.readableBytesView) == [0] + key("x"))

        let filtered = try producer(node, name: "filtered-events", collections: true)
        #expect(try streamRequest(filtered, vb: 0, value: #"{"collections":["8"]}"#).status == .success)
        #expect(try systemEvents(filtered, 1).map(\.0) == [2])

        let legacy = try producer(node, name: "legacy-events", collections: false)
        #expect(try streamRequest(legacy, vb: 0).status == .success)
        let marker = try legacy.receive()
        #expect(marker.opcode == .dcpSnapshotMarker)
        let first = try legacy.receive()
        #expect(first.opcode == .dcpMutation && Array(first.key.readableBytesView) == key("x"))

        let replica = try producer(node, name: DCPNames.replicaPrefix + "n9@127.0.0.1", collections: false)
        #expect(try streamRequest(replica, vb: 0).status == .success)
        #expect(
            try snapshot(replica, mutations: 4) == [
                CollectionSystemEvent.engineKey(scope: 8), CollectionSystemEvent.engineKey(collection: 8),
                CollectionSystemEvent.engineKey(collection: 9), key("x"),
            ])

        try node.registry.editCollections(bucket: bucketName) { m throws(CollectionsManifest.EditError) in
            try m.dropCollection("d", inScope: "s")  // uid 4
        }
        node.engine.writeCollectionEvents()
        let end = try systemEvents(aware, 1)
        #expect(end.map(\.0) == [5] && end.map(\.1) == [1] && end[0].3.isEmpty)
        #expect(end[0].4 == [0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 8, 0, 0, 0, 9])
        await cluster.shutdown()
    }

    /// Proves the collections STATS count runs off the event loop within its node-wide bound (ADR 0143): while a
    /// pass holds the one place, another STATS `collections` is refused ETMPFAIL and the connection still answers
    /// what follows in order; once it is free the count is answered.
    @Test func collectionStatsPassesAreBoundedPerNode() async throws {
        let cluster = try await TestCluster(nodes: 1, replicas: 0, vbuckets: 4)
        let node = cluster.nodes[0]
        let c = try TestKVClient(port: node.info.kvPort, timeoutSeconds: 10)
        #expect(try c.authenticate(user: adminUser, password: adminPassword) == .success)
        #expect(try c.request(.selectBucket, key: bucketName).status == .success)
        node.kv.collectionStatsPasses.store(Limits.collectionStatsPassesPerNode, ordering: .relaxed)
        #expect(try c.request(.stat, key: "collections").status == .temporaryFailure)
        #expect(try c.request(.noop).status == .success)
        node.kv.collectionStatsPasses.store(0, ordering: .relaxed)
        #expect(try c.stats("collections")["0x0:0x0:name"] == "_default")
        #expect(node.kv.collectionStatsPasses.load(ordering: .relaxed) == 0)
        await cluster.shutdown()
    }

    /// Proves a DCP connection's stream filters hold at most `Limits.dcpFilterIDsPerConnection` ids (ADR 0143):
    /// streams with equal filters share one copy and count once, a new filter that would pass the bound is refused
    /// (nothing added), and closing streams gives their ids back.
    @Test func filterIDsAreBoundedPerConnection() async throws {
        let cluster = try await TestCluster(nodes: 1, replicas: 0, vbuckets: 4)
        let state = DCPProducerState(
            name: "bounded", engine: cluster.nodes[0].engine, bucket: bucketName, trusted: false,
            collectionAware: true)
        func stream(_ ids: Range<UInt32>) -> DCPProducerState.Stream {
            DCPProducerState.Stream(
                opaque: 0, sentThrough: .zero, end: SeqNo(UInt64.max), uuid: VBucketUUID(1),
                filter: DCPCollectionFilter(selection: .collections(Set(ids))))
        }
        let big = Limits.dcpFilterIDsPerConnection / 2
        // The same filter on many vBuckets counts once.
        for vb in 0..<UInt16(100) { #expect(state.addStream(stream(0..<UInt32(big)), vb: vb)) }
        #expect(state.filterIDs == big && state.filters.count == 1)
        #expect(state.addStream(stream(UInt32(big)..<UInt32(2 * big)), vb: 100))
        #expect(state.filterIDs == 2 * big)
        // One more distinct id passes the bound: refused, nothing held; `.all` needs none.
        #expect(!state.addStream(stream(5_000_000..<5_000_001), vb: 101))
        #expect(state.streams[101] == nil && state.filterIDs == 2 * big)
        #expect(
            state.addStream(
                DCPProducerState.Stream(opaque: 0, sentThrough: .zero, end: .zero, uuid: VBucketUUID(1)), vb: 102))
        // Closing the second filter's only stream frees its ids; the shared one stays until its last stream goes.
        #expect(state.removeStream(100) != nil)
        #expect(state.filterIDs == big)
        #expect(state.addStream(stream(5_000_000..<5_000_001), vb: 101))
        for vb in 0..<UInt16(99) { _ = state.removeStream(vb) }
        #expect(state.filterIDs == big + 1)
        _ = state.removeStream(99)
        #expect(state.filterIDs == 1 && state.filters.count == 1)
        state.removeAllStreams()
        #expect(state.filterIDs == 0 && state.filters.isEmpty && state.streams.isEmpty)
        await cluster.shutdown()
    }
}
