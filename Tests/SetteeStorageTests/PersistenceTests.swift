import Foundation
import SetteeCore
import SetteeStreams
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeStorage

@Suite(.onTestThreads) struct PersistenceTests {
    let dir = TemporaryDirectory("storage")

    /// After shutdown and reopen every document (live and deleted) comes back with identical value,
    /// flags, CAS, expiry, datatype, revSeqno and seqno; seqnos and the failover log survive a clean
    /// shutdown unchanged, and new CAS values exceed every restored one.
    @Test func roundTripAcrossCleanShutdown() throws {
        let e1 = try openEngine(dir)
        var docs: [[UInt8]: Document] = [:]
        for i in 0..<300 {
            let k = key("doc-\(i)")
            let vb = vbOf(k, e1)
            _ = try e1.store(
                .set, vb, k, value: i % 2 == 0 ? jsonDoc(i) : [UInt8](repeating: UInt8(i % 256), count: i),
                flags: UInt32(i),
                expiry: i % 3 == 0 ? 2_000_000_000 : 0, datatype: i % 2 == 0 ? .json : .raw, cas: .zero)
        }
        _ = try e1.delete(vbOf(key("doc-5"), e1), key("doc-5"), cas: .zero)
        _ = try e1.arithmetic(
            vbOf(key("n"), e1), key("n"), delta: 1, initial: 41, expiry: 0, increment: true, cas: .zero)
        for i in 0..<300 where i != 5 {
            let k = key("doc-\(i)")
            docs[k] = try e1.get(vbOf(k, e1), k)
        }
        let tomb = try e1.getMeta(vbOf(key("doc-5"), e1), key("doc-5"))
        let infos = (0..<64).map { e1.seqnoInfo(VBucketID(UInt16($0))) }
        let logs = (0..<64).map { e1.failoverLog(VBucketID(UInt16($0))).map(\.uuid) }
        let maxCAS = docs.values.map(\.meta.cas).max()!
        e1.shutdown()

        let e2 = try openEngine(dir)
        defer { e2.shutdown() }
        for (k, d) in docs { #expect(try e2.get(vbOf(k, e2), k) == d) }
        #expect(try e2.getMeta(vbOf(key("doc-5"), e2), key("doc-5")) == tomb)
        #expect(try e2.get(vbOf(key("n"), e2), key("n")).value == bytes("41"))
        for i in 0..<64 {
            let info = e2.seqnoInfo(VBucketID(UInt16(i)))
            #expect(info.highSeqno == infos[i].highSeqno && info.persistedSeqno == info.highSeqno)
            #expect(e2.failoverLog(VBucketID(UInt16(i))).map(\.uuid) == logs[i], "clean restart keeps the history")
        }
        let st = e2.stats()
        #expect(st.currItems == 300)
        #expect(st.warmupItems == 301)
        // Max CAS restored: with a clock far in the past a new CAS still exceeds the old ones.
        let e2vb = vbOf(key("doc-1"), e2)
        let r = try e2.store(.set, e2vb, key("doc-1"), value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(r.cas > maxCAS)
        #expect(r.token.seqno == infos[e2vb.index].highSeqno.next)
    }

    /// The persisted max CAS alone (not the items) keeps CAS monotonic: with a manual clock set
    /// back in time, the first CAS after restart is still above the last one before.
    @Test func maxCASRestoredWithClockBehind() throws {
        let clock = ManualWallClock(nanoseconds: 1_800_000_000_000_000_000)
        let e1 = try openEngine(dir, clock: clock)
        let k = key("x")
        let vb = vbOf(k, e1)
        let a = try e1.store(.set, vb, k, value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        _ = try e1.delete(vb, k, cas: .zero)
        e1.shutdown()
        clock.set(nanoseconds: 1_700_000_000_000_000_000)
        let e2 = try openEngine(dir, clock: clock)
        defer { e2.shutdown() }
        let b = try e2.store(
            .set, vbOf(key("other-key"), e2), key("other-key"), value: [1], flags: 0, expiry: 0, datatype: .raw,
            cas: .zero)
        let c = try e2.store(.set, vb, k, value: [2], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(c.cas > a.cas)
        #expect(b.cas.rawValue > 0)
    }

    /// Crash safety: writes whose persistence was acknowledged survive an engine abandoned without
    /// shutdown (threads stopped, nothing more written), and the restart after the unclean stop
    /// starts a new failover-log entry at the persisted high seqno.
    @Test func acknowledgedWritesSurviveCrash() throws {
        let e1 = try openEngine(dir)
        var expected: [[UInt8]: [UInt8]] = [:]
        for i in 0..<500 {
            let k = key("k\(i)")
            let v = jsonDoc(i, size: 200 + i)
            let r = try e1.store(.set, vbOf(k, e1), k, value: v, flags: 1, expiry: 0, datatype: .json, cas: .zero)
            expected[k] = v
            if i % 100 == 99 {
                guard case .success = waitPersisted(e1, r.token.vbucket, r.token.seqno) else {
                    Issue.record("persistence not acknowledged")
                    return
                }
            }
        }
        try waitAllPersisted(e1)
        let vb0 = vbOf(key("k0"), e1)
        let uuidBefore = e1.seqnoInfo(vb0).uuid
        let highBefore = e1.seqnoInfo(vb0).highSeqno
        e1.stopThreads(.abandon)

        let e2 = try openEngine(dir)
        defer { e2.shutdown() }
        for (k, v) in expected { #expect(try e2.get(vbOf(k, e2), k).value == v) }
        let log = e2.failoverLog(vb0)
        #expect(log.count == 2)
        #expect(log[0].seqno == highBefore && log[1].uuid == uuidBefore)
        #expect(e2.seqnoInfo(vb0).uuid != uuidBefore)
    }

    /// Ten sets of one key while the flusher is held back reach disk as one row (latest version only).
    @Test func flusherDeduplicates() throws {
        let e = try openEngine(dir)
        e.pauseFlusher()
        let k = key("dedup")
        let vb = vbOf(k, e)
        var last: MutationResult?
        for i in 0..<10 {
            last = try e.store(.set, vb, k, value: bytes("v\(i)"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        #expect(e.stats().queueSize == 1)
        e.resumeFlusher()
        guard case .success = waitPersisted(e, vb, last!.token.seqno) else {
            Issue.record("not persisted")
            return
        }
        let st = e.stats()
        #expect(st.totalPersisted == 1)
        e.shutdown()
        let rows = try RawSQLite(dir.dataFile).rows("SELECT seqno, value FROM items")
        #expect(rows.count == 1)
        #expect(rows.first?.0 == 10)
        #expect(rows.first?.1 == bytes("v9"))
    }

    /// waitForPersistence completes only after the batch holding the seqno committed: not while the
    /// flusher is held back, and then with persistedSeqno ≥ the seqno.
    @Test func waitForPersistenceCompletesAfterCommit() throws {
        let e = try openEngine(dir)
        defer { e.shutdown() }
        e.pauseFlusher()
        let k = key("durable")
        let vb = vbOf(k, e)
        let r = try e.store(.set, vb, k, value: bytes("v"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        let done = Mutex<Result<Void, EngineError>?>(nil)
        let committedBefore = e.stats().flusherCommits
        e.waitForPersistence(vb, r.token.seqno) { res in done.withLock { $0 = res } }
        usleep(100_000)
        #expect(done.withLock { $0 } == nil)
        #expect(e.seqnoInfo(vb).persistedSeqno < r.token.seqno)
        e.resumeFlusher()
        #expect(eventually { done.withLock { $0 } != nil })
        #expect(isOK(done.withLock { $0 }))
        #expect(e.seqnoInfo(vb).persistedSeqno >= r.token.seqno)
        #expect(e.stats().flusherCommits > committedBefore)
        // Already persisted: completes inline.
        #expect(isOK(waitPersisted(e, vb, r.token.seqno, timeout: 0.1)))
    }

    /// An engine whose flusher gathers for 30 s, idle when it is handed over: whatever ends a gather early shows as a
    /// commit within it. A write with a waiter is committed first (a waiter ends any gather), so the test's first
    /// write starts a gather of its own: stop 44's CI run failed once when a gather begun before the test's write (by
    /// what the open left dirty) ended within the test's 0.5 s window, on a run so loaded that trivial tests took
    /// 300 s. (The delay was 3 s, then 10 s: on a loaded 2-core run the 0.5 s sleep overran the whole gather once.)
    private func openWithLongGather() throws -> BucketEngine {
        var options = testOptions()
        options.flusherMaxDelay = 30
        let e = try openEngine(dir, options: options)
        let settle = key("settle")
        let vb = vbOf(settle, e)
        let s = try e.store(.set, vb, settle, value: bytes("s"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(isOK(waitPersisted(e, vb, s.token.seqno, timeout: 30)), "the settling write was not persisted")
        return e
    }

    /// A persistence waiter does not wait for the flusher's window (ADR 0107): with a 30 s window, a write nobody
    /// waits for is still dirty after 0.5 s, while one somebody waits for is committed well within the window in an
    /// express batch of its own vBucket, whether the waiter came before or during the window. The express batch
    /// takes that vBucket's whole queue (a plain write queued there before it is persisted too) and nothing else
    /// (a plain write in another vBucket waits for the window's end).
    @Test func aPersistenceWaiterGetsAnExpressBatch() throws {
        let e = try openWithLongGather()
        defer { e.shutdown() }
        let durable = key("durable")
        let dvb = vbOf(durable, e)
        let plain = keyInAnotherVBucket(than: dvb, e)
        let pvb = vbOf(plain, e)
        let rider = keyInVBucket(dvb, e, prefix: "rider")
        let p = try e.store(.set, pvb, plain, value: bytes("v"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        let r = try e.store(.set, dvb, rider, value: bytes("v"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        usleep(500_000)
        #expect(e.seqnoInfo(pvb).persistedSeqno < p.token.seqno)
        #expect(e.seqnoInfo(dvb).persistedSeqno < r.token.seqno)
        // The flusher is in its window now; a durable write's waiter wakes it.
        let d = try e.store(.set, dvb, durable, value: bytes("v"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        let start = monotonicNanos()
        #expect(isOK(waitPersisted(e, dvb, d.token.seqno, timeout: 10)))
        let waited = Double(monotonicNanos() - start) / 1e9
        #expect(waited < 5, "waited \(waited) s; the window is 30 s")
        #expect(e.seqnoInfo(dvb).persistedSeqno >= r.token.seqno, "the express batch takes its vBucket's whole queue")
        #expect(e.seqnoInfo(pvb).persistedSeqno < p.token.seqno, "another vBucket's plain write waits for the window")
        // Next cycle: a waiter registered while the window goes on is served at once too.
        let again = try e.store(.set, dvb, durable, value: bytes("w"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        let start2 = monotonicNanos()
        #expect(isOK(waitPersisted(e, dvb, again.token.seqno, timeout: 10)))
        #expect(Double(monotonicNanos() - start2) / 1e9 < 5)
        #expect(e.seqnoInfo(pvb).persistedSeqno < p.token.seqno)
    }

    /// `persistSoon` (what an OBSERVE_SEQNO poll that finds a vBucket behind calls) writes that vBucket in an
    /// express batch without a waiter: a poller's write is on disk well within a 30 s window.
    @Test func persistSoonWritesTheVBucketWithoutAWaiter() throws {
        let e = try openWithLongGather()
        defer { e.shutdown() }
        let k = key("polled")
        let vb = vbOf(k, e)
        let s = try e.store(.set, vb, k, value: bytes("v"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        usleep(300_000)
        #expect(e.seqnoInfo(vb).persistedSeqno < s.token.seqno)
        e.persistSoon(vb)
        #expect(
            eventually(timeout: 5) { e.seqnoInfo(vb).persistedSeqno >= s.token.seqno },
            "the poller's vBucket is written")
    }

    /// A window ends early once a full batch is queued (`flusherBatchMaxItems`): waiting longer would only split
    /// the window over several transactions.
    @Test func aFullBatchEndsTheWindow() throws {
        var options = testOptions()
        options.flusherMaxDelay = 30
        options.flusherBatchMaxItems = 20
        let e = try openEngine(dir, options: options)
        defer { e.shutdown() }
        var last: [(VBucketID, SeqNo)] = []
        for i in 0..<19 {
            let k = key("w\(i)")
            let vb = vbOf(k, e)
            last.append(
                (
                    vb,
                    try e.store(.set, vb, k, value: bytes("v"), flags: 0, expiry: 0, datatype: .raw, cas: .zero).token
                        .seqno
                ))
        }
        usleep(300_000)
        #expect(last.contains { e.seqnoInfo($0.0).persistedSeqno < $0.1 }, "19 queued items do not end the window")
        let k = key("w19")
        let vb = vbOf(k, e)
        last.append(
            (
                vb,
                try e.store(.set, vb, k, value: bytes("v"), flags: 0, expiry: 0, datatype: .raw, cas: .zero).token.seqno
            ))
        #expect(
            eventually(timeout: 5) { last.allSatisfy { e.seqnoInfo($0.0).persistedSeqno >= $0.1 } }, "the 20th ends it")
    }

    /// A replica's snapshots do not end the flusher's gather (ADR 0082): applying one broadcast the flusher's
    /// wake-up, which ended the gather, so a replica under a stream of small snapshots committed a transaction per
    /// snapshot. With a 30 s gather, an active write and the snapshots applied after it stay unpersisted; a
    /// command (a bucket flush) still ends the gather at once.
    @Test func replicaSnapshotsDoNotEndTheGather() throws {
        let e = try openWithLongGather()
        defer { e.shutdown() }
        let plain = key("plain")
        let pvb = vbOf(plain, e)
        let rvb = VBucketID(UInt16((Int(pvb.rawValue) + 1) % e.settings.numVBuckets))
        e.setVBucketState(rvb, .replica)
        let p = try e.store(.set, pvb, plain, value: bytes("v"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        usleep(300_000)  // the flusher woke for the write and gathers now
        let commitsBefore = e.stats().flusherCommits
        for seqno in 1...5 {
            let record = ChangeRecord(
                key: key("r\(seqno)"), value: bytes("{}"),
                meta: ItemMetadata(
                    cas: CAS(UInt64(seqno)), revSeqno: RevSeqNo(1), bySeqno: SeqNo(UInt64(seqno)), flags: 0, expiry: 0,
                    datatype: .json, deleted: false))
            try e.applySnapshot(rvb, end: SeqNo(UInt64(seqno)), items: [record])
            usleep(50_000)
        }
        usleep(200_000)
        #expect(e.seqnoInfo(pvb).persistedSeqno < p.token.seqno)
        #expect(e.seqnoInfo(rvb).persistedSeqno == .zero)
        #expect(e.stats().flusherCommits == commitsBefore)
        let start = monotonicNanos()
        try e.flushAll()
        let waited = Double(monotonicNanos() - start) / 1e9
        #expect(waited < 5, "a bucket flush waited \(waited) s; the gather delay is 30 s")
    }

    /// Bucket flush empties memory and disk and restarts every vBucket at seqno 0 under a new history, as
    /// kv_engine recreates flushed vBuckets: a consumer that followed the old history is told to roll back to
    /// 0. (Seqnos used to keep counting with no items below them, so a new copy streaming from 0 never reached
    /// the high seqno and a rebalance after a flush waited 300 s.) It stays empty after reopen.
    @Test func flushAllRemovesEverything() throws {
        let e1 = try openEngine(dir)
        for i in 0..<50 {
            let k = key("f\(i)")
            _ = try e1.store(
                .set, vbOf(k, e1), k, value: jsonDoc(i, size: 300), flags: 0, expiry: 0, datatype: .json, cas: .zero)
        }
        try waitAllPersisted(e1)
        let k0 = key("f0")
        let vb = vbOf(k0, e1)
        let high = e1.seqnoInfo(vb).highSeqno
        let oldHistory = e1.seqnoInfo(vb).uuid
        let casBefore = try e1.get(vb, k0).meta.cas
        try e1.flushAll()
        #expect(throws: EngineError.keyNotFound) { try e1.get(vb, k0) }
        let st = e1.stats()
        #expect(st.currItems == 0 && st.memUsed == 0 && st.queueSize == 0)
        #expect(e1.seqnoInfo(vb).highSeqno == .zero && e1.seqnoInfo(vb).persistedSeqno == .zero)
        let (_, log, newHigh, _) = e1.streamHistory(vb)
        #expect(log.newest.uuid != oldHistory && log.newest.seqno == .zero)
        let stale = StreamRequest(
            vbucket: vb, resume: ResumePoint(start: high, snapStart: high, snapEnd: high, uuid: oldHistory),
            end: StreamRequest.endless)
        #expect(
            ProducerHistory(failoverLog: log, highSeqno: newHigh, purgeSeqno: .zero).decide(stale)
                == .rollback(to: .zero))
        let after = key("after")
        let r = try e1.store(.set, vbOf(after, e1), after, value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(r.token.seqno == SeqNo(1))
        #expect(r.cas > casBefore)
        e1.shutdown()
        #expect(try RawSQLite(dir.dataFile).rows("SELECT seqno, value FROM items").count == 1)
        let e2 = try openEngine(dir)
        defer { e2.shutdown() }
        #expect(throws: EngineError.keyNotFound) { try e2.get(vb, k0) }
        #expect(e2.stats().currItems == 1)
        #expect(e2.seqnoInfo(vbOf(after, e2)).highSeqno == SeqNo(1))
    }

    /// destroy() removes the bucket's files.
    @Test func destroyDeletesFiles() throws {
        let e = try openEngine(dir)
        _ = try e.store(.set, VBucketID(0), key("a"), value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(FileManager.default.fileExists(atPath: dir.dataFile))
        try e.destroy()
        #expect(!FileManager.default.fileExists(atPath: dir.dataFile))
        #expect(!FileManager.default.fileExists(atPath: dir.dataFile + "-wal"))
    }

    /// Too many queued dirty items (the flusher is behind) makes mutations fail with temporaryFailure.
    @Test func dirtyQueueBound() throws {
        var o = testOptions()
        o.maxDirtyQueueItems = 10
        let e = try openEngine(dir, options: o)
        defer { e.shutdown() }
        e.pauseFlusher()
        for i in 0..<10 {
            _ = try e.store(
                .set, VBucketID(0), key("q\(i)"), value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        #expect(throws: EngineError.temporaryFailure) {
            try e.store(.set, VBucketID(0), key("q10"), value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        #expect(e.stats().queueSize == 10)
        e.resumeFlusher()
        #expect(eventually { e.stats().queueSize == 0 })
        _ = try e.store(.set, VBucketID(0), key("q10"), value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
    }

    /// A backlog the flusher drained leaves no queue buffer behind: `removeFirst` would keep the capacity of the
    /// longest backlog, 16 B an entry, up to one per item after a bulk load (ADR 0048).
    @Test func drainedDirtyQueueReleasesItsBuffer() throws {
        let e = try openEngine(dir)
        defer { e.shutdown() }
        e.pauseFlusher()
        for i in 0..<500 {
            _ = try e.store(
                .set, VBucketID(0), key("q\(i)"), value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        #expect(e.core.vbuckets[0].table.withLock { $0.dirtyQueue.capacity } >= 500)
        e.resumeFlusher()
        #expect(eventually { e.stats().queueSize == 0 })
        #expect(eventually { e.core.vbuckets[0].table.withLock { $0.dirtyQueue.capacity } == 0 })
        #expect(e.stats().currItems == 500)
    }

    /// The flusher writes an item from its own box and marks it clean in place: no copy of the box (ADR 0048,
    /// release figures). A box replaced while its key was queued stays alive only until the flusher takes the key.
    @Test func flushingKeepsTheItemsBoxAndReleasesReplacedOnes() throws {
        final class Weak {
            weak var box: ItemBox?
            init(_ box: ItemBox?) { self.box = box }
        }
        let e = try openEngine(dir)
        defer { e.shutdown() }
        e.pauseFlusher()
        let keys = (0..<50).map { key("b\($0)") }
        let value = [UInt8](repeating: 7, count: 1024)
        for k in keys {
            _ = try e.store(.set, VBucketID(0), k, value: value, flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        func box(_ k: [UInt8]) -> Weak { Weak(e.core.vbuckets[0].table.withLock { $0.items[DocKey(k)]?.box }) }
        let replaced = box(keys[0])
        _ = try e.store(.set, VBucketID(0), keys[0], value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(replaced.box != nil)  // the queue still holds it
        let before = keys.map(box)
        e.resumeFlusher()
        #expect(eventually { e.stats().queueSize == 0 })
        #expect(
            eventually {
                e.core.vbuckets[0].table.withLock { t in keys.allSatisfy { t.items[DocKey($0)]?.dirty == false } }
            })
        #expect(replaced.box == nil)
        for (k, w) in zip(keys, before) {
            let now = e.core.vbuckets[0].table.withLock { $0.items[DocKey(k)]?.box }
            #expect(w.box != nil && now === w.box)
        }
    }
}

@Suite(.onTestThreads) struct ParallelWarmupTests {
    /// With more rows than `Warmup.parallelThreshold * 2` the warmup splits the table over several
    /// reader threads; every row is loaded exactly once with its value and metadata.
    @Test func parallelWarmupLoadsEveryRowOnce() throws {
        let dir = TemporaryDirectory("storage")
        let n = Int(Warmup.parallelThreshold) * 2 + 1000
        let e1 = try openEngine(dir, quotaMB: 512)
        for i in 0..<n {
            let k = key("w\(i)")
            _ = try e1.store(
                .set, vbOf(k, e1), k, value: Array("v\(i)".utf8), flags: UInt32(i), expiry: 0, datatype: .raw,
                cas: .zero)
        }
        e1.shutdown()
        let e2 = try openEngine(dir, quotaMB: 512)
        defer { e2.shutdown() }
        let st = e2.stats()
        #expect(st.warmupItems == n && st.currItems == n)
        for i in stride(from: 0, to: n, by: 997) {
            let k = key("w\(i)")
            let d = try e2.get(vbOf(k, e2), k)
            #expect(d.value == Array("v\(i)".utf8) && d.meta.flags == UInt32(i))
        }
    }
}
