import Foundation
import Logging
import SetteeCore
import SetteeJSON
import SetteeRegistry
import SetteeStorage
import Synchronization

/// This node's view index files, as a compaction and the bucket stats see them (ADR 0154). The views live in a shell
/// the admin API does not import; `settee-server` hands its `NodeViews` over through this.
public protocol ViewIndexFiles: Sendable {
    /// Design documents of `bucket` that have an index file here, in the order a compaction visits them.
    func indexedDesignDocuments(bucket: String) -> [String]
    /// One index file's figures; nil when it has none (yet).
    func diskFigures(bucket: String, designDocument: String) -> DiskFigures?
    /// All of `bucket`'s index files' figures summed (`couch_views_*`).
    func diskFigures(bucket: String) -> DiskFigures
    /// One compaction step of that index file (blocking): pages given back, free pages left.
    func compactStep(bucket: String, designDocument: String, maxPages: Int) throws -> (released: Int, remaining: Int)
}

/// The compactions running on this node, one per bucket at most (`POST …/controller/compactBucket`,
/// `compactDatabases`, `cancelBucketCompaction`; shown in `/pools/default/tasks`). Each is a `CompactionRun` (pure)
/// driven here: a step on a blocking-pool thread (the file's own writer does it: the flusher, or the view index's
/// worker), then the run's pause on the task's clock; a cancel is seen between two steps.
public final class BucketCompactions: Sendable {
    private struct Running: Sendable {
        var run: CompactionRun
        var cancelled = false
        /// Where the repack of the data file's rows is (`BucketEngine.repackStep`): rowids up to `repackAfter` are
        /// done; `repackUpTo` is the table's end when the repack began (nil before its first step).
        var repackAfter: Int64 = 0
        var repackUpTo: Int64?
        /// Rows the repack moved, and the span of rowids its steps covered (counted in the run's progress with the
        /// pages released, so the log can tell pages from rows).
        var rowsRepacked = 0
        var repackSpan = 0
    }
    private let running = Mutex<[String: Running]>([:])
    let views: (any ViewIndexFiles)?
    private let logger: Logger

    /// `views`: this node's view index files (nil: none served here).
    public init(views: (any ViewIndexFiles)?, logger: Logger) {
        self.views = views
        self.logger = logger
    }

    /// Starts compacting `bucket`'s data file and, with `includeViews`, its view indexes, in the background. False
    /// when one already runs for that bucket (it goes on; nothing new starts). The data file's rows are repacked
    /// first when its item pages are at least `repackAtUnusedPercent` unused (ADR 0158; an auto-compaction passes
    /// its threshold, ADR 0159). `keepsWAL`: the data file's WAL is left at its size rather than truncated (an
    /// auto-compaction's, ADR 0159; a request's gives everything back).
    func start(
        bucket: String, engine: BucketEngine, includeViews: Bool,
        repackAtUnusedPercent: Int = Limits.compactionRepackUnusedPercent, keepsWAL: Bool = false
    ) async -> Bool {
        let views = includeViews ? self.views : nil
        let files: [(CompactionRun.File, freePages: Int)] = await BlockingPool.run {
            var files: [(CompactionRun.File, freePages: Int)] = []
            // Rows repacked first when the item pages are mostly empty (ADR 0158), then the pages freed given back.
            if let unused = engine.itemsUnusedPercent(), unused >= repackAtUnusedPercent {
                files.append((.repack, 1))
            }
            files.append((.data, engine.diskFigures()?.freePages ?? 0))
            for ddoc in views?.indexedDesignDocuments(bucket: bucket) ?? [] {
                files.append(
                    (
                        .view(designDocument: ddoc),
                        views?.diskFigures(bucket: bucket, designDocument: ddoc)?.freePages ?? 0
                    ))
            }
            return files
        }
        let started = running.withLock { r -> Bool in
            guard r[bucket] == nil else { return false }
            r[bucket] = Running(run: CompactionRun(files: files))
            return true
        }
        guard started else { return false }
        logger.info("compaction started", metadata: ["bucket": "\(bucket)", "files": "\(files.count)"])
        Task { await self.drive(bucket: bucket, engine: engine, views: views, keepsWAL: keepsWAL) }
        return true
    }

    /// Asks `bucket`'s compaction to stop after its current step. False when none runs.
    func cancel(bucket: String) -> Bool {
        running.withLock { r in
            guard r[bucket] != nil else { return false }
            r[bucket]?.cancelled = true
            return true
        }
    }

