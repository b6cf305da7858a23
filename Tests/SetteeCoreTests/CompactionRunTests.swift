import SetteeCore
import Testing

/// `CompactionRun` (ADR 0154): files one after the other, a pause between every two steps, a file left once it has
/// nothing free, moved nothing or reached the step cap, a failed file skipped, progress within 0-100; and the disk
/// figures' fragmentation and sums.
@Suite struct CompactionRunTests {
    @Test func stepsEachFileInTurnWithAPauseBetweenSteps() {
        var run = CompactionRun(files: [(.data, freePages: 1500), (.view(designDocument: "d"), freePages: 10)])
        #expect(run.totalPages == 1510 && run.progress == 0)
        #expect(run.next() == .step(.data, maxPages: Limits.compactionPagesPerStep))
        run.stepped(released: 1024, remaining: 476)
        #expect(run.progress == 1024 * 100 / 1510)
        #expect(run.next() == .pause(milliseconds: Limits.compactionStepPauseMilliseconds))
        #expect(run.next() == .step(.data, maxPages: Limits.compactionPagesPerStep))
        run.stepped(released: 476, remaining: 0)
        #expect(run.currentFile == .view(designDocument: "d"))
        #expect(run.next() == .pause(milliseconds: Limits.compactionStepPauseMilliseconds))
        #expect(run.next() == .step(.view(designDocument: "d"), maxPages: Limits.compactionPagesPerStep))
        run.stepped(released: 10, remaining: 0)
        #expect(run.next() == .done)
        #expect(run.next() == .done)
        #expect(run.progress == 100 && run.pagesReleased == 1510)
    }

    /// Proves a repack (ADR 0158) goes first, steps until its span is covered, and the data file's page release
    /// follows with the pages the repack freed (its remaining taken from each step's answer, not the start's figure).
    @Test func aRepackGoesBeforeThePageReleaseOfTheDataFile() {
        var run = CompactionRun(files: [(.repack, freePages: 1), (.data, freePages: 0)])
        #expect(run.next() == .step(.repack, maxPages: Limits.compactionPagesPerStep))
        run.stepped(released: 2048, remaining: 952)
        #expect(run.currentFile == .repack)
        #expect(run.next() == .pause(milliseconds: Limits.compactionStepPauseMilliseconds))
        #expect(run.next() == .step(.repack, maxPages: Limits.compactionPagesPerStep))
        run.stepped(released: 952, remaining: 0)
        #expect(run.currentFile == .data)
        _ = run.next()
        #expect(run.next() == .step(.data, maxPages: Limits.compactionPagesPerStep))
        run.stepped(released: 700, remaining: 0)
        #expect(run.next() == .done && run.progress == 100)
    }

    @Test func aFileThatGainsFreePagesMovesTheTotalAndProgressStaysInRange() {
        var run = CompactionRun(files: [(.data, freePages: 100)])
        _ = run.next()
        // A writer freed more meanwhile: the answer's remaining raises the total.
        run.stepped(released: 100, remaining: 300)
        #expect(run.totalPages == 400 && run.progress == 25)
        _ = run.next()
        _ = run.next()
        run.stepped(released: 0, remaining: 300)
        // Nothing moved (another writer holds the pages): the file is left, the run ends at 100.
        #expect(run.next() == .done && run.progress == 100)
    }

    @Test func aFileIsSteppedAtMostTheCapAndAFailureSkipsIt() {
        var run = CompactionRun(files: [(.data, freePages: .max / 2), (.view(designDocument: "v"), freePages: 5)])
        var steps = 0
        while case .step(.data, _) = run.next() {
            steps += 1
            run.stepped(released: 1, remaining: .max / 4)
            if case .pause = run.next() {} else { Issue.record("no pause between steps") }
        }
        #expect(steps == Limits.compactionMaxStepsPerFile)
        #expect(run.currentFile == .view(designDocument: "v"))
        run.failed("disk I/O error")
        #expect(run.next() == .done)
        #expect(run.failures.map(\.message) == ["disk I/O error"])
        #expect((0...100).contains(run.progress))
    }

    @Test func nothingToDoIsDoneAtOnce() {
        var run = CompactionRun(files: [])
        #expect(run.next() == .done && run.progress == 100)
    }

    @Test func fragmentationIsTheFreePagesShareAndSumsSaturate() {
        #expect(DiskFigures().fragmentation == 0)
        #expect(DiskFigures(dataSize: 4096, actualDiskSize: 10 << 20, pages: 10, freePages: 9).fragmentation == 90)
        #expect(DiskFigures(pages: 3, freePages: 1).fragmentation == 33)
        let sum =
            DiskFigures(dataSize: 1, actualDiskSize: .max, pages: 2, freePages: 1)
            + DiskFigures(dataSize: 2, actualDiskSize: 5, pages: 2, freePages: 0)
        #expect(sum == DiskFigures(dataSize: 3, actualDiskSize: .max, pages: 4, freePages: 1))
        #expect(sum.fragmentation == 25)
        // Saturated sums (or any figures) never trap: a free-page count past Int.max / 100 is still a share.
        #expect(DiskFigures(pages: .max, freePages: .max).fragmentation == 100)
        #expect(DiskFigures(pages: .max, freePages: .max / 2).fragmentation == 50)
        #expect(DiskFigures(pages: 10, freePages: .max).fragmentation == 100)
    }
}
