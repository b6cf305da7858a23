import Foundation
import SetteeCore
import SetteeSQLite
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeStorage

@Suite(.onTestThreads) struct ChangeFeedTests {
    let dir = TemporaryDirectory("storage")
    let vb0 = VBucketID(0)

    private func set(_ e: BucketEngine, _ k: String, _ v: String, expiry: UInt32 = 0) throws -> MutationResult {
        try e.store(.set, vb0, key(k), value: bytes(v), flags: 7, expiry: expiry, datatype: .raw, cas: .zero)
    }

    /// The feed lists each key once (its latest version) in seqno order, deletions as tombstones with
    /// empty values, only changes after `since`, and reports the high seqno it scanned at.
    @Test func orderDedupAndTombstones() throws {
        let e = try openEngine(dir, vbuckets: 1)
        defer { e.shutdown() }
        _ = try set(e, "a", "1")
        _ = try set(e, "b", "2")
        _ = try set(e, "c", "3")
        let a2 = try set(e, "a", "4")
        let del = try e.delete(vb0, key("b"), cas: .zero)
        let all = try e.changes(vb0, since: .zero, limit: 100)
        #expect(all.records.map { String(decoding: $0.key, as: UTF8.self) } == ["c", "a", "b"])
        #expect(all.records.map(\.meta.bySeqno.rawValue) == [3, 4, 5])
        #expect(all.records[1].value == bytes("4") && all.records[1].meta.cas == a2.cas)
        #expect(all.records[1].meta.flags == 7 && !all.records[1].meta.deleted)
        #expect(all.records[2].meta.deleted && all.records[2].value.isEmpty && all.records[2].meta.cas == del.cas)
        #expect(all.highSeqno == SeqNo(5) && all.complete && all.consistent && all.lastSeqno == SeqNo(5))
        let tail = try e.changes(vb0, since: SeqNo(3), limit: 100)
        #expect(tail.records.map(\.meta.bySeqno.rawValue) == [4, 5])
        let none = try e.changes(vb0, since: SeqNo(5), limit: 100)
        #expect(none.records.isEmpty && none.complete && none.lastSeqno == SeqNo(5))
        #expect(throws: EngineError.invalidArguments) { try e.changes(vb0, since: .zero, limit: 0) }
    }

    /// A limit cuts the batch (complete == false, lastSeqno = last record); continuing from lastSeqno
    /// visits every change exactly once.
    @Test func limitAndContinuation() throws {
        let e = try openEngine(dir, vbuckets: 1)
        defer { e.shutdown() }
        for i in 0..<10 { _ = try set(e, "k\(i)", "v\(i)") }
        var since = SeqNo.zero
        var seen: [UInt64] = []
        var rounds = 0
        while true {
            let b = try e.changes(vb0, since: since, limit: 4)
            rounds += 1
            seen += b.records.map(\.meta.bySeqno.rawValue)
            if !b.complete {
                #expect(b.records.count == 4 && !b.consistent && b.lastSeqno == b.records.last!.meta.bySeqno)
            }
            since = b.lastSeqno
            if b.complete { break }
        }
        #expect(rounds == 3)
        #expect(seen == Array(1...10))
    }

    /// Values evicted from memory are read from disk for the feed (and are not brought back into memory).
    @Test func evictedValuesComeFromDisk() throws {
        let e = try openEngine(dir, quotaMB: 1, vbuckets: 4)
        defer { e.shutdown() }
        var values: [[UInt8]: [UInt8]] = [:]
        var i = 0
        let deadline = Date().addingTimeInterval(20)
        while i < 1000 && Date() < deadline {
            let k = key("ev\(i)")
            let v = jsonDoc(i, size: 1000)
            if (try? e.store(.set, vbOf(k, e), k, value: v, flags: 0, expiry: 0, datatype: .json, cas: .zero)) != nil {
                values[k] = v
                i += 1
            } else {
                usleep(5_000)
            }
        }
        #expect(i == 1000)
        try waitAllPersisted(e)
        #expect(eventually { e.stats().nonResidentItems > 100 })
        let nonResident = e.stats().nonResidentItems
        var got: [[UInt8]: [UInt8]] = [:]
        for v in 0..<4 {
            let b = try e.changes(VBucketID(UInt16(v)), since: .zero, limit: 10_000)
            #expect(b.complete)
            for r in b.records { got[r.key] = r.value }
        }
        #expect(got.count == 1000)
        #expect(got == values)
        #expect(e.stats().nonResidentItems >= nonResident - 5)
    }

