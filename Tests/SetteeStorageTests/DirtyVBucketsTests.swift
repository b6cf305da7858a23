import Foundation
import SetteeCore
import SetteeStreams
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeStorage

/// The flusher's dirty-vBucket marks (ADR 0058): `take` visits only marked vBuckets and never loses work.
@Suite(.onTestThreads) struct DirtyVBucketsTests {
    let dir = TemporaryDirectory("storage")

    /// Marks come back once, in round-robin order from the start index, across word boundaries and with a count
    /// that is not a multiple of 64; out-of-range marks are ignored; marking twice is one mark.
    @Test func takeAllReturnsMarksOnceInRoundRobinOrder() {
        let d = DirtyVBuckets(count: 100)
        for i in [99, 0, 63, 64, 5, 70, 64, -1, 100, 1_000] { d.mark(i) }
        #expect(d.isMarked(64) && !d.isMarked(65) && !d.isMarked(100))
        var out: [Int] = []
        d.takeAll(startingAt: 64, into: &out)
        #expect(out == [64, 70, 99, 0, 5, 63])
        d.takeAll(startingAt: 0, into: &out)
        #expect(out.isEmpty)
        d.mark(7)
        d.takeAll(startingAt: 8, into: &out)
        #expect(out == [7])
        d.mark(3)
        d.takeAll(startingAt: 0, into: &out)
        #expect(out == [3])
        let empty = DirtyVBuckets(count: 0)
        empty.mark(0)
        empty.takeAll(startingAt: 0, into: &out)
        #expect(out.isEmpty)
    }