    /// The run of `bucket` while one goes (tests).
    func run(of bucket: String) -> CompactionRun? { running.withLock { $0[bucket]?.run } }

    private func drive(bucket: String, engine: BucketEngine, views: (any ViewIndexFiles)?, keepsWAL: Bool) async {
        while true {
            let directive = running.withLock { r -> CompactionRun.Directive in
                guard var item = r[bucket], !item.cancelled else { return .done }
                defer { r[bucket] = item }
                return item.run.next()
            }
            switch directive {
            case .done:
                let ended = running.withLock { r in
                    defer { r[bucket] = nil }
                    return r[bucket]
                }
                let run = ended?.run
                logger.info(
                    "compaction ended",
                    metadata: [
                        "bucket": "\(bucket)",
                        "pagesReleased": "\(max(0, (run?.pagesReleased ?? 0) - (ended?.repackSpan ?? 0)))",
                        "rowsRepacked": "\(ended?.rowsRepacked ?? 0)",
                        "failures": "\(run?.failures.map { "\($0.file): \($0.message)" } ?? [])",
                    ])
                return
            case .pause(let ms):
                try? await Task.sleep(for: .milliseconds(ms))
            case .step(.repack, _):
                let (after, upTo) = running.withLock { r in (r[bucket]?.repackAfter ?? 0, r[bucket]?.repackUpTo) }
                let outcome: Result<(moved: Int, through: Int64, upTo: Int64), any Error> = await BlockingPool.run {
                    Result { try engine.repackStep(after: after, upTo: upTo) }
                }
                running.withLock { r in
                    switch outcome {
                    case .success(let step):
                        let span = step.moved == 0 ? 0 : Int(clamping: step.through - after)
                        r[bucket]?.repackAfter = step.through
                        r[bucket]?.repackUpTo = step.upTo
                        r[bucket]?.rowsRepacked += step.moved
                        r[bucket]?.repackSpan += span
                        r[bucket]?.run.stepped(
                            released: span, remaining: Int(clamping: max(0, step.upTo - step.through)))
                    case .failure(let error): r[bucket]?.run.failed("\(error)")
                    }
                }
            case .step(let file, let maxPages):
                let outcome: Result<(released: Int, remaining: Int), any Error> = await BlockingPool.run {
                    Result {
                        switch file {
                        case .repack: return (0, 0)  // stepped by the arm above
                        case .data: return try engine.compactStep(maxPages: maxPages, keepsWAL: keepsWAL)
                        case .view(let ddoc):
                            guard let views else { return (0, 0) }
                            return try views.compactStep(bucket: bucket, designDocument: ddoc, maxPages: maxPages)
                        }
                    }
                }
                running.withLock { r in
                    switch outcome {
                    case .success(let step): r[bucket]?.run.stepped(released: step.released, remaining: step.remaining)
                    case .failure(let error): r[bucket]?.run.failed("\(error)")
                    }
                }
            }
        }
    }

    /// The running compactions as `/pools/default/tasks` entries, as ns_server shows them: `bucket_compaction` while
    /// the data file is compacted, `view_compaction` (with `designDocument`) while an index is; `changesDone` and
    /// `totalChanges` count free pages, `progress` is their percent.
    func tasksJSON() -> [JSON] {
        running.withLock { r in
            r.keys.sorted().compactMap { bucket -> JSON? in
                guard let item = r[bucket] else { return nil }
                let run = item.run
                var fields: [(String, JSON)] = []
                switch run.currentFile {
                case .view(let ddoc):
                    fields += [("type", "view_compaction"), ("designDocument", .string("_design/" + ddoc))]
                case .repack, .data, nil:
                    fields.append(("type", "bucket_compaction"))
                }
                let path = "/pools/default/buckets/" + PercentEncoding.encode(bucket)
                fields += [
                    ("status", "running"), ("bucket", .string(bucket)),
                    ("changesDone", .number(Double(run.pagesReleased))),
                    ("totalChanges", .number(Double(run.totalPages))), ("progress", .number(Double(run.progress))),
                    ("recommendedRefreshPeriod", .number(2)), ("cancellable", true),
                    ("cancelURI", .string(path + "/controller/cancelBucketCompaction")),
                ]
                return .object(fields)
            }
        }
    }
}
