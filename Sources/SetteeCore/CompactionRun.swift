/// One compaction of a bucket on one node (`POST …/controller/compactBucket`, ADR 0154): its data file, then each of
/// its view index files, given back their free pages a step at a time with a pause between steps. Pure: the caller
/// performs each directive (a step on the file's own writer thread, a sleep) and reports the result.
///
/// ```
///   next() ─► .step(file) ─► stepped(result) ─► next() ─► .pause ─► next() ─► .step(file) … ─► .done
///                                   └── nothing left, nothing moved, or the step cap: on to the next file
/// ```
/// Invariants:
/// 1. Files are compacted one after the other, in the order given; each is stepped at most
///    `Limits.compactionMaxStepsPerFile` times, so a run ends even under a writer that frees pages as fast.
/// 2. Between two steps there is always a pause (`Limits.compactionStepPauseMilliseconds`).
/// 3. `pagesReleased <= totalPages`, so `progress` stays within 0-100.
public struct CompactionRun: Sendable, Equatable {
    /// A file of the bucket: its data file or a design document's view index.
    public enum File: Sendable, Equatable, Hashable {
        /// The data file's rows, repacked into full pages (ADR 0158): before `.data` when its pages are mostly empty.
        /// Its steps count the span of rowids covered, not pages.
        case repack
        case data
        case view(designDocument: String)
    }

    /// What the caller does next.
    public enum Directive: Sendable, Equatable {
        /// Give back at most `maxPages` free pages of `file` (one transaction); for `.repack`, move the next
        /// `Limits.compactionRowsPerStep` rows.
        case step(File, maxPages: Int)
        case pause(milliseconds: Int)
        /// Every file is done.
        case done
    }

    public let files: [File]
    public private(set) var current = 0
    public private(set) var stepsOnCurrent = 0
    /// Free pages given back so far.
    public private(set) var pagesReleased = 0
    /// Free pages still known per file (from the start's figures, then from each step's answer).
    public private(set) var remaining: [Int]
    /// Files whose step failed, with the error (the run goes on with the next file).
    public private(set) var failures: [(file: File, message: String)] = []
    private var pauseDue = false

    public static func == (a: CompactionRun, b: CompactionRun) -> Bool {
        a.files == b.files && a.current == b.current && a.pagesReleased == b.pagesReleased
            && a.remaining == b.remaining && a.pauseDue == b.pauseDue
            && a.failures.map(\.message) == b.failures.map(\.message)
    }

    /// `files` with their free pages when the run starts (for `.repack`, the span of rowids to cover, or 1 when
    /// not known yet).
    public init(files: [(File, freePages: Int)]) {
        self.files = files.map(\.0)
        self.remaining = files.map { max(0, $0.freePages) }
    }

    /// Free pages this run has given back or still means to: the `totalChanges` of its task.
    public var totalPages: Int { pagesReleased + remaining.reduce(0, +) }

    /// Percent done, 0-100 (100 with nothing to do).
    public var progress: Int {
        let total = totalPages
        return total == 0 ? 100 : min(100, pagesReleased * 100 / total)
    }

    /// The file being compacted; nil once done.
    public var currentFile: File? { current < files.count ? files[current] : nil }

    public mutating func next() -> Directive {
        guard let file = currentFile else { return .done }
        if pauseDue {
            pauseDue = false
            return .pause(milliseconds: Limits.compactionStepPauseMilliseconds)
        }
        return .step(file, maxPages: Limits.compactionPagesPerStep)
    }

    /// The last step's answer: `released` pages given back, `remaining` free pages left in the file.
    public mutating func stepped(released: Int, remaining left: Int) {
        guard current < files.count else { return }
        pagesReleased += max(0, released)
        remaining[current] = max(0, left)
        stepsOnCurrent += 1
        if left <= 0 || released <= 0 || stepsOnCurrent >= Limits.compactionMaxStepsPerFile {
            advance()
        }
        pauseDue = currentFile != nil
    }

    /// The last step failed (disk full, I/O error, the file went away): that file is left as it is (each step is
    /// its own transaction, so it is whole) and the run goes on with the next one.
    public mutating func failed(_ message: String) {
        guard let file = currentFile else { return }
        failures.append((file, message))
        advance()
        pauseDue = currentFile != nil
    }

    private mutating func advance() {
        if current < remaining.count { remaining[current] = 0 }
        current += 1
        stepsOnCurrent = 0
    }
}
