import Foundation
import SetteeCore
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeStorage

/// Durable writes as prepares (docs/internals/sync-writes.md): readers see the committed version until the
/// commit, other writes to the key are refused meanwhile, an abort puts the committed version back.
@Suite(.onTestThreads) struct SyncWriteTests {
    let dir = TemporaryDirectory("storage")
    let vb0 = VBucketID(0)

    private func set(_ e: BucketEngine, _ k: String, _ v: String, syncWrite: SyncWrite = false) throws -> MutationResult
    {
        try e.store(
            .set, vb0, key(k), value: bytes(v), flags: 7, expiry: 0, datatype: .json, cas: .zero, syncWrite: syncWrite)
    }

    /// Before the fix a durable write's value was readable at once. Now GET (both read paths) and GET_META
    /// return the previous committed version while the prepare waits, a key that had none reads as absent,
    /// and the commit makes the prepared value visible with the CAS the writer was given.
    @Test func preparesAreInvisibleUntilCommitted() throws {
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        let old = try set(e, "k", "\"old\"")
        let prepared = try set(e, "k", "\"new\"", syncWrite: true)
        let fresh = try set(e, "n", "\"first\"", syncWrite: true)
        #expect(e.pendingSyncWrites(vb0) == 2)

        #expect(try e.get(vb0, key("k")).value == bytes("\"old\""))
        #expect(try e.get(vb0, key("k")).meta.cas == old.cas)
        #expect(try e.withDocument(vb0, key("k")) { v, _ in Array(v) } == bytes("\"old\""))
        #expect(try e.getMeta(vb0, key("k")).cas == old.cas)
        #expect(throws: EngineError.keyNotFound) { try e.get(vb0, key("n")) }
        #expect(throws: EngineError.keyNotFound) { try e.withDocument(vb0, key("n")) { _, _ in 0 } }
        #expect(throws: EngineError.keyNotFound) { try e.getMeta(vb0, key("n")) }

        #expect(e.commitSyncWrite(vb0, key("k"), seqno: prepared.token.seqno))
        #expect(e.commitSyncWrite(vb0, key("n"), seqno: fresh.token.seqno))
        #expect(e.pendingSyncWrites(vb0) == 0)
        let committed = try e.get(vb0, key("k"))
        #expect(committed.value == bytes("\"new\""))
        #expect(committed.meta.cas == prepared.cas)
        #expect(committed.meta.bySeqno > prepared.token.seqno)  // the commit has its own seqno
        #expect(try e.get(vb0, key("n")).value == bytes("\"first\""))
        // A second commit of the same prepare finds nothing to commit.
        #expect(!e.commitSyncWrite(vb0, key("k"), seqno: prepared.token.seqno))
    }

