import Foundation
import SetteeCore
import SetteeJSON
import Testing

@testable import SetteeGateway

/// `SequenceAllocator`: batches of gateway sequences reserved with one counter increment (ADR 0045).
@Suite struct SequenceAllocatorTests {
    static let second: Int64 = 1_000_000_000
    func allocator(maxBatch: UInt64 = 1000) -> SequenceAllocator {
        SequenceAllocator(maxBatch: maxBatch, growInterval: Self.second, releaseWait: 3 * Self.second / 2)
    }

    /// Proves an idle gateway reserves one sequence at a time (the counter's new value is the sequence), and a
    /// reserve at least `growInterval` after the last one keeps the batch at one.
    @Test func idleReservesOneAtATime() {
        var a = allocator()
        #expect(a.take(now: 0) == .reserve(count: 1))
        #expect(a.reserved(through: 7, count: 1, now: 0) == .sequence(7))
        #expect(a.available == 0)
        #expect(a.take(now: 2 * Self.second) == .reserve(count: 1))
        #expect(a.reserved(through: 9, count: 1, now: 2 * Self.second) == .sequence(9))
    }

    /// Proves reserves closer than `growInterval` double the batch up to `maxBatch`, and the sequences of a batch
    /// are handed out locally, in order, without another reserve; sequences below the batch (other gateways') are
    /// never handed out.
    @Test func batchesGrowUnderLoadAndAreHandedOutLocally() {
        var a = allocator(maxBatch: 6)
        var counter: UInt64 = 0
        var sizes: [UInt64] = []
        var handed: [UInt64] = []
        var now: Int64 = 0
        for _ in 0..<30 {
            now += 1_000_000
            switch a.take(now: now) {
            case .sequence(let s): handed.append(s)
            case .reserve(let n):
                sizes.append(n)
                counter += 100 + n  // another gateway took 100 in between
                handed.append(Self.sequence(a.reserved(through: counter, count: n, now: now)))
            case .wait: Issue.record("no reserve is in flight")
            }
        }
        #expect(sizes.prefix(5) == [1, 2, 4, 6, 6])
        #expect(Set(handed).count == handed.count)
        #expect(handed == handed.sorted())
        // Every handed-out sequence lies in one of this gateway's batches (top-n+1...top).
        #expect(handed.allSatisfy { $0 > 100 })
    }

    /// Proves one increment at a time: while a reserve is in flight another taker waits; a failed reserve lets the
    /// next taker reserve again.
    @Test func oneReserveInFlight() {
        var a = allocator()
        #expect(a.take(now: 0) == .reserve(count: 1))
        #expect(a.take(now: 0) == .wait)
        a.reserveFailed()
        #expect(a.take(now: 0) == .reserve(count: 1))
        #expect(a.reserved(through: 1, count: 1, now: 0) == .sequence(1))
        #expect(a.take(now: 1) == .reserve(count: 2))
        #expect(a.take(now: 1) == .wait)
        #expect(a.reserved(through: 3, count: 2, now: 1) == .sequence(2))
        #expect(a.take(now: 2) == .sequence(3))
    }

    /// Proves what a batch still holds `releaseWait` after its reserve is released (not before), the batch
    /// shrinks by what went unused (back to one when none of it was used), and nothing is released twice.
    @Test func unusedSequencesAreReleasedAfterTheWait() {
        var a = allocator()
        var now: Int64 = 0
        var counter: UInt64 = 0
        // Grow to a batch of 8 (1, 2, 4, 8), taking one sequence of the last batch.
        for n in [1, 2, 4, 8] as [UInt64] {
            #expect(a.take(now: now) == .reserve(count: n))
            counter += n
            _ = a.reserved(through: counter, count: n, now: now)
            for _ in 1..<(n == 8 ? 1 : n) { _ = a.take(now: now) }
            now += 1_000
        }
        #expect(a.available == 7)
        let reservedAt = now - 1_000
        #expect(a.releaseDue(now: now) == .later(at: reservedAt + 3 * Self.second / 2))
        #expect(a.releaseDue(now: reservedAt + 3 * Self.second / 2) == .release(9...15))
        #expect(a.batchSize == 1)  // 7 of 8 unused: 8 - 7
        #expect(a.releaseDue(now: now + 10 * Self.second) == .none)
        #expect(a.releaseAll() == nil)

        // Half a batch used: the next one is smaller by the unused half.
        var b = allocator()
        _ = b.take(now: 0)
        _ = b.reserved(through: 1, count: 1, now: 0)
        _ = b.take(now: 1)
        _ = b.reserved(through: 3, count: 2, now: 1)
        _ = b.take(now: 2)
        #expect(b.take(now: 3) == .reserve(count: 4))
        _ = b.reserved(through: 7, count: 4, now: 3)
        _ = b.take(now: 4)  // 5
        #expect(b.releaseAll() == 6...7)
        #expect(b.batchSize == 2)
        // Only the reserver's own sequence used: back to one.
        #expect(b.take(now: 5) == .reserve(count: 4))
        _ = b.reserved(through: 11, count: 4, now: 5)
        _ = b.releaseDue(now: 5 + 2 * Self.second)
        #expect(b.batchSize == 1)
        #expect(b.available == 0)
    }

