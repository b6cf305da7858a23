import Foundation
import SetteeCore
import SetteeSQLite
import SetteeTestSupport
import Testing

@testable import SetteeStorage

/// A bucket's data file after large deletes (ADR 0154): the deleted values' pages are free (counted in
/// `diskFigures`), a compaction gives them back a step at a time on the flusher's thread, and what stayed is intact,
/// also after a crash; a file made before ADR 0154 (no incremental auto-vacuum) is rewritten once by its first step.
@Suite(.onTestThreads) struct CompactionTests {
    let dir = TemporaryDirectory("compaction")

    /// 8 KiB that LZ4 cannot shrink: the stored value needs overflow pages, which its tombstone frees.
    static func value(_ i: Int) -> [UInt8] {
        var rng = SplitMix64(seed: UInt64(i))
        return (0..<8192).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }

    /// Writes `count` documents of 8 KiB: returns every tenth key and its value.
    private func write(_ e: BucketEngine, count: Int) throws -> [([UInt8], [UInt8])] {
        var kept: [([UInt8], [UInt8])] = []
        for i in 0..<count {
            let k = key("doc-\(i)")
            let v = Self.value(i)
            _ = try e.store(.set, vbOf(k, e), k, value: v, flags: 0, expiry: 0, datatype: .raw, cas: .zero)
            if i % 10 == 0 { kept.append((k, v)) }
        }
        try waitAllPersisted(e)
        return kept
    }

    /// Writes `count` documents of 8 KiB and deletes all but every tenth: returns the kept keys and their values.
    private func writeThenDelete90(_ e: BucketEngine, count: Int) throws -> [([UInt8], [UInt8])] {
        let kept = try write(e, count: count)
        try delete90(e, count: count)
        return kept
    }

    private func delete90(_ e: BucketEngine, count: Int) throws {
        for i in 0..<count where i % 10 != 0 {
            let k = key("doc-\(i)")
            _ = try e.delete(vbOf(k, e), k, cas: .zero)
        }
        try waitAllPersisted(e)
    }

