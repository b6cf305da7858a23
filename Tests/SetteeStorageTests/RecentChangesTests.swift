import Foundation
import SetteeCore
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeStorage

/// `RecentChanges` alone (pure), then change feeds answered from it against feeds that scan every item
/// (ADR 0077).
@Suite(.onTestThreads) struct RecentChangesTests {
    private func k(_ s: String) -> DocKey { DocKey(Array(s.utf8)) }
    private func seqnos(_ r: RecentChanges) -> [UInt64] { (0..<r.count).map { r[$0].seqno.rawValue } }

    @Test func recordsInOrderAndFindsWhatIsAboveASeqno() {
        var r = RecentChanges(capacity: 8)
        #expect(r.covers(.zero) && r.count == 0)
        for s in [3, 5, 6, 9] as [UInt64] { r.record(SeqNo(s), k("k\(s)")) }
        #expect(seqnos(r) == [3, 5, 6, 9] && r.floor == .zero)
        #expect(r.firstIndex(after: .zero) == 0)
        #expect(r.firstIndex(after: SeqNo(5)) == 2)
        #expect(r.firstIndex(after: SeqNo(7)) == 3)
        #expect(r.firstIndex(after: SeqNo(9)) == 4)
        #expect(r[1].key == k("k5"))
    }

    /// A full ring forgets its oldest entry and raises the floor to it: a feed at or above the floor is still
    /// answered, one below it must scan.
    @Test func aFullRingRaisesTheFloor() {
        var r = RecentChanges(capacity: 3)
        for s in 1...5 as ClosedRange<UInt64> { r.record(SeqNo(s), k("k\(s)")) }
        #expect(seqnos(r) == [3, 4, 5])
        #expect(r.floor == SeqNo(2))
        #expect(r.covers(SeqNo(2)) && !r.covers(SeqNo(1)))
        #expect(r.firstIndex(after: SeqNo(2)) == 0 && r.firstIndex(after: SeqNo(4)) == 2)
        r.record(SeqNo(9), k("k9"))
        #expect(seqnos(r) == [4, 5, 9] && r.floor == SeqNo(3))
    }

    /// A seqno that is not above the newest entry cannot be kept in order: the entries are given up and the
    /// floor covers them all. One at or below the floor is not needed at all.
    @Test func outOfOrderGivesUpTheEntries() {
        var r = RecentChanges(capacity: 8)
        r.record(SeqNo(4), k("a"))
        r.record(SeqNo(7), k("b"))
        r.record(SeqNo(6), k("c"))
        #expect(r.count == 0 && r.floor == SeqNo(7))
        r.record(SeqNo(5), k("d"))
        #expect(r.count == 0 && r.floor == SeqNo(7))
        r.record(SeqNo(8), k("e"))
        #expect(seqnos(r) == [8])
    }

    /// Items put in the table without entries (warmup) raise the floor past them and drop entries below it.
    @Test func coverDropsWhatItCovers() {
        var r = RecentChanges(capacity: 3)
        for s in 1...5 as ClosedRange<UInt64> { r.record(SeqNo(s), k("k\(s)")) }  // ring wrapped: 3, 4, 5
        r.cover(through: SeqNo(3))
        #expect(seqnos(r) == [4, 5] && r.floor == SeqNo(3))
        r.cover(through: SeqNo(2))
        #expect(seqnos(r) == [4, 5] && r.floor == SeqNo(3))
        r.record(SeqNo(6), k("k6"))
        r.record(SeqNo(7), k("k7"))
        #expect(seqnos(r) == [5, 6, 7] && r.floor == SeqNo(4))
        r.cover(through: SeqNo(10))
        #expect(r.count == 0 && r.floor == SeqNo(10) && !r.covers(SeqNo(9)))
    }

    @Test func capacityZeroKeepsNothing() {
        var r = RecentChanges(capacity: 0)
        r.record(SeqNo(1), k("a"))
        r.record(SeqNo(2), k("b"))
        #expect(r.count == 0 && r.floor == SeqNo(2) && !r.covers(SeqNo(1)) && r.covers(SeqNo(2)))
    }

    // MARK: change feeds from the ring against feeds that scan

    private struct Seen: Equatable {
        var key: [UInt8]
        var value: [UInt8]
        var seqno: UInt64
        var cas: UInt64
        var deleted: Bool
        var expiry: UInt32
        var prepare: Bool
    }

    private func feed(_ e: BucketEngine, _ vb: VBucketID, since: SeqNo, limit: Int, prepares: Bool) throws -> (
        [Seen], Bool, UInt64, UInt64
    ) {
        summary(try e.changes(vb, since: since, limit: limit, maxBytes: Int.max, includePrepares: prepares))
    }

