import Foundation
import SetteeCore
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeStorage

/// Tombstones older than the bucket's purge interval leave memory and disk (ADR 0095): the purge seqno rises over
/// them and is persisted, change feeds from below it are told they may have missed deletions, and a key written
/// again continues its revision seqno past the purged tombstone's, also after a restart.
@Suite(.onTestThreads) struct TombstonePurgeTests {
    let dir = TemporaryDirectory("storage")
    static let day = 86_400.0

    func open(_ clock: ManualWallClock, purgeInterval: Double? = nil) throws -> BucketEngine {
        var settings = testSettings(vbuckets: 4)
        settings.purgeInterval = purgeInterval
        return try BucketEngine(
            settings: settings, directory: dir.path, clock: clock, options: testOptions(), logger: quietLogger())
    }

    @discardableResult
    func set(_ e: BucketEngine, _ k: String, _ v: String = "v") throws -> MutationResult {
        try e.store(.set, vbOf(key(k), e), key(k), value: bytes(v), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
    }

    @discardableResult
    func del(_ e: BucketEngine, _ k: String) throws -> MutationResult {
        try e.delete(vbOf(key(k), e), key(k), cas: .zero)
    }

    @Test func purgesOnlyPersistedTombstonesOlderThanTheInterval() throws {
        let clock = ManualWallClock()
        let e = try open(clock)
        defer { e.shutdown() }
        for i in 0..<40 { try set(e, "k\(i)") }
        for i in 0..<20 { try set(e, "k\(i)", "second") }  // revision 2
        for i in 0..<20 { try del(e, "k\(i)") }  // revision 3, tombstones
        let fences = try fenceEveryVBucket(e)
        try waitAllPersisted(e)
        let before = e.stats()
        #expect(before.tombstones == 20 && before.currItems == 20 + fences)

        // Younger than the default three days: nothing goes.
        clock.advance(seconds: 3 * Self.day - 60)
        #expect(e.runTombstonePurger() == 0)
        // Deleted later, and not yet persisted (flusher held): kept however old it gets.
        e.pauseFlusher()
        try del(e, "k20")
        clock.advance(seconds: 120)
        #expect(e.runTombstonePurger() == 20)
        let after = e.stats()
        #expect(after.tombstones == 1 && after.currItems == 19 + fences && after.tombstonesPurged == 20)
        #expect(after.memUsed < before.memUsed)
        for i in 0..<20 {
            let k = key("k\(i)")
            let meta = attempt { () throws(EngineError) in try e.getMeta(vbOf(k, e), k) }
            #expect(meta.map(\.deleted) == .failure(.keyNotFound))
        }
        #expect(try e.getMeta(vbOf(key("k20"), e), key("k20")).deleted)
        e.resumeFlusher()
        try waitAllPersisted(e)

        // Each vBucket's purge seqno covers its purged tombstones, and a feed from below it is told so.
        var deletions: Set<String> = []
        for v in 0..<4 {
            let vb = VBucketID(UInt16(v))
            let purge = e.purgeSeqno(vb)
            let batch = try e.changes(vb, since: .zero, limit: 1000)
            #expect(batch.purgeSeqno == purge)
            var fromZero = PurgeFloor()
            let fromZeroMisses = fromZero.missesDeletions(since: .zero, purgeSeqno: batch.purgeSeqno)
            #expect(!fromZeroMisses)
            for r in batch.records where r.meta.deleted { deletions.insert(String(decoding: r.key, as: UTF8.self)) }
            if purge != .zero {
                // A feed at 1 that began before the purge missed deletions; one that read from 0 after it did not.
                var before = PurgeFloor()
                var after = PurgeFloor(purge)
                var atPurge = PurgeFloor()
                let missed = (
                    before.missesDeletions(since: SeqNo(1), purgeSeqno: batch.purgeSeqno),
                    after.missesDeletions(since: SeqNo(1), purgeSeqno: batch.purgeSeqno),
                    atPurge.missesDeletions(since: purge, purgeSeqno: batch.purgeSeqno)
                )
                #expect(missed.0)
                #expect(!missed.1)
                #expect(!missed.2)
            }
        }
        #expect(deletions == ["k20"])
        #expect((0..<4).contains { e.purgeSeqno(VBucketID(UInt16($0))) != .zero })
    }

    @Test func purgeIsPersistedAndRevisionsContinueAfterRestart() throws {
        let clock = ManualWallClock()
        var purges: [SeqNo] = []
        do {
            let e = try open(clock, purgeInterval: 0.5)
            for i in 0..<10 { try set(e, "r\(i)") }
            for i in 0..<10 { try del(e, "r\(i)") }  // revision 2
            try fenceEveryVBucket(e)
            try waitAllPersisted(e)
            clock.advance(seconds: 0.5 * Self.day + 1)
            #expect(e.runTombstonePurger() == 10)
            purges = (0..<4).map { e.purgeSeqno(VBucketID(UInt16($0))) }
            // Written again before the restart: the revision continues past the purged tombstones'.
            try set(e, "r0", "again")
            #expect(try e.getMeta(vbOf(key("r0"), e), key("r0")).revSeqno == RevSeqNo(3))
            #expect(e.shutdown() == 0)
        }
        let db = try RawSQLite(dir.dataFile)
        #expect(try db.rows("SELECT count(*), x'' FROM items WHERE deleted = 1")[0].0 == 0)
        #expect(try db.rows("SELECT count(*), x'' FROM items")[0].0 == 1 + 4)  // r0 and the fences
        let e = try open(clock, purgeInterval: 0.5)
        defer { e.shutdown() }
        #expect((0..<4).map { e.purgeSeqno(VBucketID(UInt16($0))) } == purges)
        #expect(e.stats().tombstones == 0 && e.stats().currItems == 1 + 4)
        try set(e, "r5", "after restart")
        #expect(try e.getMeta(vbOf(key("r5"), e), key("r5")).revSeqno == RevSeqNo(3))
    }

    /// The tombstone at a vBucket's high seqno is kept however old (ADR 0161, as couch-kvstore keeps the deleted item
    /// at the file's last sequence): a change feed from 0 then ends at an item, so a consumer that completes a
    /// snapshot at its end item is not left waiting for the vBucket's next write. Once a write follows, it goes.
    @Test func theTombstoneAtTheHighSeqnoIsKeptUntilAWriteFollows() throws {
        let clock = ManualWallClock()
        let e = try open(clock)
        defer { e.shutdown() }
        let vb = VBucketID(0)
        let (a, b) = (keyInVBucket(vb, e, prefix: "a"), keyInVBucket(vb, e, prefix: "b"))
        for k in [a, b] {
            _ = try e.store(.set, vb, k, value: bytes("v"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        _ = try e.delete(vb, a, cas: .zero)
        let last = try e.delete(vb, b, cas: .zero).token.seqno
        try waitAllPersisted(e)
        clock.advance(seconds: 30 * Self.day)
        #expect(e.runTombstonePurger() == 1)
        #expect(e.purgeSeqno(vb) == SeqNo(last.rawValue - 1))
        let batch = try e.changes(vb, since: .zero, limit: 100)
        #expect(batch.records.map(\.key) == [b] && batch.records.last?.meta.bySeqno == last && batch.lastSeqno == last)
        // A write after it: the kept tombstone is an ordinary one again.
        _ = try e.store(
            .set, vb, keyInVBucket(vb, e, prefix: "c"), value: bytes("v"), flags: 0, expiry: 0, datatype: .raw,
            cas: .zero)
        try waitAllPersisted(e)
        #expect(e.runTombstonePurger() == 1)
        #expect(e.purgeSeqno(vb) == last && e.stats().tombstones == 0)
    }

    /// A key deleted, purged and written again within one flusher batch keeps its new row: the purge deletes only the
    /// row holding the purged version.
    @Test func aKeyWrittenAgainKeepsItsNewRow() throws {
        let clock = ManualWallClock()
        let e = try open(clock)
        try set(e, "x")
        try del(e, "x")
        try fenceEveryVBucket(e)
        try waitAllPersisted(e)
        clock.advance(seconds: 4 * Self.day)
        e.pauseFlusher()
        #expect(e.runTombstonePurger() == 1)
        try set(e, "x", "reborn")
        e.resumeFlusher()
        try waitAllPersisted(e)
        #expect(e.shutdown() == 0)
        let e2 = try open(clock)
        defer { e2.shutdown() }
        #expect(try e2.get(vbOf(key("x"), e2), key("x")).value == bytes("reborn"))
        #expect(try e2.getMeta(vbOf(key("x"), e2), key("x")).revSeqno == RevSeqNo(3))
    }
    /// A failing disk keeps the purge's deletions in the flusher's retried batch: nothing is lost or written twice,
    /// and once the disk works the rows are gone and the purge seqno is on disk.
    @Test func aFailedCommitRetriesThePurge() throws {
        let clock = ManualWallClock()
        var purges: [SeqNo] = []
        do {
            let e = try open(clock)
            for i in 0..<8 { try set(e, "f\(i)") }
            for i in 0..<8 { try del(e, "f\(i)") }
            try fenceEveryVBucket(e)
            try waitAllPersisted(e)
            clock.advance(seconds: 4 * Self.day)
            e.core.failAllCommits.store(true, ordering: .sequentiallyConsistent)
            #expect(e.runTombstonePurger() == 8)
            #expect(eventually { e.persistenceFailure != nil })
            e.core.failAllCommits.store(false, ordering: .sequentiallyConsistent)
            #expect(eventually { e.persistenceFailure == nil })
            purges = (0..<4).map { e.purgeSeqno(VBucketID(UInt16($0))) }
            #expect(e.shutdown() == 0)
        }
        let db = try RawSQLite(dir.dataFile)
        #expect(try db.rows("SELECT count(*), x'' FROM items")[0].0 == 4)  // the fences
        let e = try open(clock)
        defer { e.shutdown() }
        #expect((0..<4).map { e.purgeSeqno(VBucketID(UInt16($0))) } == purges)
        #expect(e.stats().tombstones == 0)
    }
    /// The memory a delete-heavy workload leaves behind (the problem ADR 0095 fixes): 50,000 unique keys written and
    /// deleted hold their tombstones' bytes until the purge, and give them all back after it (the figures are
    /// printed for the ADR).
    @Test func deletedKeysGiveTheirMemoryBackWhenPurged() throws {
        let clock = ManualWallClock()
        let e = try open(clock)
        defer { e.shutdown() }
        let empty = e.stats().memUsed
        let n = 50_000
        for i in 0..<n { try set(e, "session::\(i)", "{}") }
        for i in 0..<n { try del(e, "session::\(i)") }
        let unfenced = e.stats().memUsed
        let fences = try fenceEveryVBucket(e)
        try waitAllPersisted(e)
        let deleted = e.stats()
        #expect(deleted.tombstones == n && deleted.currItems == fences)
        let fenceBytes = deleted.memUsed - unfenced
        let held = unfenced - empty
        #expect(held >= n * 40)  // every tombstone holds its item (header, key) until it is purged
        clock.advance(seconds: 3 * Self.day + 1)
        #expect(e.runTombstonePurger() == n)
        let purged = e.stats()
        #expect(purged.tombstones == 0 && purged.memUsed == empty + fenceBytes)
        print("TombstonePurgeTests: \(n) deleted 17-20-byte keys held \(held) B (\(held / n) B each) until purged")
    }
}
