import Foundation
import SetteeCore
import SetteeStreams
import SetteeTestSupport
import Testing

@testable import SetteeStorage

/// The flusher leaves a vBucket's state row out of a batch whose newest item carries everything the row would
/// change (ADR 0061); warmup recovers the high seqno and max CAS from the items.
@Suite(.onTestThreads) struct StateRowSkipTests {
    let dir = TemporaryDirectory("storage")

    private func row(
        high: UInt64, cas: UInt64, state: VBucketState = .active, purge: UInt64 = 0, log: FailoverLog
    ) -> StateRow {
        StateRow(
            vb: 3, state: state, highSeqno: SeqNo(high), maxCAS: CAS(cas), purgeSeqno: SeqNo(purge), failoverLog: log)
    }

    /// The rule as a pure value: skipped only when state, purge seqno and failover log are as last committed and the
    /// newest item of the batch is exactly the row's high seqno and max CAS.
    @Test func stateRowNeededRule() {
        var rng = SystemRandomNumberGenerator()
        let log = FailoverLog.fresh(using: &rng)
        var branched = log
        branched.branch(at: SeqNo(10), using: &rng)
        let last = row(high: 10, cas: 100, log: log)
        let next = row(high: 12, cas: 120, log: log)
        let carried: (seqno: SeqNo, cas: CAS)? = (SeqNo(12), CAS(120))
        #expect(!Flusher.stateRowNeeded(next, lastCommitted: last, newest: carried))
        // Nothing committed by this flusher yet (the row on disk is warmup's, or none).
        #expect(Flusher.stateRowNeeded(next, lastCommitted: nil, newest: carried))
        // No item in the batch (a state change alone).
        #expect(Flusher.stateRowNeeded(next, lastCommitted: last, newest: nil))
        // High seqno past the newest item: a replica snapshot's end, a queue taken in part.
        #expect(Flusher.stateRowNeeded(next, lastCommitted: last, newest: (SeqNo(11), CAS(120))))
        // Max CAS above the newest item's: a lock's CAS, or a replicated item with a remote CAS.
        #expect(Flusher.stateRowNeeded(next, lastCommitted: last, newest: (SeqNo(12), CAS(119))))
        // Anything else in the row changed.
        for changed in [
            row(high: 12, cas: 120, state: .replica, log: log), row(high: 12, cas: 120, purge: 5, log: log),
            row(high: 12, cas: 120, log: branched),
        ] {
            #expect(Flusher.stateRowNeeded(changed, lastCommitted: last, newest: carried))
        }
        // Seqnos went back (a rollback or flush writes its own row; never skip after one).
        #expect(Flusher.stateRowNeeded(next, lastCommitted: row(high: 20, cas: 100, log: log), newest: carried))
    }