    private func summary(_ b: ChangeBatch) -> ([Seen], Bool, UInt64, UInt64) {
        let seen = b.records.map {
            Seen(
                key: $0.key, value: $0.value, seqno: $0.meta.bySeqno.rawValue, cas: $0.meta.cas.rawValue,
                deleted: $0.meta.deleted, expiry: $0.meta.expiry, prepare: $0.prepare)
        }
        return (seen, b.complete, b.lastSeqno.rawValue, b.highSeqno.rawValue)
    }

    /// Seeded histories of sets (some with an expiry), deletions, touches, durable writes committed or aborted,
    /// clock steps and restarts, applied alike to three engines: one whose vBuckets remember no seqnos (every feed
    /// scans all items: the reference), one that remembers 3 (its ring wraps all the time) and one with the
    /// default. After every step, feeds from random positions (with and without prepares, some with a limit)
    /// must return the same records, and an active feed must leave no live item whose expiry passed.
    @Test(arguments: [1, 2, 3, 4, 5, 6] as [UInt64])
    func feedsFromTheRingMatchFullScans(seed: UInt64) throws {
        print("RecentChangesTests.feedsFromTheRingMatchFullScans seed \(seed)")
        var rng = SplitMix64(seed: seed)
        let clock = ManualWallClock()
        let dirs = [TemporaryDirectory("storage"), TemporaryDirectory("storage"), TemporaryDirectory("storage")]
        let rings = [0, 3, Limits.recentChangesPerVBucket]
        func open(_ i: Int) throws -> BucketEngine {
            var o = testOptions()
            o.recentChanges = rings[i]
            return try openEngine(dirs[i], vbuckets: 2, clock: clock, options: o)
        }
        var engines = try (0..<3).map(open)
        defer { for e in engines { e.shutdown() } }
        let keys = (0..<12).map { Array("key-\($0)".utf8) }
        // The durable write in flight per key (vBucket, seqno), committed or aborted by a later step.
        var pending: [[UInt8]: (VBucketID, SeqNo)] = [:]
        // How often the memory-only read answered and gave up: both must happen for the comparison to mean anything.
        var memoryAnswers = 0
        var memoryGaveUp = 0
        defer {
            #expect(
                memoryAnswers > 0 && memoryGaveUp > 0, "seed \(seed): memory-only \(memoryAnswers) / \(memoryGaveUp)")
        }