    /// Proves a counter that went backwards under a gateway (an operator reset it) never makes it repeat one of
    /// its own sequences, and that the gateway carries the counter past them before it hands out another (one
    /// more increment, with the others waiting), so a second gateway on the same counter cannot take a sequence
    /// the first one used or is using.
    @Test func aResetCounterIsCarriedPastTheGatewaysSequences() {
        var a = allocator()
        var b = allocator()
        var counter: UInt64 = 0
        #expect(a.take(now: 0) == .reserve(count: 1))
        counter += 10  // others took 9 before
        #expect(a.reserved(through: counter, count: 1, now: 0) == .sequence(10))
        counter = 3  // an operator resets _sync:seq
        #expect(a.take(now: 2 * Self.second) == .reserve(count: 1))
        counter += 1
        #expect(a.reserved(through: counter, count: 1, now: 2 * Self.second) == .reserveMore(count: 7))
        #expect(a.take(now: 2 * Self.second) == .wait)  // the increment is still in flight
        counter += 7
        #expect(a.reserved(through: counter, count: 7, now: 2 * Self.second) == .sequence(11))
        #expect(a.available == 0)
        #expect(b.take(now: 2 * Self.second) == .reserve(count: 1))
        counter += 1
        #expect(b.reserved(through: counter, count: 1, now: 2 * Self.second) == .sequence(12))
        // A larger batch carries the next batch's worth past the reset too.
        var c = allocator()
        _ = c.take(now: 0)
        #expect(c.reserved(through: 1, count: 1, now: 0) == .sequence(1))
        #expect(c.take(now: 1) == .reserve(count: 2))
        #expect(c.reserved(through: 3, count: 2, now: 1) == .sequence(2))
        #expect(c.take(now: 2) == .sequence(3))
        #expect(c.take(now: 3) == .reserve(count: 4))
        #expect(c.reserved(through: 2, count: 4, now: 3) == .reserveMore(count: 5))  // 4..7 of which 4 is new
        #expect(c.reserved(through: 7, count: 5, now: 3) == .sequence(4))
        #expect(c.available == 3)
    }

    /// The sequence a reserve answered; records an issue (and answers 0) when it asked for more.
    static func sequence(_ answer: SequenceAllocator.Reserved) -> UInt64 {
        guard case .sequence(let s) = answer else {
            Issue.record("unexpected \(answer) without a counter reset")
            return 0
        }
        return s
    }

    /// Proves the range marker's key: the one-sequence form for one (older gateways read it), the range form for
    /// more; and what a gateway accepts back from the bucket: well-formed, non-empty ranges no longer than a batch.
    @Test(arguments: [
        ("5:9", 5...9 as ClosedRange<UInt64>?), ("1:1", 1...1), ("9:5", nil), ("0:3", nil), ("5", nil), ("5:9:1", nil),
        ("a:9", nil), ("5:", nil), ("-1:4", nil), ("1:1000", 1...1000), ("1:1001", nil),
        ("18446744073709551615:18446744073709551615", 18_446_744_073_709_551_615...18_446_744_073_709_551_615),
        ("1:18446744073709551616", nil),
    ])
    func rangeMarkers(suffix: String, expected: ClosedRange<UInt64>?) {
        #expect(SequenceAllocator.parseRangeMarker(Substring(suffix), maxBatch: 1000) == expected)
    }

    @Test func markerKeys() {
        #expect(SequenceAllocator.markerKey(7...7) == "_sync:unusedSeq:7")
        #expect(SequenceAllocator.markerKey(7...9) == "_sync:unusedSeqs:7:9")
        let key = SequenceAllocator.markerKey(12...40)
        #expect(SequenceAllocator.parseRangeMarker(key.dropFirst("_sync:unusedSeqs:".count), maxBatch: 1000) == 12...40)
    }