    /// With 1,024 vBuckets, persisting one write visits one or two vBuckets (a mark set after the flusher took its
    /// item costs one empty visit), not all 1,024; twenty writes in twenty vBuckets visit at most forty.
    @Test func flusherVisitsOnlyMarkedVBuckets() throws {
        let e = try openEngine(dir, vbuckets: 1024)
        defer { e.shutdown() }
        try waitAllPersisted(e)
        let k = key("one")
        let before = e.core.flusherVisits.load(ordering: .relaxed)
        let r = try e.store(.set, vbOf(k, e), k, value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(isOK(waitPersisted(e, r.token.vbucket, r.token.seqno)))
        let one = e.core.flusherVisits.load(ordering: .relaxed) - before
        #expect(one >= 1 && one <= 2, "visits for one write: \(one)")

        e.pauseFlusher()
        var vbs: Set<VBucketID> = []
        var i = 0
        while vbs.count < 20 {
            let k = key("k\(i)")
            i += 1
            guard vbs.insert(vbOf(k, e)).inserted else { continue }
            _ = try e.store(.set, vbOf(k, e), k, value: [2], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        let before20 = e.core.flusherVisits.load(ordering: .relaxed)
        e.resumeFlusher()
        try waitAllPersisted(e)
        let twenty = e.core.flusherVisits.load(ordering: .relaxed) - before20
        #expect(twenty >= 20 && twenty <= 40, "visits for twenty vBuckets: \(twenty)")
    }

    /// Batches cut short by the item limit leave the vBuckets they did not reach marked: with 3 items a batch,
    /// 40 vBuckets' writes and a state change of a vBucket with no item all reach disk.
    @Test func workBeyondTheBatchLimitIsNeverLost() throws {
        var options = testOptions()
        options.flusherBatchMaxItems = 3
        let e = try openEngine(dir, options: options)
        defer { e.shutdown() }
        try waitAllPersisted(e)
        e.pauseFlusher()
        var used: Set<VBucketID> = []
        var expected: [[UInt8]: [UInt8]] = [:]
        var i = 0
        while used.count < 40 {
            let k = key("doc-\(i)")
            i += 1
            guard used.insert(vbOf(k, e)).inserted else { continue }
            let v = jsonDoc(i, size: 100)
            _ = try e.store(.set, vbOf(k, e), k, value: v, flags: 0, expiry: 0, datatype: .json, cas: .zero)
            expected[k] = v
        }
        guard let idle = (0..<64).map({ VBucketID(UInt16($0)) }).first(where: { !used.contains($0) }) else {
            Issue.record("no vBucket left without a write")
            return
        }
        e.setVBucketState(idle, .replica)
        e.resumeFlusher()
        try waitAllPersisted(e)
        let replica = StorageSchema.stateCode(.replica)
        #expect(
            eventually {
                let sql = "SELECT state, failover FROM vbucket_state WHERE vb = \(idle.rawValue)"
                return (try? RawSQLite(dir.dataFile).rows(sql))?.first?.0 == replica
            })
        #expect(try RawSQLite(dir.dataFile).rows("SELECT seqno, value FROM items").count == 40)
        e.shutdown()
        let e2 = try openEngine(dir, options: options)
        defer { e2.shutdown() }
        for (k, v) in expected { #expect(try e2.get(vbOf(k, e2), k).value == v) }
        #expect(e2.vbucketState(idle) == .replica)
    }

    /// Proves a batch cut short by its item limit covers every version it writes (ADR 0117). With one item a batch, a
    /// key written at seqnos 1 and 3 around another key's 2 is taken at its current version 3, so the batch must take
    /// the other key too. The file between two batches, opened as a crash would leave it, then holds the other key
    /// whenever its high seqno passes 2. Before, the first batch wrote only the key's version 3, and the reopened
    /// vBucket reported a high seqno of 3 without the write at 2.
    @Test func aPartialBatchCoversEveryVersionItWrites() throws {
        var options = testOptions()
        options.flusherBatchMaxItems = 1
        let e = try openEngine(dir, options: options)
        defer { e.shutdown() }
        try waitAllPersisted(e)
        e.pauseFlusher()
        let k = key("rewritten")
        let vb = vbOf(k, e)
        var n = 0
        while vbOf(key("other-\(n)"), e) != vb { n += 1 }
        let other = key("other-\(n)")
        let first = try e.store(.set, vb, k, value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        let between = try e.store(.set, vb, other, value: [2], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        let last = try e.store(.set, vb, k, value: [3], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(first.token.seqno < between.token.seqno && between.token.seqno < last.token.seqno)
        e.core.pauseAfterNextCommit.store(true, ordering: .sequentiallyConsistent)
        e.resumeFlusher()
        #expect(eventually { e.core.flusherPaused.load(ordering: .sequentiallyConsistent) })
        e.pauseFlusher()
        // The file as it is now, as a crash would leave it (the flusher is idle: nothing is being written).
        let crashed = try dir.copy()
        defer { crashed.remove() }
        let reopened = try openEngine(crashed, options: options)
        defer { reopened.shutdown() }
        let high = reopened.seqnoInfo(vb).highSeqno
        #expect(high >= first.token.seqno, "the first batch committed something")
        if high >= between.token.seqno {
            #expect(
                (try? reopened.get(vb, other).value) == [2], "high \(high) without the write at \(between.token.seqno)")
        }
        if high >= last.token.seqno { #expect((try? reopened.get(vb, k).value) == [3]) }
        e.resumeFlusher()
    }

    /// The flusher's cached failover-log encoding follows the log: after a new history (replica, then active again)
    /// the next row of the vBucket carries both entries, decoded equal to the engine's log.
    @Test func stateRowFollowsAChangedFailoverLog() throws {
        let e = try openEngine(dir)
        defer { e.shutdown() }
        let k = key("history")
        let vb = vbOf(k, e)
        let r1 = try e.store(.set, vb, k, value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(isOK(waitPersisted(e, vb, r1.token.seqno)))
        func stored() throws -> [(uuid: VBucketUUID, seqno: SeqNo)] {
            let sql = "SELECT vb, failover FROM vbucket_state WHERE vb = \(vb.rawValue)"
            let rows = try RawSQLite(dir.dataFile).rows(sql)
            guard let blob = rows.first?.1 else { return [] }
            let log = blob.withUnsafeBytes { FailoverLog.decode($0) }
            return log?.entries.map { ($0.uuid, $0.seqno) } ?? []
        }
        #expect(try stored().map(\.uuid) == e.failoverLog(vb).map(\.uuid))
        #expect(try stored().count == 1)
        e.setVBucketState(vb, .replica)
        e.setVBucketState(vb, .active)
        let r2 = try e.store(.set, vb, k, value: [2], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(isOK(waitPersisted(e, vb, r2.token.seqno)))
        let log = e.failoverLog(vb)
        #expect(log.count == 2)
        #expect(try stored().map(\.uuid) == log.map(\.uuid))
        #expect(try stored().map(\.seqno) == log.map(\.seqno))
    }
}
