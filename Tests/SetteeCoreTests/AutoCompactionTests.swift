import SetteeCore
import Testing

/// ADR 0159: the auto-compaction decision, without files or sockets.
struct AutoCompactionTests {
    /// A data file of `pages` 4 KiB pages, `free` of them free.
    static func data(pages: Int, free: Int) -> DiskFigures {
        DiskFigures(dataSize: (pages - free) * 4096, actualDiskSize: pages * 4096, pages: pages, freePages: free)
    }

    static let big = 10_000  // 40 MiB

    @Test func couchbaseDefaultsAreThirtyPercentForBoth() {
        let s = AutoCompaction.Settings()
        #expect(s.databasePercentage == 30 && s.viewPercentage == 30)
        #expect(s.databaseSize == nil && s.viewSize == nil && !s.parallelDBAndViewCompaction)
        #expect(s.errors.isEmpty)
    }

    @Test func theDataFileIsDueAtItsFreePagesThreshold() {
        let s = AutoCompaction.Settings()
        let fill = AutoCompaction.Fill(unusedPercent: 5, atPages: Self.big)
        #expect(AutoCompaction.decide(s, .init(data: Self.data(pages: Self.big, free: 2_999), fill: fill)) == .idle)
        #expect(
            AutoCompaction.decide(s, .init(data: Self.data(pages: Self.big, free: 3_000), fill: fill))
                == .compact(views: false, repackAtUnusedPercent: 30))
        // Off ("undefined"): never due, never measured.
        var off = s
        off.databasePercentage = nil
        #expect(AutoCompaction.decide(off, .init(data: Self.data(pages: Self.big, free: 9_000))) == .idle)
        // Running already: nothing new.
        #expect(
            AutoCompaction.decide(s, .init(data: Self.data(pages: Self.big, free: 9_000), compacting: true)) == .idle)
        // A small file is never due, whatever its share of free pages.
        #expect(AutoCompaction.decide(s, .init(data: Self.data(pages: 31, free: 30))) == .idle)
    }

    /// The unused share of item pages (what a repack gives back, ADR 0158) counts as fragmentation, once measured;
    /// it is measured when never measured and again only after the file grew by 10 % of its pages.
    @Test func theItemPagesFillIsMeasuredAfterGrowthAndCounts() {
        let s = AutoCompaction.Settings(databasePercentage: 20)
        let d = Self.data(pages: Self.big, free: 0)
        #expect(AutoCompaction.decide(s, .init(data: d)) == .measureFill)
        let measured = AutoCompaction.Fill(unusedPercent: 19, atPages: Self.big)
        #expect(AutoCompaction.decide(s, .init(data: d, fill: measured)) == .idle)
        #expect(AutoCompaction.decide(s, .init(data: Self.data(pages: 10_999, free: 0), fill: measured)) == .idle)
        #expect(
            AutoCompaction.decide(s, .init(data: Self.data(pages: 11_000, free: 0), fill: measured)) == .measureFill)
        let sparse = AutoCompaction.Fill(unusedPercent: 20, atPages: Self.big)
        #expect(
            AutoCompaction.decide(s, .init(data: d, fill: sparse)) == .compact(views: false, repackAtUnusedPercent: 20))
    }

    @Test func sizeThresholdsCountWastedBytes() {
        let s = AutoCompaction.Settings(databasePercentage: nil, databaseSize: 8 << 20, viewPercentage: nil)
        let fill = AutoCompaction.Fill(unusedPercent: 0, atPages: Self.big)
        // 2,047 free pages of 4 KiB: 8 MiB less 4 KiB.
        #expect(AutoCompaction.decide(s, .init(data: Self.data(pages: Self.big, free: 2_047), fill: fill)) == .idle)
        #expect(
            AutoCompaction.decide(s, .init(data: Self.data(pages: Self.big, free: 2_048), fill: fill))
                == .compact(views: false, repackAtUnusedPercent: Limits.compactionRepackUnusedPercent))
        // Unused space inside item pages counts too: 25 % of 40 MiB in use is 10 MiB.
        let sparse = AutoCompaction.Fill(unusedPercent: 25, atPages: Self.big)
        #expect(
            AutoCompaction.decide(s, .init(data: Self.data(pages: Self.big, free: 0), fill: sparse))
                == .compact(views: false, repackAtUnusedPercent: Limits.compactionRepackUnusedPercent))
    }

    @Test func viewIndexesAreDueByTheirOwnThreshold() {
        let s = AutoCompaction.Settings(databasePercentage: 30, viewPercentage: 50)
        let quiet = Self.data(pages: Self.big, free: 0)
        let fill = AutoCompaction.Fill(unusedPercent: 0, atPages: Self.big)
        #expect(
            AutoCompaction.decide(s, .init(data: quiet, views: Self.data(pages: 1_000, free: 499), fill: fill)) == .idle
        )
        #expect(
            AutoCompaction.decide(s, .init(data: quiet, views: Self.data(pages: 1_000, free: 500), fill: fill))
                == .compact(views: true, repackAtUnusedPercent: 30))
        let viewSize = AutoCompaction.Settings(databasePercentage: nil, viewPercentage: nil, viewSize: 1 << 20)
        #expect(
            AutoCompaction.decide(viewSize, .init(data: quiet, views: Self.data(pages: 1_000, free: 256)))
                == .compact(views: true, repackAtUnusedPercent: Limits.compactionRepackUnusedPercent))
    }

    @Test func outOfRangeSettingsAreNamed() {
        let bad = AutoCompaction.Settings(databasePercentage: 1, databaseSize: 0, viewPercentage: 101, viewSize: -5)
        #expect(
            bad.errors.map(\.0) == [
                "databaseFragmentationThreshold[percentage]", "databaseFragmentationThreshold[size]",
                "viewFragmentationThreshold[percentage]", "viewFragmentationThreshold[size]",
            ])
        #expect(AutoCompaction.Settings(databasePercentage: 2, viewPercentage: 100).errors.isEmpty)
    }

    /// Seeded: whatever the figures (hostile ones included: negative, overflowing), the decision never traps, a
    /// compaction is decided only when a configured trigger holds, and with every trigger off nothing happens.
    @Test func seededFiguresNeverTrapAndOnlyATriggerCompacts() {
        let seed = UInt64.random(in: 1...UInt64.max)
        print("AutoCompactionTests seed \(seed)")
        var rng = SplitMix64(seed: seed)
        func pick(_ values: [Int]) -> Int { values[Int(rng.next() % UInt64(values.count))] }
        let extremes = [0, 1, -1, 31, 32, 4096, 10_000, 1 << 40, Int.max, Int.min]
        for round in 0..<20_000 {
            let pages = round % 3 == 0 ? pick(extremes) : Int(rng.next() % 100_000)
            let free = round % 5 == 0 ? pick(extremes) : Int(rng.next() % UInt64(max(1, pages &+ 1)))
            let used = round % 7 == 0 ? pick(extremes) : max(0, pages &- free) &* 4096
            let d = DiskFigures(dataSize: used, actualDiskSize: max(0, pages) &* 4096, pages: pages, freePages: free)
            let v = DiskFigures(
                dataSize: Int(rng.next() % 1_000_000), actualDiskSize: pick(extremes),
                pages: Int(rng.next() % 1_000), freePages: Int(rng.next() % 1_000))
            let fill =
                rng.next() % 2 == 0
                ? nil : AutoCompaction.Fill(unusedPercent: pick([0, 10, 50, 100, -3, 250]), atPages: pick(extremes))
            let s = AutoCompaction.Settings(
                databasePercentage: rng.next() % 4 == 0 ? nil : Int(2 + rng.next() % 99),
                databaseSize: rng.next() % 2 == 0 ? nil : pick([1, 1 << 20, 1 << 30]),
                viewPercentage: rng.next() % 4 == 0 ? nil : Int(2 + rng.next() % 99),
                viewSize: rng.next() % 2 == 0 ? nil : pick([1, 1 << 20]))
            let files = AutoCompaction.Files(data: d, views: v, fill: fill)
            let decision = AutoCompaction.decide(s, files)
            let off = AutoCompaction.Settings(
                databasePercentage: nil, databaseSize: nil, viewPercentage: nil, viewSize: nil)
            #expect(AutoCompaction.decide(off, files) == .idle, "seed \(seed) round \(round)")
            if case .compact(let views, _) = decision {
                let viewTrigger =
                    (s.viewPercentage.map { v.fragmentation >= $0 } ?? false) || s.viewSize != nil
                let dataTrigger =
                    (s.databasePercentage.map { max(d.fragmentation, fill?.unusedPercent ?? 0) >= $0 } ?? false)
                    || s.databaseSize != nil
                #expect(views ? viewTrigger : dataTrigger, "seed \(seed) round \(round): \(s) \(files)")
            }
        }
    }
}
