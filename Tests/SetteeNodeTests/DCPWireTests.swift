import Foundation
import NIOCore
import SetteeAuth
import SetteeClusterMap
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import SetteeStorage
import SetteeStreams
import SetteeTestSupport
import Testing

@testable import SetteeNode

@Suite(.serialized) struct DCPWireTests {
    private func streamRequest(
        _ c: TestKVClient, vb: UInt16, start: UInt64, uuid: UInt64, snapStart: UInt64, snapEnd: UInt64
    ) throws -> Frame {
        var x = ByteBuffer()
        DCPExtras.StreamRequest(
            start: start, end: UInt64.max, uuid: uuid, snapStart: snapStart, snapEnd: snapEnd
        ).write(to: &x)
        return try c.request(.dcpStreamRequest, extras: Array(x.readableBytesView), vbucket: vb)
    }

    /// A connection logged in as the administrator on `bucketName`, opened as a producer named `name`.
    private func producerConnection(_ node: TestDataNode, name: String) throws -> TestKVClient {
        let c = try TestKVClient(port: node.info.kvPort, timeoutSeconds: 10)
        #expect(try c.authenticate(user: adminUser, password: adminPassword) == .success)
        #expect(try c.request(.selectBucket, key: bucketName).status == .success)
        #expect(try openProducer(c, name: name) == .success)
        return c
    }

    /// Whether `answer` is a ROLLBACK to seqno 0.
    private func rollsBackToZero(_ answer: Frame) -> Bool {
        answer.status == .rollback && answer.value.getInteger(at: answer.value.readerIndex, as: UInt64.self) == 0
    }

    /// DCP_OPEN as a producer named `name`; the answer's status.
    private func openProducer(_ c: TestKVClient, name: String) throws -> Status {
        var open = ByteBuffer()
        open.writeInteger(UInt32(0))
        open.writeInteger(DCPOpenFlags.producer)
        return try c.request(.dcpOpen, key: name, extras: Array(open.readableBytesView), vbucket: 0).status
    }

    /// The producer side on the wire: DCP needs the administrator; GET_FAILOVER_LOG returns the
    /// vBucket's log; stream requests are answered with ROLLBACK (0x23, seqno 0) for an unknown history,
    /// ERANGE for a malformed range, and accepted from zero with a snapshot marker and the documents,
    /// followed by new mutations as they happen; SET_VBUCKET / GET_VBUCKET change and read the state.
    @Test func producerOnTheWire() async throws {
        let cluster = try await TestCluster(nodes: 1, replicas: 0, vbuckets: 4)
        let node = cluster.nodes[0]
        let e = node.engine
        for i in 0..<3 {
            _ = try e.store(
                .set, VBucketID(0), key("k\(i)"), value: [UInt8(i)], flags: 7, expiry: 0, datatype: .raw, cas: .zero)
        }

        let anonymous = try TestKVClient(port: node.info.kvPort, timeoutSeconds: 10)
        #expect(try openProducer(anonymous, name: "x") == .accessDenied)

        let c = try TestKVClient(port: node.info.kvPort, timeoutSeconds: 10)
        #expect(try c.authenticate(user: adminUser, password: adminPassword) == .success)
        #expect(try c.request(.selectBucket, key: bucketName).status == .success)
        #expect(try openProducer(c, name: "wire-test") == .success)

        let log = try c.request(.dcpGetFailoverLog, vbucket: 0)
        #expect(log.status == .success && log.value.readableBytes == 16)
        #expect(
            log.value.getInteger(at: log.value.readerIndex, as: UInt64.self) == e.seqnoInfo(VBucketID(0)).uuid.rawValue)

        let rollback = try streamRequest(c, vb: 0, start: 2, uuid: 12345, snapStart: 2, snapEnd: 2)
        #expect(rollback.status == .rollback)
        #expect(rollback.value.getInteger(at: rollback.value.readerIndex, as: UInt64.self) == 0)
        #expect(try streamRequest(c, vb: 0, start: 2, uuid: 1, snapStart: 3, snapEnd: 4).status == .rangeError)