        for step in 0..<400 {
            let vb = VBucketID(UInt16(rng.next() % 2))
            let key = keys[Int(rng.next() % UInt64(keys.count))]
            let roll = rng.next() % 100
            let expiry: UInt32 = rng.next() % 4 == 0 ? UInt32(1 + step % 5) : 0
            // Every engine gets the same call; they must agree on whether it failed.
            var outcomes: [String] = []
            for e in engines {
                do {
                    switch roll {
                    case 0..<40:
                        _ = try e.store(
                            .set, vb, key, value: Array("v\(step)".utf8), flags: 1, expiry: expiry, datatype: .raw,
                            cas: .zero)
                    case 40..<50:
                        _ = try e.delete(vb, key, cas: .zero)
                    case 50..<56:
                        _ = try e.touch(vb, key, expiry: UInt32(1 + step % 3))
                    case 56..<66:
                        let r = try e.store(
                            .set, vb, key, value: Array("d\(step)".utf8), flags: 2, expiry: 0, datatype: .raw,
                            cas: .zero, syncWrite: SyncWrite(level: 1))
                        if e === engines[0] { pending[key] = (r.token.vbucket, r.token.seqno) }
                    case 66..<76:
                        if let (pvb, seqno) = pending[key] {
                            if roll % 2 == 0 {
                                _ = e.commitSyncWrite(pvb, key, seqno: seqno)
                            } else {
                                e.abortSyncWrite(pvb, key, seqno: seqno)
                            }
                        }
                    case 76..<86:
                        clock.advance(seconds: 1)
                    default:
                        break
                    }
                    outcomes.append("ok")
                } catch {
                    outcomes.append("\(error)")
                }
            }
            if (66..<76).contains(roll) { pending[key] = nil }
            #expect(Set(outcomes).count == 1, "seed \(seed) step \(step): engines disagree \(outcomes)")
            if (86..<88).contains(roll) {
                for e in engines { e.shutdown() }
                engines = try (0..<3).map(open)
                pending = [:]
            }
            // Feeds from random positions, the same on all three.
            for _ in 0..<3 {
                let fvb = VBucketID(UInt16(rng.next() % 2))
                let high = engines[0].seqnoInfo(fvb).highSeqno.rawValue
                let since = SeqNo(high == 0 ? 0 : rng.next() % (high + 1))
                let limit = rng.next() % 3 == 0 ? 2 : 1000
                let prepares = rng.next() % 2 == 0
                let reference = try feed(engines[0], fvb, since: since, limit: limit, prepares: prepares)
                for i in 1..<3 {
                    // The memory-only read (a DCP producer's on its event loop, ADR 0079), when it answers, is the
                    // feed's answer: taken first, it must also leave the engine as the feed finds it.
                    let memory = try engines[i].changesInMemory(
                        fvb, since: since, limit: limit, maxBytes: Int.max, includePrepares: prepares
                    ).map(summary)
                    let got = try feed(engines[i], fvb, since: since, limit: limit, prepares: prepares)
                    if let memory {
                        memoryAnswers += 1
                        #expect(
                            memory == got,
                            "seed \(seed) step \(step) engine \(i) vb \(fvb) since \(since): memory \(memory) against \(got)"
                        )
                    } else {
                        memoryGaveUp += 1
                    }
                    #expect(
                        got == reference,
                        "seed \(seed) step \(step) engine \(i) vb \(fvb) since \(since) limit \(limit): \(got) against \(reference)"
                    )
                }
            }
            // After an active feed nothing live in the table has an expiry that passed (keys with a durable write in
            // flight aside): what expired became a tombstone at a new seqno, which the feed delivered.
            let nowS = UInt32(clock.nowNanoseconds() / 1_000_000_000)
            for e in engines {
                _ = try e.changes(vb, since: e.seqnoInfo(vb).highSeqno, limit: 1000)
                let stale = e.core.vbuckets[vb.index].table.withLock { t in
                    t.items.filter { key, item in
                        !item.deleted && Expiry.isExpired(item.expiry, nowSeconds: nowS) && t.pending[key] == nil
                    }.count
                }
                #expect(stale == 0, "seed \(seed) step \(step): \(stale) expired items left live")
            }
        }
    }

    /// The memory-only read gives up, and changes nothing, where the feed would visit every item or read the disk:
    /// below the ring's floor, with an expiry due in an active vBucket, and with a value to send that was evicted.
    @Test func memoryOnlyReadsGiveUpWithoutChangingAnything() throws {
        let clock = ManualWallClock()
        var o = testOptions()
        o.recentChanges = 3
        let dir = TemporaryDirectory("storage")
        let e = try openEngine(dir, vbuckets: 1, clock: clock, options: o)
        defer { e.shutdown() }
        let vb = VBucketID(0)
        func set(_ k: String, expiry: UInt32 = 0) throws {
            _ = try e.store(
                .set, vb, Array(k.utf8), value: Array("v-\(k)".utf8), flags: 0, expiry: expiry, datatype: .raw,
                cas: .zero)
        }
        for i in 0..<5 { try set("k\(i)") }
        // Seqnos 1-5, a ring of 3: entries 3-5, floor 2.
        let high = e.seqnoInfo(vb).highSeqno
        #expect(high == SeqNo(5))
        let close = try #require(try e.changesInMemory(vb, since: SeqNo(2), limit: 100, maxBytes: Int.max))
        #expect(close.records.map(\.key) == ["k2", "k3", "k4"].map { Array($0.utf8) } && close.consistent)
        #expect(try e.changesInMemory(vb, since: SeqNo(1), limit: 100, maxBytes: Int.max) == nil)
        #expect(try e.changes(vb, since: SeqNo(1), limit: 100).records.count == 4)

        // An expiry due: the active's pass would visit every item and write tombstones; memory-only leaves it to it.
        try set("short", expiry: 1)
        clock.advance(seconds: 2)
        #expect(try e.changesInMemory(vb, since: SeqNo(5), limit: 100, maxBytes: Int.max) == nil)
        #expect(e.seqnoInfo(vb).highSeqno == SeqNo(6))
        let expired = try e.changes(vb, since: SeqNo(5), limit: 100)
        #expect(expired.records.count == 1 && expired.records[0].meta.deleted && e.seqnoInfo(vb).highSeqno == SeqNo(7))
        #expect(try e.changesInMemory(vb, since: SeqNo(6), limit: 100, maxBytes: Int.max)?.records.count == 1)

        // An evicted value: memory-only gives up, the feed reads it from disk.
        try set("ev")
        try waitAllPersisted(e)
        #expect(evict(e, vb, Array("ev".utf8)))
        #expect(try e.changesInMemory(vb, since: SeqNo(7), limit: 100, maxBytes: Int.max) == nil)
        #expect(try e.changes(vb, since: SeqNo(7), limit: 100).records.map(\.value) == [Array("v-ev".utf8)])
    }
}