    @Test func deletesLeaveFreePagesThatCompactionGivesBackAndTheDataStays() throws {
        let e = try openEngine(dir)
        #expect(try RawSQLite(dir.dataFile).rows("PRAGMA auto_vacuum").first?.0 == 2)
        let full = try #require(e.diskFigures())
        let kept = try writeThenDelete90(e, count: 600)
        let deleted = try #require(e.diskFigures())
        print("compaction: before deletes \(full), after \(deleted)")
        // The tombstones freed their values' pages: most of the file is free, and fragmentation says so.
        #expect(deleted.freePages * 2 > deleted.pages, "\(deleted)")
        #expect(deleted.fragmentation >= 50)

        // Small steps, so the run takes several (each its own transaction).
        var steps = 0
        var released = 0
        while true {
            let step = try e.compactStep(maxPages: 256)
            steps += 1
            released += step.released
            if step.remaining == 0 { break }
            #expect(steps < 100)
        }
        let after = try #require(e.diskFigures())
        print("compaction: \(steps) steps released \(released) pages; after \(after)")
        #expect(steps > 1)
        #expect(after.freePages == 0 && after.fragmentation == 0)
        #expect(released >= deleted.freePages)
        // The file (the WAL checkpointed and truncated) is what the live data takes: below a quarter of before.
        #expect(after.actualDiskSize * 4 < deleted.actualDiskSize, "\(after.actualDiskSize) vs \(deleted)")
        for (k, v) in kept { #expect(try e.get(vbOf(k, e), k).value == v) }

        // A crash right after: the compacted file warms up with every kept document and no deleted one.
        e.stopThreads(.abandon)
        let e2 = try openEngine(dir)
        defer { e2.shutdown() }
        for (k, v) in kept { #expect(try e2.get(vbOf(k, e2), k).value == v) }
        let gone = key("doc-1")
        #expect(throws: EngineError.keyNotFound) { try e2.get(vbOf(gone, e2), gone) }
        // Nothing left to give back: a step is a no-op.
        let again = try e2.compactStep()
        #expect(again.released == 0 && again.remaining == 0)
    }

    @Test func aFileFromBeforeIsRewrittenIncrementalByItsFirstStep() throws {
        let e0 = try openEngine(dir)
        _ = try write(e0, count: 200)
        e0.shutdown()
        // Every file before ADR 0154: auto_vacuum NONE (changed only by VACUUM, not in WAL mode's way).
        try RawSQLite(dir.dataFile).exec(
            "PRAGMA journal_mode=DELETE; PRAGMA auto_vacuum=NONE; VACUUM; PRAGMA journal_mode=WAL")
        #expect(try RawSQLite(dir.dataFile).rows("PRAGMA auto_vacuum").first?.0 == 0)

        let e = try openEngine(dir)
        defer { e.shutdown() }
        try delete90(e, count: 200)
        let before = try #require(e.diskFigures())
        #expect(before.freePages > 0)
        let step = try e.compactStep(maxPages: 8)
        // One VACUUM frees every page at once, whatever the step's size, and leaves the file incremental.
        #expect(step.remaining == 0 && step.released >= before.freePages)
        #expect(try RawSQLite(dir.dataFile).rows("PRAGMA auto_vacuum").first?.0 == 2)
        let kept = key("doc-10")
        #expect(try e.get(vbOf(kept, e), kept).value == Self.value(10))
        // Writes go on after it.
        let k = key("after")
        let r = try e.store(.set, vbOf(k, e), k, value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(isOK(waitPersisted(e, vbOf(k, e), r.token.seqno)))
    }
    /// `size` bytes that LZ4 cannot shrink, different per key and round.
    static func value(_ i: Int, round: Int, size: Int) -> [UInt8] {
        var rng = SplitMix64(seed: UInt64(i) &* 1_000_003 &+ UInt64(round))
        return (0..<size).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }

    /// Proves the repack of ADR 0158: values rewritten in place much smaller (as a gateway document's `_sync` shrinks
    /// when its old bodies expire) leave the item pages mostly empty with no page free, which page release alone
    /// cannot give back; repack steps move the rows to the end into full pages (writes going on between steps), the
    /// emptied pages are then given back, and every document reads the same, also after a crash. Fails before this
    /// change: the pages stayed as they were, about 85 % unused.
    @Test func valuesThatShrankLeaveSparsePagesThatARepackPacks() throws {
        let e = try openEngine(dir)
        let count = 1500
        for round in 0..<2 {
            // Round 0: ~3.5 KB each (one row per 4 KiB page); round 1: the same keys rewritten at 600 bytes.
            for i in 0..<count {
                let k = key("doc-\(i)")
                let v = Self.value(i, round: round, size: round == 0 ? 3500 : 600)
                _ = try e.store(.set, vbOf(k, e), k, value: v, flags: 0, expiry: 0, datatype: .raw, cas: .zero)
            }
            try waitAllPersisted(e)
        }
        let sparse = try #require(e.itemsUnusedPercent())
        let before = try #require(e.diskFigures())
        print("repack: before unused \(sparse)% \(before)")
        #expect(sparse >= 70, "unused \(sparse)%")
        #expect(before.freePages * 10 < before.pages, "no page is free: \(before)")
        // Page release alone gives nothing back.
        #expect(try e.compactStep().released == 0)

        var after: Int64 = 0
        var upTo: Int64?
        var steps = 0
        var moved = 0
        while true {
            let step = try e.repackStep(after: after, upTo: upTo, maxRows: 400)
            steps += 1
            moved += step.moved
            (after, upTo) = (step.through, step.upTo)
            if step.through >= step.upTo { break }
            // Writes go on between steps: a moved and a not yet moved document rewritten.
            for i in [steps, count - steps] {
                let k = key("doc-\(i)")
                let v = Self.value(i, round: 2, size: 600)
                _ = try e.store(.set, vbOf(k, e), k, value: v, flags: 0, expiry: 0, datatype: .raw, cas: .zero)
            }
            #expect(steps < 20)
        }
        try waitAllPersisted(e)
        #expect(steps == 4 && moved >= count, "\(steps) steps moved \(moved) rows")
        while try e.compactStep().remaining > 0 {}
        let packed = try #require(e.itemsUnusedPercent())
        let end = try #require(e.diskFigures())
        print("repack: \(steps) steps moved \(moved) rows; after unused \(packed)% \(end)")
        #expect(packed < Limits.compactionRepackUnusedPercent, "unused \(packed)%")
        #expect(end.actualDiskSize * 3 < before.actualDiskSize, "\(end) vs \(before)")

        func expected(_ i: Int) -> [UInt8] {
            let rewritten = (1..<steps).contains(i) || (1..<steps).contains(count - i)
            return Self.value(i, round: rewritten ? 2 : 1, size: 600)
        }
        for i in 0..<count {
            let k = key("doc-\(i)")
            #expect(try e.get(vbOf(k, e), k).value == expected(i))
        }
        // A crash right after: every document warms up as it was.
        e.stopThreads(.abandon)
        let e2 = try openEngine(dir)
        defer { e2.shutdown() }
        for i in 0..<count {
            let k = key("doc-\(i)")
            #expect(try e2.get(vbOf(k, e2), k).value == expected(i))
        }
        // A repack with nothing left to move is a no-op.
        let idle = try e2.repackStep(after: after, upTo: upTo)
        #expect(idle.moved == 0)
    }
}
