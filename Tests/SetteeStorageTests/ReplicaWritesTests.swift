import Foundation
import SetteeCore
import SetteeStreams
import SetteeTestSupport
import Testing

@testable import SetteeStorage

@Suite(.onTestThreads) struct ReplicaWritesTests {
    let dir = TemporaryDirectory("storage")
    let vb0 = VBucketID(0)

    private func record(_ k: String, _ v: String, seqno: UInt64, cas: UInt64, rev: UInt64 = 1, deleted: Bool = false)
        -> ChangeRecord
    {
        ChangeRecord(
            key: key(k), value: deleted ? [] : bytes(v),
            meta: ItemMetadata(
                cas: CAS(cas), revSeqno: RevSeqNo(rev), bySeqno: SeqNo(seqno), flags: 9, expiry: 0,
                datatype: deleted ? .raw : .json, deleted: deleted))
    }

    /// A replica snapshot installs items with the producer's seqno, CAS, revSeqno and flags (nothing new
    /// assigned), moves the high seqno to the snapshot end, adopts the producer's failover log, and all of
    /// it survives a restart; clients get NOT_MY_VBUCKET on the replica while GET_REPLICA reads it.
    @Test func snapshotKeepsProducerMetadataAndPersists() throws {
        let log = FailoverLog(entries: [
            FailoverEntry(uuid: VBucketUUID(77), seqno: SeqNo(3)), FailoverEntry(uuid: VBucketUUID(55), seqno: .zero),
        ])
        do {
            let e = try openEngine(dir, vbuckets: 2)
            e.setVBucketState(vb0, .replica)
            try e.applySnapshot(
                vb0, end: SeqNo(12),
                items: [
                    record("a", "{}", seqno: 4, cas: 1000, rev: 3), record("b", "", seqno: 9, cas: 1001, deleted: true),
                    record("c", "[1]", seqno: 11, cas: 999),
                ], failoverLog: log)
            let info = e.seqnoInfo(vb0)
            #expect(info.highSeqno == SeqNo(12) && info.uuid == VBucketUUID(77))
            let feed = try e.changes(vb0, since: .zero, limit: 10)
            #expect(feed.records.map(\.meta.bySeqno.rawValue) == [4, 9, 11])
            #expect(feed.records[0].meta.cas == CAS(1000) && feed.records[0].meta.revSeqno == RevSeqNo(3))
            #expect(feed.records[1].meta.deleted)
            #expect(throws: EngineError.notMyVBucket) { try e.get(vb0, key("a")) }
            #expect(throws: EngineError.notMyVBucket) {
                try e.store(.set, vb0, key("z"), value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
            }
            #expect(try e.getReplica(vb0, key("c")).value == bytes("[1]"))
            #expect(throws: EngineError.keyNotFound) { try e.getReplica(vb0, key("b")) }
            #expect(isOK(waitPersisted(e, vb0, SeqNo(12))))
            e.shutdown()
        }
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        #expect(e.vbucketState(vb0) == .replica)
        #expect(e.seqnoInfo(vb0).highSeqno == SeqNo(12))
        #expect(e.failoverHistory(vb0) == log)
        #expect(
            e.resumePoint(vb0)
                == ResumePoint(start: SeqNo(12), snapStart: SeqNo(12), snapEnd: SeqNo(12), uuid: VBucketUUID(77)))
        #expect(try e.changes(vb0, since: .zero, limit: 10).records.map(\.meta.cas.rawValue) == [1000, 1001, 999])
    }

    /// Snapshots are refused on an active vBucket, and when their seqnos are not increasing above the
    /// high seqno or exceed the snapshot end; nothing of a refused snapshot is applied.
    @Test func refusesBadSnapshots() throws {
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        #expect(throws: EngineError.notMyVBucket) {
            try e.applySnapshot(vb0, end: SeqNo(1), items: [record("a", "1", seqno: 1, cas: 1)])
        }
        e.setVBucketState(vb0, .replica)
        try e.applySnapshot(vb0, end: SeqNo(5), items: [record("a", "1", seqno: 5, cas: 1)])
        #expect(throws: EngineError.invalidArguments) {
            try e.applySnapshot(vb0, end: SeqNo(9), items: [record("b", "1", seqno: 5, cas: 2)])
        }
        #expect(throws: EngineError.invalidArguments) {
            try e.applySnapshot(vb0, end: SeqNo(6), items: [record("b", "1", seqno: 7, cas: 2)])
        }
        #expect(throws: EngineError.invalidArguments) {
            try e.applySnapshot(
                vb0, end: SeqNo(9), items: [record("b", "1", seqno: 8, cas: 2), record("c", "1", seqno: 7, cas: 2)])
        }
        #expect(e.seqnoInfo(vb0).highSeqno == SeqNo(5))
        #expect(try e.changes(vb0, since: .zero, limit: 10).records.count == 1)
    }

    /// An item keeps its seqnos in 48 bits (ADR 0048): a producer's by-seqno (snapshot end) above
    /// `Limits.maxSeqno` or revSeqno above `Limits.maxRevSeqno` is refused, nothing of it applied; the caps
    /// themselves are kept exactly. Once promoted, a vBucket at the seqno cap refuses client writes (no wrap), and a
    /// document at the revSeqno cap keeps it on its next write. Failed before the 48-bit fields: both snapshots
    /// were applied.
    @Test func refusesSeqnosPast48Bits() throws {
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        e.setVBucketState(vb0, .replica)
        let cap = Limits.maxSeqno
        #expect(throws: EngineError.invalidArguments) {
            try e.applySnapshot(vb0, end: SeqNo(cap + 1), items: [record("a", "1", seqno: cap + 1, cas: 1)])
        }
        #expect(throws: EngineError.invalidArguments) {
            try e.applySnapshot(vb0, end: SeqNo(3), items: [record("a", "1", seqno: 2, cas: 1, rev: cap + 1)])
        }
        #expect(throws: EngineError.invalidArguments) {
            try e.applySnapshot(vb0, end: SeqNo(UInt64.max), items: [record("a", "1", seqno: 2, cas: 1)])
        }
        #expect(e.seqnoInfo(vb0).highSeqno == .zero)
        try e.applySnapshot(
            vb0, end: SeqNo(cap - 1),
            items: [record("a", "1", seqno: cap - 2, cas: 5, rev: Limits.maxRevSeqno)])
        let meta = try e.getReplica(vb0, key("a")).meta
        #expect(meta.bySeqno == SeqNo(cap - 2) && meta.revSeqno == RevSeqNo(Limits.maxRevSeqno))
        e.setVBucketState(vb0, .active)
        // One write fits below the cap; it bumps a revSeqno that is already at its cap: it stays there.
        let r = try e.store(.set, vb0, key("a"), value: [2], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(r.token.seqno == SeqNo(cap))
        let after = try e.getMeta(vb0, key("a"))
        #expect(after.bySeqno == SeqNo(cap) && after.revSeqno == RevSeqNo(Limits.maxRevSeqno))
        #expect(throws: BucketEngine.seqnoSpaceExhausted) {
            try e.store(.set, vb0, key("b"), value: [3], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        #expect(e.seqnoInfo(vb0).highSeqno == SeqNo(cap))
        #expect(try e.get(vb0, key("a")).value == [2])
    }

    /// Rollback drops a replica vBucket's contents (to 0) in memory and durably; an active vBucket cannot
    /// be rolled back; a target at or above the high seqno changes nothing.
    @Test func rollbackToZero() throws {
        do {
            let e = try openEngine(dir, vbuckets: 2)
            e.setVBucketState(vb0, .replica)
            try e.applySnapshot(
                vb0, end: SeqNo(3), items: [record("a", "1", seqno: 2, cas: 5), record("b", "1", seqno: 3, cas: 6)])
            #expect(try e.rollback(vb0, to: SeqNo(3)) == SeqNo(3))
            #expect(try e.rollback(vb0, to: SeqNo(2)) == .zero)
            #expect(e.seqnoInfo(vb0).highSeqno == .zero)
            #expect(try e.changes(vb0, since: .zero, limit: 10).records.isEmpty)
            #expect(e.resumePoint(vb0) == .empty)
            #expect(throws: EngineError.notMyVBucket) { try e.rollback(VBucketID(1), to: .zero) }
            try e.applySnapshot(vb0, end: SeqNo(1), items: [record("c", "1", seqno: 1, cas: 7)])
            #expect(isOK(waitPersisted(e, vb0, SeqNo(1))))
            e.shutdown()
        }
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        #expect(try e.changes(vb0, since: .zero, limit: 10).records.map(\.key) == [key("c")])
        #expect(e.seqnoInfo(vb0).highSeqno == SeqNo(1))
    }

    /// Pending and dead vBuckets refuse client reads and writes with NOT_MY_VBUCKET.
    @Test func pendingAndDeadRefuseClients() throws {
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        _ = try e.store(.set, vb0, key("a"), value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        for s in [VBucketState.pending, .dead] {
            e.setVBucketState(vb0, s)
            #expect(throws: EngineError.notMyVBucket) { try e.get(vb0, key("a")) }
            #expect(throws: EngineError.notMyVBucket) { try e.delete(vb0, key("a"), cas: .zero) }
            #expect(throws: EngineError.notMyVBucket) { try e.getReplica(vb0, key("a")) }
        }
    }

    /// After a crash a replica keeps its producer's history (no new failover entry, unlike an active),
    /// and holds whole snapshots: its high seqno on disk is the end of the last persisted snapshot.
    @Test func crashKeepsReplicaHistory() throws {
        let log = FailoverLog(entries: [FailoverEntry(uuid: VBucketUUID(42), seqno: .zero)])
        do {
            let e = try openEngine(dir, vbuckets: 2)
            e.setVBucketState(vb0, .replica)
            try e.applySnapshot(
                vb0, end: SeqNo(20), items: (1...10).map { record("k\($0)", "v", seqno: UInt64($0), cas: 1) },
                failoverLog: log)
            #expect(isOK(waitPersisted(e, vb0, SeqNo(20))))
            e.stopThreads(.abandon)
        }
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        #expect(e.failoverHistory(vb0) == log)
        #expect(e.failoverHistory(VBucketID(1)).entries.count == 2)
        #expect(e.seqnoInfo(vb0).highSeqno == SeqNo(20))
    }
}

extension ReplicaWritesTests {
    /// A replica promoted before it caught up drops adopted branch points above its high seqno and starts
    /// its new history at that seqno, so its newest entry never lies above what it holds.
    @Test func promotionPrunesBranchPointsAboveHigh() throws {
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        e.setVBucketState(vb0, .replica)
        let producer = FailoverLog(entries: [
            FailoverEntry(uuid: VBucketUUID(3), seqno: SeqNo(100)), FailoverEntry(uuid: VBucketUUID(2), seqno: .zero),
        ])
        try e.applySnapshot(vb0, end: SeqNo(40), items: [], failoverLog: producer)
        e.setVBucketState(vb0, .active)
        let h = e.streamHistory(vb0)
        #expect(h.state == .active && h.highSeqno == SeqNo(40))
        #expect(h.log.entries.count == 2 && h.log.newest.seqno == SeqNo(40))
        #expect(h.log.entries[1] == FailoverEntry(uuid: VBucketUUID(2), seqno: .zero))
    }
}