    /// Crash after a COMMIT that left the state row stale: the file's row says the first batch's high seqno while
    /// the items hold the second's. The restart recovers the high seqno, persisted seqno and max CAS the row would
    /// have said, branches the failover log at that high seqno (unclean stop), and a DCP consumer that held the
    /// acknowledged writes resumes without rollback while one ahead of them rolls back to exactly there.
    @Test func crashWithStaleStateRowRecoversFromItems() throws {
        let clock = ManualWallClock(nanoseconds: 1_800_000_000_000_000_000)
        let e1 = try openEngine(dir, clock: clock)
        let a = key("stale-a")
        let vb = vbOf(a, e1)
        var b = key("stale-b")
        var i = 0
        while vbOf(b, e1) != vb {
            i += 1
            b = key("stale-b\(i)")
        }
        let r1 = try e1.store(.set, vb, a, value: bytes("one"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(isOK(waitPersisted(e1, vb, r1.token.seqno)))
        let r2 = try e1.store(.set, vb, b, value: bytes("two"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        let r3 = try e1.store(.set, vb, a, value: bytes("three"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(isOK(waitPersisted(e1, vb, r3.token.seqno)))
        #expect(r2.token.seqno < r3.token.seqno)
        #expect(e1.stats().stateRowsSkipped >= 1)
        let raw = try RawSQLite(dir.dataFile)
        let stateHigh = try raw.rows("SELECT high_seqno, failover FROM vbucket_state WHERE vb = \(vb.rawValue)")
        let itemHigh = try raw.rows("SELECT max(seqno), x'' FROM items WHERE vb = \(vb.rawValue)")
        #expect(stateHigh.first?.0 == Int64(r1.token.seqno.rawValue), "the second batch left the row behind")
        #expect(itemHigh.first?.0 == Int64(r3.token.seqno.rawValue))
        let before = e1.seqnoInfo(vb)
        let uuidBefore = before.uuid
        #expect(before.highSeqno == r3.token.seqno && before.persistedSeqno == r3.token.seqno)
        e1.stopThreads(.abandon)

        // The clock went back: only the recovered max CAS keeps the next CAS above r3's.
        clock.set(nanoseconds: 1_700_000_000_000_000_000)
        let e2 = try openEngine(dir, clock: clock)
        defer { e2.shutdown() }
        let after = e2.seqnoInfo(vb)
        #expect(after.highSeqno == r3.token.seqno)
        #expect(after.persistedSeqno == r3.token.seqno)
        #expect(try e2.get(vb, a).value == bytes("three"))
        #expect(try e2.get(vb, b).value == bytes("two"))
        let log = e2.failoverLog(vb)
        #expect(log.count == 2)
        #expect(log.first?.seqno == r3.token.seqno && log.last?.uuid == uuidBefore)

        let (_, history, high, _) = e2.streamHistory(vb)
        let producer = ProducerHistory(failoverLog: history, highSeqno: high, purgeSeqno: .zero)
        let held = r3.token.seqno
        let kept = StreamRequest(
            vbucket: vb, resume: ResumePoint(start: held, snapStart: held, snapEnd: held, uuid: uuidBefore))
        #expect(producer.decide(kept) == .accept)
        let ahead = SeqNo(held.rawValue + 2)
        let lost = StreamRequest(
            vbucket: vb, resume: ResumePoint(start: ahead, snapStart: ahead, snapEnd: ahead, uuid: uuidBefore))
        #expect(producer.decide(lost) == .rollback(to: held))

        let r4 = try e2.store(.set, vb, b, value: bytes("four"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(r4.token.seqno == SeqNo(r3.token.seqno.rawValue + 1))
        #expect(r4.cas > r3.cas)
    }

    /// A skipped row never hides a state change: after a vBucket became a replica and active again (new failover
    /// entry) the next batch writes the row, and a crash right after recovers the new history.
    @Test func changedHistoryIsWrittenEvenWhenItemsCarryTheSeqno() throws {
        let e1 = try openEngine(dir)
        let k = key("history-crash")
        let vb = vbOf(k, e1)
        let r1 = try e1.store(.set, vb, k, value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(isOK(waitPersisted(e1, vb, r1.token.seqno)))
        let r2 = try e1.store(.set, vb, k, value: [2], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(isOK(waitPersisted(e1, vb, r2.token.seqno)))
        e1.setVBucketState(vb, .replica)
        e1.setVBucketState(vb, .active)
        let r3 = try e1.store(.set, vb, k, value: [3], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(isOK(waitPersisted(e1, vb, r3.token.seqno)))
        let logBefore = e1.failoverLog(vb)
        #expect(logBefore.count == 2)
        e1.stopThreads(.abandon)

        let e2 = try openEngine(dir)
        defer { e2.shutdown() }
        let log = e2.failoverLog(vb)
        // The crash adds one more entry on top of the two that were persisted.
        #expect(log.count == 3)
        #expect(Array(log.dropFirst()).map(\.uuid) == logBefore.map(\.uuid))
        #expect(e2.seqnoInfo(vb).highSeqno == r3.token.seqno)
        #expect(try e2.get(vb, k).value == [3])
    }
}