    /// Proves, for three gateways sharing one counter with seeded random interleavings of writes, waits and
    /// releases, that no sequence is handed out twice and every sequence up to the counter is either handed out or
    /// released (so every gateway's index closes every gap without abandoning one).
    @Test func gatewaysSharingACounterCoverItExactlyOnce() {
        for seed in UInt64(1)...20 {
            var rng = SplitMix64(seed: seed)
            var counter: UInt64 = 0
            var gateways = (0..<3).map { _ in allocator(maxBatch: 64) }
            var handed: [UInt64] = []
            var released: [UInt64] = []
            var now: Int64 = 0
            for _ in 0..<2000 {
                now += Int64(rng.next() % 400_000_000)
                let g = Int(rng.next() % 3)
                if rng.next() % 5 == 0 {
                    if case .release(let r) = gateways[g].releaseDue(now: now) { released += Array(r) }
                    continue
                }
                switch gateways[g].take(now: now) {
                case .sequence(let s): handed.append(s)
                case .reserve(let n):
                    counter += n
                    handed.append(Self.sequence(gateways[g].reserved(through: counter, count: n, now: now)))
                case .wait: Issue.record("seed \(seed): nothing is in flight")
                }
            }
            for g in gateways.indices { if let r = gateways[g].releaseAll() { released += Array(r) } }
            let all = handed + released
            #expect(Set(all).count == all.count, "seed \(seed): a sequence handed out or released twice")
            #expect(Set(all) == Set(1...counter), "seed \(seed): a sequence neither used nor released")
        }
    }
}

/// Gateway databases sharing one bucket with batched sequence allocation.
@Suite struct SequenceBatchDatabaseTests {
    /// The bucket's `_sync:seq` counter.
    func counter(_ bucket: EmbeddedBucket) async throws -> UInt64 {
        let item = try #require(try await bucket.get("_sync:seq"))
        return try #require(UInt64(String(decoding: item.value, as: UTF8.self)))
    }

    /// A database's stable sequence (`update_seq` of `GET /db/`).
    func stable(_ db: GatewayDatabase) async -> UInt64 {
        let info = await db.info()
        let seq = info.objectValue?.first { $0.0 == "update_seq" }?.1.intValue ?? 0
        return UInt64(clamping: seq)
    }

    /// Proves two gateways writing concurrently on one bucket (batches growing under the load) give every write its
    /// own sequence, both feeds list every document, and, without waiting for the skipped-sequence abandonment
    /// (set to 600 s here), each gateway's stable sequence reaches the counter: every reserved sequence was used or
    /// released (closing a database releases what it held at once).
    @Test func twoGatewaysCoverTheCounter() async throws {
        let options = DatabaseOptions(name: "db", skippedSequenceWaitSeconds: 600)
        let f = try await Fixture.open(options)
        let other = try await GatewayDatabase(options: options, bucket: f.bucket, logger: quietLogger())
        try await withThrowingTaskGroup(of: Void.self) { group in
            for w in 0..<6 {
                let db = w % 2 == 0 ? f.db : other
                group.addTask {
                    for i in 0..<40 { _ = try await db.put("w\(w)-\(i)", body: json(#"{"i":1}"#), user: nil) }
                }
            }
            try await group.waitForAll()
        }
        let top = try await counter(f.bucket)
        #expect(top >= 240)
        for db in [f.db, other] {
            let ok = await eventually(60) {
                let page = try await db.changes(ChangesQuery(), user: nil)
                let seqs = page.rows.map(\.seq.seq)
                let stable = await stable(db)
                return page.rows.count == 240 && Set(seqs).count == 240 && stable == top
            }
            #expect(ok)
        }
        // A burst on one gateway leaves part of a batch reserved; closing it releases the rest at once.
        for i in 0..<20 { _ = try await other.put("burst\(i)", body: json(#"{"i":1}"#), user: nil) }
        await other.close()
        let after = try await counter(f.bucket)
        let t0 = ContinuousClock.now
        let closed = await eventually(60) {
            await stable(f.db) == after
        }
        #expect(closed)
        // Far below the 600 s abandonment: the close released the batch (60 s leaves room for a loaded machine).
        #expect(ContinuousClock.now - t0 < .seconds(60))
        #expect(try await f.db.changes(ChangesQuery(), user: nil).rows.count == 260)
        await f.close()
    }
}