    /// Before the fix a second write to a key with a durable write in flight simply overwrote it. Now every
    /// mutation of that key (durable or not: set, replace, delete, incr, append, touch, get-and-lock) gets
    /// SYNC_WRITE_IN_PROGRESS until the prepare is resolved, while other keys are unaffected.
    @Test func writesToAPreparedKeyAreRefused() throws {
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        _ = try set(e, "k", "1")
        let p = try set(e, "k", "2", syncWrite: true)
        #expect(throws: EngineError.syncWriteInProgress) { try set(e, "k", "3") }
        #expect(throws: EngineError.syncWriteInProgress) { try set(e, "k", "3", syncWrite: true) }
        #expect(throws: EngineError.syncWriteInProgress) {
            try e.store(.replace, vb0, key("k"), value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        #expect(throws: EngineError.syncWriteInProgress) { try e.delete(vb0, key("k"), cas: .zero) }
        #expect(throws: EngineError.syncWriteInProgress) {
            try e.arithmetic(vb0, key("k"), delta: 1, initial: 0, expiry: 0, increment: true, cas: .zero)
        }
        #expect(throws: EngineError.syncWriteInProgress) {
            try e.concat(.append, vb0, key("k"), value: [0x30], cas: .zero)
        }
        #expect(throws: EngineError.syncWriteInProgress) { try e.touch(vb0, key("k"), expiry: 100) }
        #expect(throws: EngineError.syncWriteInProgress) { try e.getAndLock(vb0, key("k"), lockSeconds: 5) }
        _ = try set(e, "other", "x")
        #expect(e.commitSyncWrite(vb0, key("k"), seqno: p.token.seqno))
        _ = try set(e, "k", "4")
        #expect(try e.get(vb0, key("k")).value == bytes("4"))
    }

    /// An aborted prepare is never visible and the previous version stays with its own CAS (a reader's CAS
    /// still works); a prepare of a new key leaves the key absent; a durable delete aborted leaves the
    /// document alive. The restored versions take new seqnos so replicas and feeds converge on them.
    @Test func abortRestoresTheCommittedVersion() throws {
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        let old = try set(e, "k", "\"old\"")
        let p1 = try set(e, "k", "\"new\"", syncWrite: true)
        let p2 = try set(e, "n", "\"first\"", syncWrite: true)
        _ = try set(e, "d", "\"alive\"")
        let p3 = try e.delete(vb0, key("d"), cas: .zero, syncWrite: true)
        #expect(try e.get(vb0, key("d")).value == bytes("\"alive\""))  // a pending delete hides nothing

        #expect(e.abortSyncWrite(vb0, key("k"), seqno: p1.token.seqno))
        #expect(e.abortSyncWrite(vb0, key("n"), seqno: p2.token.seqno))
        #expect(e.abortSyncWrite(vb0, key("d"), seqno: p3.token.seqno))
        #expect(!e.abortSyncWrite(vb0, key("k"), seqno: p1.token.seqno))

        let k = try e.get(vb0, key("k"))
        #expect(k.value == bytes("\"old\"") && k.meta.cas == old.cas)
        #expect(k.meta.bySeqno > p3.token.seqno)
        #expect(throws: EngineError.keyNotFound) { try e.get(vb0, key("n")) }
        #expect(try e.get(vb0, key("d")).value == bytes("\"alive\""))
        // The reader's CAS still matches after the abort.
        _ = try e.store(.replace, vb0, key("k"), value: bytes("2"), flags: 0, expiry: 0, datatype: .json, cas: old.cas)
        #expect(e.stats().currItems == 2)
    }

    /// The change feed leaves prepares out for ordinary consumers (views, the gateway, user streams) and
    /// delivers the document at its commit's seqno; replica streams (`includePrepares`) get the prepare at
    /// once. Before the fix every consumer saw the uncommitted value.
    @Test func feedsShowPreparesOnlyToReplicas() throws {
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        _ = try set(e, "a", "1")
        let p = try set(e, "k", "\"new\"", syncWrite: true)
        let plain = try e.changes(vb0, since: .zero, limit: 10)
        #expect(plain.records.map(\.key) == [key("a")])
        #expect(plain.complete && plain.lastSeqno == p.token.seqno)
        let replica = try e.changes(vb0, since: .zero, limit: 10, maxBytes: .max, includePrepares: true)
        #expect(replica.records.map(\.key) == [key("a"), key("k")])

        #expect(e.commitSyncWrite(vb0, key("k"), seqno: p.token.seqno))
        let after = try e.changes(vb0, since: plain.lastSeqno, limit: 10)
        #expect(after.records.map(\.key) == [key("k")])
        #expect(after.records.first?.value == bytes("\"new\""))
    }

    /// A prepare's durability level travels with it (ADR 0073): the replica feed reports the level the client
    /// asked for, a replica that installed a replicated prepare reports the level it received (a chained copy
    /// would pass it on), and a prepare without a known level, or with an unknown wire value, is the strictest,
    /// persistToMajority. Before, every replica stream said level 1 whatever the client asked for.
    @Test func preparesKeepTheirDurabilityLevel() throws {
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        _ = try set(e, "m", "1", syncWrite: SyncWrite(level: 1))
        _ = try set(e, "a", "1", syncWrite: SyncWrite(level: 2))
        _ = try set(e, "p", "1", syncWrite: SyncWrite(level: 3))
        _ = try set(e, "u", "1", syncWrite: true)
        _ = try set(e, "plain", "1")
        let feed = try e.changes(vb0, since: .zero, limit: 10, maxBytes: .max, includePrepares: true)
        #expect(feed.records.map(\.level) == [1, 2, 3, 3, 0])
        #expect(feed.records.map(\.needsReplicaPersistence) == [false, false, true, true, false])

        let r1 = VBucketID(1)
        e.setVBucketState(r1, .replica)
        func rec(_ k: String, _ seq: UInt64, level: UInt8?) -> ChangeRecord {
            ChangeRecord(
                key: key(k), value: bytes("1"),
                meta: ItemMetadata(
                    cas: CAS(100 + seq), revSeqno: RevSeqNo(1), bySeqno: SeqNo(seq), flags: 0, expiry: 0,
                    datatype: .json, deleted: false),
                prepare: true, level: level)
        }
        try e.applySnapshot(
            r1, end: SeqNo(3), items: [rec("m", 1, level: 1), rec("x", 2, level: 9), rec("n", 3, level: nil)])
        let held = try e.changes(r1, since: .zero, limit: 10, maxBytes: .max, includePrepares: true)
        #expect(held.records.map(\.level) == [1, 3, 3])
    }

    /// A prepare is kept resident by the item pager (its commit re-queues the value). When the vBucket stops
    /// being active its waiting writer can no longer commit (the client is told the outcome is unknown); when a
    /// copy becomes active it commits every prepare it holds at new seqnos, so feeds that left them out
    /// deliver them (the recovery rule).
    @Test func becomingActiveCommitsHeldPrepares() throws {
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        _ = try set(e, "k", "old")
        let p = try set(e, "k", "v", syncWrite: true)
        #expect(isOK(waitPersisted(e, vb0, p.token.seqno)))
        _ = e.core.vbuckets[0].table.withLock { $0.evictValues(secondChance: false) }
        #expect(e.core.vbuckets[0].table.withLock { $0.items[DocKey(key("k"))]?.value } == bytes("v"))
        let seen = try e.changes(vb0, since: .zero, limit: 10)
        e.setVBucketState(vb0, .replica)
        #expect(!e.commitSyncWrite(vb0, key("k"), seqno: p.token.seqno))
        #expect(try e.getReplica(vb0, key("k")).value == bytes("old"))
        e.setVBucketState(vb0, .active)
        #expect(e.pendingSyncWrites(vb0) == 0)
        let doc = try e.get(vb0, key("k"))
        #expect(doc.value == bytes("v") && doc.meta.bySeqno > p.token.seqno)
        #expect(try e.changes(vb0, since: seen.lastSeqno, limit: 10).records.map(\.key) == [key("k")])
    }

    /// Replicas hold a replicated prepare (DCP_PREPARE) without exposing it: GET_REPLICA serves the version it
    /// shadows until the commit (a later mutation of the key) arrives; a replica promoted while holding one
    /// commits it. Before, a replica exposed every durable write as soon as it arrived.
    @Test func replicasHoldPreparesUntilTheirCommit() throws {
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        e.setVBucketState(vb0, .replica)
        func rec(_ k: String, _ v: String, _ seq: UInt64, prepare: Bool = false) -> ChangeRecord {
            ChangeRecord(
                key: key(k), value: bytes(v),
                meta: ItemMetadata(
                    cas: CAS(100 + seq), revSeqno: RevSeqNo(seq), bySeqno: SeqNo(seq), flags: 0, expiry: 0,
                    datatype: .json, deleted: false),
                prepare: prepare)
        }
        try e.applySnapshot(vb0, end: SeqNo(2), items: [rec("a", "1", 1), rec("b", "1", 2)])
        try e.applySnapshot(
            vb0, end: SeqNo(4), items: [rec("a", "2", 3, prepare: true), rec("n", "1", 4, prepare: true)])
        #expect(try e.getReplica(vb0, key("a")).value == bytes("1"))
        #expect(throws: EngineError.keyNotFound) { try e.getReplica(vb0, key("n")) }
        try e.applySnapshot(vb0, end: SeqNo(5), items: [rec("a", "2", 5)])  // a's commit
        #expect(try e.getReplica(vb0, key("a")).value == bytes("2"))
        #expect(e.pendingSyncWrites(vb0) == 1)
        e.setVBucketState(vb0, .active)  // promoted while holding n's prepare: committed
        #expect(try e.get(vb0, key("n")).value == bytes("1"))
        #expect(try e.get(vb0, key("n")).meta.bySeqno > SeqNo(5))
    }

    /// The bucket counts its durable writes as kv_engine does (`vb_active_sync_write_*_count`, ADR 0086): a prepare
    /// an active vBucket accepted, each commit and each abort; a write refused (a prepare of the key in flight)
    /// is not accepted; a replica counts the prepares it receives, and when it is promoted the prepares it
    /// commits count as committed. Before, none of this was counted: an operator could not see aborted writes.
    @Test func syncWriteOutcomesAreCounted() throws {
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        #expect(e.stats().syncWrites == SyncWriteCounts())
        let a = try set(e, "a", "1", syncWrite: true)
        let b = try set(e, "b", "1", syncWrite: SyncWrite(level: 3))
        _ = try set(e, "plain", "1")
        #expect(throws: EngineError.syncWriteInProgress) { try set(e, "a", "2", syncWrite: true) }
        #expect(e.commitSyncWrite(vb0, key("a"), seqno: a.token.seqno))
        #expect(e.abortSyncWrite(vb0, key("b"), seqno: b.token.seqno))
        #expect(!e.abortSyncWrite(vb0, key("b"), seqno: b.token.seqno))  // already gone: not counted twice
        var counts = e.stats().syncWrites
        #expect(counts.accepted == 2 && counts.committed == 1 && counts.aborted == 1 && counts.replicaAccepted == 0)

        let r1 = VBucketID(1)
        e.setVBucketState(r1, .replica)
        func rec(_ k: String, _ seq: UInt64, prepare: Bool) -> ChangeRecord {
            ChangeRecord(
                key: key(k), value: bytes("1"),
                meta: ItemMetadata(
                    cas: CAS(100 + seq), revSeqno: RevSeqNo(1), bySeqno: SeqNo(seq), flags: 0, expiry: 0,
                    datatype: .json, deleted: false),
                prepare: prepare)
        }
        try e.applySnapshot(
            r1, end: SeqNo(3),
            items: [rec("m", 1, prepare: true), rec("n", 2, prepare: true), rec("o", 3, prepare: false)])
        try e.applySnapshot(r1, end: SeqNo(4), items: [rec("m", 4, prepare: false)])  // m's commit
        counts = e.stats().syncWrites
        #expect(counts.replicaAccepted == 2 && counts.committed == 1)
        e.setVBucketState(r1, .active)  // promoted holding n's prepare: committed here
        counts = e.stats().syncWrites
        #expect(counts.accepted == 2 && counts.committed == 2 && counts.aborted == 1 && counts.replicaAccepted == 2)
    }

    /// After a restart the counts start from zero, and an active's persisted prepare that warmup commits (the
    /// recovery rule) counts as committed, not as accepted: the node did not accept a write, it resolved one.
    @Test func warmedUpPreparesCountAsCommitted() throws {
        do {
            let e = try openEngine(dir, vbuckets: 2)
            let p = try set(e, "k", "1", syncWrite: true)
            #expect(isOK(waitPersisted(e, vb0, p.token.seqno)))
            #expect(e.stats().syncWrites.accepted == 1)
            e.shutdown()
        }
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        #expect(try e.get(vb0, key("k")).value == bytes("1"))
        let counts = e.stats().syncWrites
        #expect(counts.accepted == 0 && counts.committed == 1 && counts.aborted == 0)
    }

    /// Before, a restart forgot which items were prepares: an active served a persisted prepare as committed at
    /// its prepare seqno, which feeds had skipped. Now the flag is stored with the row: a restarted active
    /// commits what it persisted at a new seqno (a feed that passed the prepare delivers it), and a restarted
    /// replica keeps hiding its prepare from GET_REPLICA until the commit arrives.
    @Test func preparesSurviveRestart() throws {
        let seen: SeqNo
        let prepare: SeqNo
        do {
            let e = try openEngine(dir, vbuckets: 2)
            _ = try set(e, "k", "old")
            prepare = try set(e, "k", "new", syncWrite: true).token.seqno
            seen = try e.changes(vb0, since: .zero, limit: 10).lastSeqno
            e.setVBucketState(VBucketID(1), .replica)
            try e.applySnapshot(
                VBucketID(1), end: SeqNo(1),
                items: [
                    ChangeRecord(
                        key: key("r"), value: bytes("1"),
                        meta: ItemMetadata(
                            cas: CAS(5), revSeqno: RevSeqNo(1), bySeqno: SeqNo(1), flags: 0, expiry: 0,
                            datatype: .json, deleted: false),
                        prepare: true, level: 1)
                ])
            #expect(isOK(waitPersisted(e, vb0, prepare)))
            #expect(isOK(waitPersisted(e, VBucketID(1), SeqNo(1))))
            e.shutdown()
        }
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        let doc = try e.get(vb0, key("k"))
        #expect(doc.value == bytes("new") && doc.meta.bySeqno > prepare)
        #expect(doc.meta.datatype == .json)
        #expect(try e.changes(vb0, since: seen, limit: 10).records.map(\.key) == [key("k")])
        #expect(e.pendingSyncWrites(vb0) == 0)
        #expect(e.pendingSyncWrites(VBucketID(1)) == 1)
        // What the replica's prepare shadowed is gone from the file: unknown, so TMPFAIL (ask another copy)
        // rather than "not found" for a key that may have a committed version on the active.
        #expect(throws: EngineError.wouldBlock) { try e.getReplica(VBucketID(1), key("r")) }
        // Its level is not in the file: after the restart it is the strictest, persistToMajority (ADR 0073).
        let held = try e.changes(VBucketID(1), since: .zero, limit: 10, maxBytes: .max, includePrepares: true)
        #expect(held.records.map(\.level) == [SyncWrite.persistToMajority])
    }

    /// Before, a warmup above the low watermark left a persisted prepare's value on disk, and the active's
    /// recovery commit skipped it: the prepare became visible at its prepare seqno, which change feeds that
    /// leave prepares out had already passed, so views and the gateway never saw the document. Now warmup
    /// always loads a prepare's value and the commit takes a new seqno, whatever the memory pressure.
    @Test func preparesWarmedUpUnderMemoryPressureCommitAtANewSeqno() throws {
        let filler = [UInt8](repeating: UInt8(ascii: "x"), count: 2048)
        let seen: SeqNo
        let prepare: SeqNo
        do {
            let e = try openEngine(dir, vbuckets: 1)
            for i in 0..<1500 {
                _ = try e.store(
                    .set, vb0, key("f\(i)"), value: filler, flags: 0, expiry: 0, datatype: .raw, cas: .zero)
            }
            _ = try set(e, "zz", "old")
            prepare = try set(e, "zz", "new", syncWrite: true).token.seqno
            seen = try e.changes(vb0, since: .zero, limit: 5000).lastSeqno
            #expect(isOK(waitPersisted(e, vb0, prepare)))
            e.shutdown()
        }
        // 1 MB of quota against ~3 MB of values: warmup passes the low watermark and loads keys only.
        let e = try openEngine(dir, quotaMB: 1, vbuckets: 1)
        defer { e.shutdown() }
        #expect(e.stats().nonResidentItems > 0, "the quota is meant to leave values on disk at warmup")
        let doc = try e.get(vb0, key("zz"))
        #expect(doc.value == bytes("new") && doc.meta.bySeqno > prepare)
        #expect(try e.changes(vb0, since: seen, limit: 10).records.map(\.key) == [key("zz")])
        #expect(e.pendingSyncWrites(vb0) == 0)
    }
}