    /// Proves the feed fails when an evicted, clean item's row on disk holds an older version than the one counted
    /// persisted (the file lost a write), where it skipped the item as if a newer version had replaced it, so the
    /// stream went on without it and replicas, views and the gateway never saw it.
    @Test func anEvictedItemWhoseRowIsOlderFailsTheFeed() throws {
        let e = try openEngine(dir, quotaMB: 1, vbuckets: 4)
        defer { e.shutdown() }
        var i = 0
        let deadline = Date().addingTimeInterval(20)
        while i < 1000 && Date() < deadline {
            let k = key("ev\(i)")
            if (try? e.store(
                .set, vbOf(k, e), k, value: jsonDoc(i, size: 1000), flags: 0, expiry: 0, datatype: .json, cas: .zero))
                != nil
            {
                i += 1
            } else {
                usleep(5_000)
            }
        }
        try waitAllPersisted(e)
        #expect(eventually { e.stats().nonResidentItems > 100 })
        let evicted = (0..<i).lazy.map { key("ev\($0)") }.first { k in
            e.core.vbuckets[vbOf(k, e).index].table.withLock { $0.items[DocKey(k)].map { !$0.hasValue } ?? false }
        }
        let k = try #require(evicted)
        let conn = try Connection(path: dir.dataFile)
        try conn.execute(
            "UPDATE items SET seqno = seqno - 1 WHERE key = CAST('\(String(decoding: k, as: UTF8.self))' AS BLOB)")
        conn.close()
        #expect(throws: EngineError.self) { _ = try e.changes(vbOf(k, e), since: .zero, limit: 10_000) }
    }

    /// After a clean restart the feed reports the same records (metadata and values) as before it.
    @Test func sameFeedAfterRestart() throws {
        var before: [ChangeRecord] = []
        do {
            let e = try openEngine(dir, vbuckets: 1)
            for i in 0..<50 { _ = try set(e, "r\(i % 30)", "v\(i)") }
            _ = try e.delete(vb0, key("r3"), cas: .zero)
            before = try e.changes(vb0, since: .zero, limit: 1000).records
            e.shutdown()
        }
        let e = try openEngine(dir, vbuckets: 1)
        defer { e.shutdown() }
        let after = try e.changes(vb0, since: .zero, limit: 1000)
        #expect(before.count == 30)
        #expect(after.records == before)
        #expect(after.highSeqno == SeqNo(51))
    }

    /// An item past its expiry never appears live: an active vBucket expires it (a deletion with a new
    /// seqno), a replica reports it as a deletion at its own seqno.
    @Test func expiredItemsAreNotLive() throws {
        let clock = ManualWallClock()
        let e = try openEngine(dir, vbuckets: 2, clock: clock)
        defer { e.shutdown() }
        _ = try set(e, "t", "x", expiry: 10)
        _ = try set(e, "u", "y")
        clock.advance(seconds: 11)
        let b = try e.changes(vb0, since: .zero, limit: 10)
        let t = b.records.first { $0.key == key("t") }!
        #expect(t.meta.deleted && t.value.isEmpty && t.meta.bySeqno == SeqNo(3))
        #expect(b.highSeqno == SeqNo(3) && b.records.map(\.meta.bySeqno.rawValue) == [2, 3])

        let vb1 = VBucketID(1)
        _ = try e.store(.set, vb1, key("w"), value: [1], flags: 0, expiry: 100, datatype: .raw, cas: .zero)
        e.setVBucketState(vb1, .replica)
        clock.advance(seconds: 200)
        let r = try e.changes(vb1, since: .zero, limit: 10)
        #expect(r.records.count == 1 && r.records[0].meta.deleted && r.records[0].meta.bySeqno == SeqNo(1))
        #expect(r.highSeqno == SeqNo(1))
    }

    /// Observers hear every mutation (vBucket and new seqno), including lazy expiry, and nothing after
    /// they are removed.
    @Test func observers() throws {
        let clock = ManualWallClock()
        let e = try openEngine(dir, vbuckets: 1, clock: clock)
        defer { e.shutdown() }
        let heard = Mutex<[UInt64]>([])
        let token = e.addChangeObserver { vb, seq in
            if vb == VBucketID(0) { heard.withLock { $0.append(seq.rawValue) } }
        }
        _ = try set(e, "a", "1")
        _ = try set(e, "b", "2", expiry: 5)
        _ = try e.delete(vb0, key("a"), cas: .zero)
        clock.advance(seconds: 6)
        #expect(throws: EngineError.keyNotFound) { try e.get(vb0, key("b")) }
        #expect(heard.withLock { $0 } == [1, 2, 3, 4])
        e.removeChangeObserver(token)
        _ = try set(e, "c", "3")
        #expect(heard.withLock { $0 }.count == 4)
    }
}

extension ChangeFeedTests {
    /// A byte budget cuts the batch after the record that reaches it (never before the first), and the
    /// batch then covers exactly up to its last record.
    @Test func byteBudget() throws {
        let e = try openEngine(dir, vbuckets: 1)
        defer { e.shutdown() }
        for i in 0..<10 {
            _ = try e.store(
                .set, vb0, key("b\(i)"), value: [UInt8](repeating: 1, count: 98), flags: 0, expiry: 0, datatype: .raw,
                cas: .zero)
        }
        let b = try e.changes(vb0, since: .zero, limit: 100, maxBytes: 250)
        #expect(b.records.count == 3 && !b.complete && !b.consistent && b.lastSeqno == SeqNo(3))
        let one = try e.changes(vb0, since: .zero, limit: 100, maxBytes: 1)
        #expect(one.records.count == 1 && one.lastSeqno == SeqNo(1))
        let all = try e.changes(vb0, since: .zero, limit: 100, maxBytes: 1 << 20)
        #expect(all.records.count == 10 && all.complete)
    }
}