        let accepted = try streamRequest(c, vb: 0, start: 0, uuid: 0, snapStart: 0, snapEnd: 0)
        #expect(accepted.status == .success && accepted.value.readableBytes == 16)
        let marker = try c.receive()
        #expect(marker.opcode == .dcpSnapshotMarker)
        #expect(marker.extras.getInteger(at: marker.extras.readerIndex + 8, as: UInt64.self) == 3)
        var keys: [String] = []
        for _ in 0..<3 {
            let m = try c.receive()
            #expect(m.opcode == .dcpMutation && m.vbucket == 0 && m.flagsAfterSeqnos == 7)
            keys.append(String(buffer: m.key))
        }
        #expect(keys == ["k0", "k1", "k2"])
        _ = try e.delete(VBucketID(0), key("k1"), cas: .zero)
        #expect(try c.receive().opcode == .dcpSnapshotMarker)
        let deletion = try c.receive()
        #expect(deletion.opcode == .dcpDeletion && String(buffer: deletion.key) == "k1")
        #expect(try c.request(.dcpCloseStream, vbucket: 0).status == .success)

        // The vBucket state commands, and what a client sees of a replica vBucket.
        #expect(try c.request(.setVBucket, extras: [0, 0, 0, 2], vbucket: 3).status == .success)
        let state = try c.request(.getVBucket, vbucket: 3)
        #expect(state.value.getInteger(at: state.value.readerIndex, as: UInt32.self) == 2)
        #expect(try c.request(.get, key: "nope", vbucket: 3).status == .notMyVBucket)
        #expect(e.vbucketState(VBucketID(3)) == .replica)
        await cluster.shutdown()
    }

    /// Purged tombstones on the wire (ADR 0095): a stream request from above 0 and below the purge seqno is answered
    /// ROLLBACK 0 (a consumer at 0 or at the purge seqno is accepted), an open stream whose position falls below a
    /// purge while flow control holds it is ended with STREAM_END flag 6 (rollback), and the vbucket-seqno stats
    /// report the purge seqno. Each deletion is followed by a write: the tombstone at the high seqno is kept (ADR
    /// 0161).
    @Test func purgedTombstonesRollConsumersBackToZero() async throws {
        let cluster = try await TestCluster(nodes: 1, replicas: 0, vbuckets: 4)
        let node = cluster.nodes[0]
        let e = node.engine
        let vb = VBucketID(0)
        func persisted() -> Bool {
            let info = e.seqnoInfo(vb)
            return info.persistedSeqno == info.highSeqno
        }
        for i in 0..<3 {
            _ = try e.store(.set, vb, key("k\(i)"), value: [UInt8(i)], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        let deleted = try e.delete(vb, key("k1"), cas: .zero).token.seqno  // seqno 4
        _ = try e.store(.set, vb, key("k3"), value: [3], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(await eventually { persisted() })
        e.setPurgeInterval(days: 0)
        #expect(e.runTombstonePurger() == 1)
        #expect(e.purgeSeqno(vb) == deleted)
        let uuid = e.seqnoInfo(vb).uuid.rawValue

        let c = try producerConnection(node, name: "purge-test")
        #expect(try c.stats("vbucket-seqno 0")["vb_0:purge_seqno"] == String(deleted.rawValue))
        #expect(rollsBackToZero(try streamRequest(c, vb: 0, start: 3, uuid: uuid, snapStart: 3, snapEnd: 3)))

        // From 0 with the vBucket's uuid: accepted; the purged tombstone is not sent. Flow control (a one-byte
        // buffer) then holds the stream after its first batch.
        #expect(
            try c.request(
                .dcpControl, key: DCPControlKey.connectionBufferSize, value: Array("1".utf8), vbucket: 0
            ).status == .success)
        #expect(try streamRequest(c, vb: 0, start: 0, uuid: uuid, snapStart: 0, snapEnd: 0).status == .success)
        #expect(try c.receive().opcode == .dcpSnapshotMarker)
        var keys: [String] = []
        for _ in 0..<3 {
            let m = try c.receive()
            #expect(m.opcode == .dcpMutation)
            keys.append(String(buffer: m.key))
        }
        #expect(keys == ["k0", "k2", "k3"])
        // Deleted and purged while the stream is held below them.
        _ = try e.delete(vb, key("k0"), cas: .zero)
        _ = try e.delete(vb, key("k2"), cas: .zero)
        _ = try e.store(.set, vb, key("k4"), value: [4], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(await eventually { persisted() })
        #expect(e.runTombstonePurger() == 2)
        // 1,000 bytes acknowledged: more than the batch sent, so the stream may step again.
        var ack = ByteBuffer()
        ack.writeRequest(opcode: .dcpBufferAcknowledgement, vbucket: 0, extras: [0, 0, 0x03, 0xE8])
        try c.send(ack)
        let end = try c.receive()
        #expect(end.opcode == .dcpStreamEnd)
        let flag = end.extras.getInteger(at: end.extras.readerIndex, as: UInt32.self)
        #expect(flag == DCPStreamEndFlag.rollback.rawValue)
        #expect(rollsBackToZero(try streamRequest(c, vb: 0, start: 4, uuid: uuid, snapStart: 4, snapEnd: 4)))
        await cluster.shutdown()
    }

    /// A stream from 0 over more than one batch (`Limits.dcpBatchItems`) of a vBucket whose tombstones were purged
    /// before it began is not ended for the old purge (ADR 0095: only purges after a stream began end it): every
    /// live document arrives once and the stream stays open. The tombstone at the high seqno is not purged (ADR 0161)
    /// and arrives as the last snapshot's end.
    @Test func aStreamFromZeroOverAnOldPurgeCompletes() async throws {
        let cluster = try await TestCluster(nodes: 1, replicas: 0, vbuckets: 4)
        let e = cluster.nodes[0].engine
        let vb = VBucketID(0)
        let count = Limits.dcpBatchItems * 2 + 100
        for i in 0..<count {
            _ = try e.store(.set, vb, key("d\(i)"), value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        // The last documents are deleted: the purge seqno lies above the first batches' ends.
        for i in (count - 50)..<count { _ = try e.delete(vb, key("d\(i)"), cas: .zero) }
        #expect(await eventually { e.seqnoInfo(vb).persistedSeqno == e.seqnoInfo(vb).highSeqno })
        e.setPurgeInterval(days: 0)
        #expect(e.runTombstonePurger() == 49)
        let high = e.seqnoInfo(vb).highSeqno.rawValue

        let c = try producerConnection(cluster.nodes[0], name: "old-purge")
        #expect(try streamRequest(c, vb: 0, start: 0, uuid: 0, snapStart: 0, snapEnd: 0).status == .success)
        var live = Set<String>()
        var markers = 0
        var lastEnd: UInt64 = 0
        var lastDeletion: UInt64 = 0
        // Until every live document and the kept tombstone arrived (a stuck stream fails the receive's 10 s timeout).
        while live.count < count - 50 || lastDeletion != high {
            let m = try c.receive()
            #expect(m.opcode != .dcpStreamEnd)
            if m.opcode == .dcpStreamEnd { break }
            if m.opcode == .dcpSnapshotMarker {
                markers += 1
                lastEnd = m.extras.getInteger(at: m.extras.readerIndex + 8, as: UInt64.self) ?? 0
            } else if m.opcode == .dcpMutation {
                live.insert(String(buffer: m.key))
            } else if m.opcode == .dcpDeletion {
                lastDeletion = m.extras.getInteger(at: m.extras.readerIndex, as: UInt64.self) ?? 0
            }
        }
        #expect(live.count == count - 50)
        #expect(markers >= 3 && lastEnd == high)
        await cluster.shutdown()
    }

    /// A replica filled from 0 after its active purged tombstones takes the active's purge seqno from the snapshot
    /// markers it asked for (ADR 0095), so once it is promoted a consumer from below that seqno is rolled back to 0
    /// instead of missing the deletions this copy was never sent.
    @Test func aReplicaFilledAfterAPurgeKeepsThePurgeSeqnoThroughFailover() async throws {
        let cluster = try await TestCluster(nodes: 2, replicas: 1, vbuckets: 4)
        cluster.apply(VBucketMap(numReplicas: 1, chains: Array(repeating: [0, -1], count: 4), nodeCount: 2))
        let a = cluster.nodes[0].engine
        let vb = VBucketID(0)
        for i in 0..<20 {
            _ = try a.store(.set, vb, key("r\(i)"), value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        for i in 0..<10 { _ = try a.delete(vb, key("r\(i)"), cas: .zero) }
        for i in 20..<25 {
            _ = try a.store(.set, vb, key("r\(i)"), value: [2], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        #expect(await eventually { a.seqnoInfo(vb).persistedSeqno == a.seqnoInfo(vb).highSeqno })
        a.setPurgeInterval(days: 0)
        #expect(a.runTombstonePurger() == 10)
        let purge = a.purgeSeqno(vb)
        #expect(purge == SeqNo(30))

        // A new replica streams the vBucket from 0: its purge seqno becomes the active's.
        cluster.apply(VBucketMap(numReplicas: 1, chains: Array(repeating: [0, 1], count: 4), nodeCount: 2))
        let b = cluster.nodes[1].engine
        #expect(await eventually { b.seqnoInfo(vb).highSeqno == a.seqnoInfo(vb).highSeqno })
        #expect(b.purgeSeqno(vb) == purge)

        // Failover: the copy is active, and a consumer that followed the old active up to seqno 5 is rolled back.
        cluster.apply(VBucketMap(numReplicas: 1, chains: Array(repeating: [1, -1], count: 4), nodeCount: 2), only: [1])
        #expect(await eventually { b.vbucketState(vb) == .active })
        let uuid = try #require(b.failoverHistory(vb).entries.last).uuid.rawValue
        let c = try producerConnection(cluster.nodes[1], name: "after-failover")
        #expect(rollsBackToZero(try streamRequest(c, vb: 0, start: 5, uuid: uuid, snapStart: 5, snapEnd: 5)))
        await cluster.shutdown()
    }

    /// A stream that moves between the two ways a producer reads the feed (ADR 0079): from zero past a wrapped
    /// ring of recent seqnos (a scan on the stream pool), then one write at a time close behind (a read on the event
    /// loop), then a burst that mixes both. Every snapshot starts right after the previous one's end, each item is
    /// inside its snapshot, in seqno order, and every key arrives once at the seqno it was written at.
    @Test func streamFollowsAcrossPoolScansAndLoopReads() async throws {
        let cluster = try await TestCluster(nodes: 1, replicas: 0, vbuckets: 4)
        let node = cluster.nodes[0]
        let e = node.engine
        let vb = VBucketID(0)
        var written: [String: UInt64] = [:]
        func write(_ k: String) throws {
            let r = try e.store(.set, vb, key(k), value: Array(k.utf8), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
            written[k] = r.token.seqno.rawValue
        }
        for i in 0..<(Limits.recentChangesPerVBucket * 2) { try write("before-\(i)") }

        let c = try TestKVClient(port: node.info.kvPort, timeoutSeconds: 10)
        #expect(try c.authenticate(user: adminUser, password: adminPassword) == .success)
        #expect(try c.request(.selectBucket, key: bucketName).status == .success)
        #expect(try openProducer(c, name: "paths-test") == .success)
        #expect(try streamRequest(c, vb: 0, start: 0, uuid: 0, snapStart: 0, snapEnd: 0).status == .success)

        var snapshotEnd: UInt64 = 0
        var lastSeqno: UInt64 = 0
        var received: [String: UInt64] = [:]
        /// Reads frames until everything written so far has arrived.
        func follow() throws {
            let high = e.seqnoInfo(vb).highSeqno.rawValue
            while lastSeqno < high {
                let f = try c.receive()
                let first = f.extras.getInteger(at: f.extras.readerIndex, as: UInt64.self) ?? 0
                switch f.opcode {
                case .dcpSnapshotMarker:
                    #expect(first == snapshotEnd + 1, "snapshot starts at \(first) after \(snapshotEnd)")
                    snapshotEnd = f.extras.getInteger(at: f.extras.readerIndex + 8, as: UInt64.self) ?? 0
                case .dcpMutation:
                    #expect(first > lastSeqno && first <= snapshotEnd, "seqno \(first) after \(lastSeqno)")
                    lastSeqno = first
                    let k = String(buffer: f.key)
                    #expect(received[k] == nil, "\(k) twice")
                    received[k] = first
                default:
                    Issue.record("unexpected \(f.opcode)")
                    return
                }
            }
        }
        try follow()
        for i in 0..<5 {
            try write("one-\(i)")
            try follow()
        }
        for i in 0..<(Limits.recentChangesPerVBucket * 3) { try write("burst-\(i)") }
        try follow()
        #expect(received == written)
        #expect(try c.request(.dcpCloseStream, vbucket: 0).status == .success)
        await cluster.shutdown()
    }

    /// Who may open a DCP producer: a user holding only `data_reader`/`data_writer` on the bucket is refused
    /// (EACCESS); a user with `bucket_full_access[b]` (Couchbase's DcpProducer privilege, what a sync
    /// gateway is given) and a user with the `admin` role may open one and stream documents; a user's
    /// stream named like a replica's never gets to set vBucket states.
    @Test func producerAuthorisationByRole() async throws {
        let cluster = try await TestCluster(nodes: 1, replicas: 0, vbuckets: 4)
        let node = cluster.nodes[0]
        _ = try node.engine.store(
            .set, VBucketID(1), key("doc"), value: Array("{}".utf8), flags: 0, expiry: 0, datatype: .json, cas: .zero)
        try node.registry.upsertUser(
            name: "reader", fullName: "", password: "secret1",
            roles: [Role(name: .dataReader, bucket: bucketName), Role(name: .dataWriter, bucket: bucketName)])
        try node.registry.upsertUser(
            name: "gateway", fullName: "", password: "secret2", roles: [Role(name: .bucketFullAccess, bucket: "*")])
        try node.registry.upsertUser(name: "boss", fullName: "", password: "secret3", roles: [Role(name: .admin)])
        func session(_ user: String, _ password: String) throws -> TestKVClient {
            let c = try TestKVClient(port: node.info.kvPort, timeoutSeconds: 10)
            #expect(try c.authenticate(user: user, password: password) == .success)
            #expect(try c.request(.selectBucket, key: bucketName).status == .success)
            return c
        }

        let reader = try session("reader", "secret1")
        #expect(try openProducer(reader, name: "r") == .accessDenied)
        #expect(try reader.request(.dcpGetFailoverLog, vbucket: 0).status == .accessDenied)

        for (user, password) in [("gateway", "secret2"), ("boss", "secret3")] {
            let c = try session(user, password)
            #expect(try openProducer(c, name: DCPNames.replicaPrefix + "fake") == .success)
            let accepted = try streamRequest(c, vb: 1, start: 0, uuid: 0, snapStart: 0, snapEnd: 0)
            #expect(accepted.status == .success)
            #expect(try c.receive().opcode == .dcpSnapshotMarker)
            let m = try c.receive()
            #expect(m.opcode == .dcpMutation && String(buffer: m.key) == "doc")
            #expect(try c.request(.setVBucket, extras: [0, 0, 0, 2], vbucket: 2).status == .accessDenied)
        }
        #expect(node.engine.vbucketState(VBucketID(2)) == .active)
        await cluster.shutdown()
    }
}

extension Frame {
    /// A DCP mutation's flags (extras bytes 16-19, after by-seqno and rev-seqno).
    var flagsAfterSeqnos: UInt32? { extras.getInteger(at: extras.readerIndex + 16, as: UInt32.self) }
}
