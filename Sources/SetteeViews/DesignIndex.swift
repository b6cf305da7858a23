import Foundation
import Logging
import SetteeCore
import SetteeSQLite
import SetteeStorage
import SetteeStreams
import Synchronization

/// The incremental index of one design document on one node: a worker thread that owns the
/// document's `JSEngine` (map functions compiled once) and the SQLite writer, driven by the bucket's
/// per-vBucket seqnos.
///
/// States of the worker: idle (waiting) → updating (one pass over all vBuckets) → idle; stopped.
/// Invariants:
/// 1. Only the worker thread touches `runner` and `writer` (JSContext and SQLite connection are
///    single-threaded).
/// 2. One pass indexes every active vBucket from its stored seqno up to at least the high seqno it
///    saw when the pass started, and drops the rows of every vBucket that is no longer active.
/// 3. `completed >= n` means every pass requested with generation `n` is done: a `stale=false`
///    query requests generation `requested + 1` and waits for `completed` to reach it, so it sees
///    every write acknowledged before it was received.
public final class DesignIndex: @unchecked Sendable {
    public let design: DesignDocument
    public let path: String
    let source: any ViewDataSource
    let logger: Logger
    private let condition = NSCondition()
    // Guarded by `condition`.
    private var requested: UInt64 = 0
    private var completed: UInt64 = 0
    private var dirty = false
    private var stopping = false
    private var stopped = false
    private var lastError: ViewError?
    /// The worker's first open of the index file has finished (or failed): before it, the file may not exist yet or
    /// lack its tables, so a query waits for it (`waitUntilOpened`).
    private var opened = false
    private var observerToken: UInt64?
    /// A compaction step the worker runs between two passes (`compactStep`), and its answer.
    private var compactionRequest: Int?
    private var compactionAnswer: Result<(released: Int, remaining: Int), ViewError>?
    /// Raised by the worker after every commit that adds a vBucket to the index or drops one: with the source's
    /// `stateEpoch`, it says when a query's `excludedVBuckets` must be worked out again.
    let indexedGeneration = Atomic<UInt64>(0)
    /// The last `excludedVBuckets` answer and the (state epoch, indexed generation) it was worked out under.
    let exclusion = Mutex<(epoch: UInt64, generation: UInt64, clause: String)?>(nil)

    /// Opens (or creates) the index file and starts the worker. Invalid JavaScript throws before
    /// anything starts.
    public init(design: DesignDocument, directory: String, source: any ViewDataSource, logger: Logger) throws(ViewError)
    {
        self.design = design
        self.source = source
        self.logger = logger
        // One file per design document *and* version of its functions: a replaced design document's
        // new index never shares a file with the old one, which is deleted once its worker stopped.
        let safeName = design.name.utf8.map { String($0, radix: 16) }.joined()
        path = directory + "/" + safeName + "-" + String(design.signature, radix: 16) + ".view.sqlite"
        // Validate on the caller's thread (compile errors surface to the PUT).
        _ = try MapRunner(views: design.views)
        let thread = Thread { [self] in self.workerMain() }
        thread.name = "settee.views.\(design.name)"
        thread.start()
        observerToken = source.addObserver { [weak self] _, _ in self?.markDirty() }
    }

    /// Stops the worker (after its current pass) and waits for it.
    public func stop() {
        if let t = observerToken { source.removeObserver(t) }
        condition.lock()
        stopping = true
        condition.broadcast()
        while !stopped { condition.wait() }
        condition.unlock()
    }

    /// Stops and deletes the index file (design document changed or deleted).
    public func destroy() {
        stop()
        for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) }
    }

    private var isStopping: Bool {
        condition.lock()
        defer { condition.unlock() }
        return stopping
    }

    func markDirty() {
        condition.lock()
        dirty = true
        condition.signal()
        condition.unlock()
    }

    /// Asks for a pass; with `wait`, blocks until it is done (stale=false). Blocking: off event loops.
    public func update(wait: Bool, timeoutSeconds: Double = Limits.viewStaleFalseTimeoutSeconds) throws(ViewError) {
        condition.lock()
        defer { condition.unlock() }
        requested += 1
        let generation = requested
        condition.broadcast()
        guard wait else { return }
        try waitLocked(until: { completed >= generation }, timeoutSeconds: timeoutSeconds, doing: "index update")
        if let e = lastError { throw e }
    }

    /// One step of a compaction of the index file (ADR 0154): at most `maxPages` free pages given back, run by the
    /// worker between two passes (so it never interleaves with a pass's transactions). Blocking: off event loops.
    /// Answers the pages given back and the free pages left; throws when the worker stopped or the step failed.
    public func compactStep(
        maxPages: Int = Limits.compactionPagesPerStep
    ) throws(ViewError) -> (released: Int, remaining: Int) {
        condition.lock()
        defer { condition.unlock() }
        // One step at a time per index (one compaction runs per bucket): a step still queued is waited for, and an
        // answer nobody took (its caller timed out) is dropped.
        while compactionRequest != nil {
            if stopped { throw .storage("index stopped") }
            condition.wait()
        }
        compactionAnswer = nil
        compactionRequest = max(1, maxPages)
        condition.broadcast()
        try waitLocked(
            until: { compactionAnswer != nil }, timeoutSeconds: Limits.viewStaleFalseTimeoutSeconds,
            doing: "index compaction")
        let answer = compactionAnswer
        compactionAnswer = nil
        condition.broadcast()
        switch answer {
        case .success(let step): return step
        case .failure(let error): throw error
        case nil: throw .storage("index stopped")
        }
    }

    /// The index file's figures (`couch_views_*`, ADR 0154) from a short-lived read-only connection; nil while the
    /// file is not there yet. Blocking (a file open): off event loops.
    public func diskFigures() -> DiskFigures? {
        guard FileManager.default.fileExists(atPath: path),
            let conn = try? IndexStore.openReader(path: path)
        else { return nil }
        defer { conn.close() }
        guard let pages = try? conn.pageFigures() else { return nil }
        func bytes(_ p: String) -> Int {
            ((try? FileManager.default.attributesOfItem(atPath: p))?[.size] as? NSNumber)?.intValue ?? 0
        }
        return DiskFigures(
            dataSize: pages.usedBytes, actualDiskSize: bytes(path) + bytes(path + "-wal"), pages: pages.pageCount,
            freePages: pages.freePages)
    }

    /// Runs the requested compaction step on the worker (`condition` not held).
    private func runCompactionStep(_ maxPages: Int, writer: IndexWriter?) {
        let answer: Result<(released: Int, remaining: Int), ViewError>
        if let writer {
            do {
                let step = try writer.db.releaseFreePages(maxPages: maxPages)
                if step.remaining == 0 && (step.released > 0 || step.rewroteFile) {
                    try? writer.db.checkpoint(.truncate)
                }
                answer = .success((step.released, step.remaining))
            } catch {
                logger.error(
                    "view index compaction step failed", metadata: ["ddoc": "\(design.name)", "error": "\(error)"])
                answer = .failure(.storage("compaction: \(error)"))
            }
        } else {
            answer = .failure(.storage("index is not open"))
        }
        condition.lock()
        compactionAnswer = answer
        compactionRequest = nil
        condition.broadcast()
        condition.unlock()
    }

    /// Blocks until the worker has opened (or created) the index file, at most
    /// `Limits.viewStaleFalseTimeoutSeconds`: a query that read the file sooner would find it missing or without its
    /// tables. Blocking: off event loops.
    func waitUntilOpened() throws(ViewError) {
        condition.lock()
        defer { condition.unlock() }
        try waitLocked(until: { opened }, timeoutSeconds: Limits.viewStaleFalseTimeoutSeconds, doing: "index open")
    }

    /// Waits on `condition` (held by the caller) until `done()`, at most `timeoutSeconds`; throws when the worker
    /// stopped first.
    private func waitLocked(until done: () -> Bool, timeoutSeconds: Double, doing: String) throws(ViewError) {
        let deadline = Date(timeIntervalSinceNow: timeoutSeconds)
        while !done() && !stopped {
            if !condition.wait(until: deadline) { throw .timeout("\(doing) did not finish in \(timeoutSeconds)s") }
        }
        if !done() { throw .storage("index stopped") }
    }

    private func workerMain() {
        var runner: MapRunner?
        var writer: IndexWriter?
        var seqnos = IndexedState()
        do {
            runner = try MapRunner(views: design.views)
            let db = try IndexStore.open(path: path, signature: design.signature)
            writer = try IndexWriter(db: db)
            seqnos.positions = try writer!.loadPositions()
            seqnos.expiring = try writer!.loadExpiring()
        } catch {
            logger.error("view index failed to open", metadata: ["ddoc": "\(design.name)", "error": "\(error)"])
            condition.lock()
            lastError = .storage("index failed to open: \(error)")
            condition.unlock()
        }
        // An initial pass builds or resumes the index.
        condition.lock()
        opened = true
        requested += 1
        condition.broadcast()
        condition.unlock()
        while true {
            condition.lock()
            while !stopping && requested == completed && !dirty && compactionRequest == nil { condition.wait() }
            if let pages = compactionRequest, !stopping {
                condition.unlock()
                runCompactionStep(pages, writer: writer)
                continue
            }
            if dirty && requested == completed && !stopping {
                // Background batching: let more mutations arrive, then index them in one pass.
                _ = condition.wait(until: Date(timeIntervalSinceNow: Limits.viewBackgroundUpdateSeconds))
            }
            if stopping {
                stopped = true
                condition.broadcast()
                condition.unlock()
                return
            }
            let target = requested
            dirty = false
            condition.unlock()
            var failure: ViewError? = nil
            if let runner, let writer {
                do {
                    // A purge under a pass's scan (`ViewSourcePurged`) ends it; the next pass finds the stored
                    // position below the purge seqno and rebuilds that vBucket. Purges are rare (once per purge
                    // interval per tombstone), so a few retries are plenty.
                    var attempts = 0
                    while true {
                        do {
                            try pass(runner: runner, writer: writer, seqnos: &seqnos)
                            break
                        } catch let purged as ViewSourcePurged where attempts < Limits.viewPassPurgeRetries {
                            attempts += 1
                            logger.info(
                                "view index rebuilds a vBucket whose tombstones were purged",
                                metadata: ["ddoc": "\(design.name)", "vb": "\(purged.vbucket)"])
                        }
                    }
                } catch {
                    failure = .storage("\(error)")
                    logger.error("view index pass failed", metadata: ["ddoc": "\(design.name)", "error": "\(error)"])
                }
            } else {
                failure = .storage("index is not open")
            }
            condition.lock()
            lastError = failure
            completed = max(completed, target)
            condition.broadcast()
            condition.unlock()
        }
    }

    /// One pass over every vBucket (invariant 2). A pass with many changes in several vBuckets (a first
    /// build, a rebuild) maps on `Limits.viewIndexMapThreads` threads of its own while this one writes.
    private func pass(runner: MapRunner, writer: IndexWriter, seqnos state: inout IndexedState) throws {
        let now = source.nowSeconds()
        var work: [VBucketWork] = []
        var pending: UInt64 = 0
        for vb in 0..<source.vbucketCount {
            // A stop (shutdown, design document replaced) does not wait for a long build to finish;
            // what is committed so far is resumed from next time.
            if isStopping { return }
            let id = VBucketID(UInt16(vb))
            guard let history = source.activeHistory(id) else {
                // Held after an unclean shutdown (ADR 0033): its rows and position stay for its release, which
                // continues its history (queries leave its rows out meanwhile); dropping them made every view of
                // a crashed node rebuild from 0 (ADR 0097).
                if source.isHeld(id) { continue }
                if state.positions[vb] != nil {
                    try writer.db.transaction { () throws(SQLiteError) in try writer.dropVBucket(vb) }
                    indexedGeneration.wrappingAdd(1, ordering: .releasing)
                    state.positions[vb] = nil
                    state.expiring[vb] = nil
                }
                continue
            }
            let high = history.highSeqno.rawValue
            var since = state.positions[vb]?.seqno ?? 0
            if let stored = state.positions[vb],
                !stored.continues(in: history.log, highSeqno: history.highSeqno, purgeSeqno: history.purgeSeqno)
            {
                // The history the index followed ended below what it holds (flushed, failed over, recreated), or
                // tombstones it never saw were purged: index the vBucket again from zero (ADR 0088, ADR 0095).
                try writer.db.transaction { () throws(SQLiteError) in try writer.dropVBucket(vb) }
                indexedGeneration.wrappingAdd(1, ordering: .releasing)
                since = 0
                state.positions[vb] = nil
                state.expiring[vb] = nil
            }
            // A document indexed with a TTL that has passed: scan anyway, the change feed expires it
            // (a deletion with a new seqno) so its rows leave the index without waiting for the pager.
            let expiryDue = state.expiring[vb]?.values.contains { $0 <= now } ?? false
            if since >= high && state.positions[vb] != nil && !expiryDue { continue }
            work.append(
                VBucketWork(
                    vb: vb, since: since, high: high, uuid: history.log.newest.uuid, fresh: state.positions[vb] == nil,
                    purgeFloor: PurgeFloor(history.purgeSeqno)))
            pending &+= high &- since
        }
        if Limits.viewIndexMapThreads > 1 && work.count > 1 && pending >= UInt64(Limits.viewIndexParallelChanges) {
            try parallelPass(work, writer: writer, state: &state)
            return
        }
        var group = WriteGroup()
        defer { try? group.flush(self, writer, &state) }
        for var w in work {
            let id = VBucketID(UInt16(w.vb))
            var since = w.since
            while true {
                let batch = try source.changes(id, since: SeqNo(since), limit: Limits.viewIndexBatchSize)
                try w.check(since: since, purgeSeqno: batch.purgeSeqno)
                let next = max(since, batch.highSeqno.rawValue)
                let mapped = runner.map(batch.records, vb: id)
                group.add(MappedChanges(work: w, records: batch.records, seqno: next, mapped: mapped))
                if group.full { try group.flush(self, writer, &state) }
                if batch.records.isEmpty || next == since || isStopping { break }
                if next >= w.high && batch.records.count < Limits.viewIndexBatchSize { break }
                since = next
            }
        }
        try group.flush(self, writer, &state)
    }

    /// Mapped batches waiting to be written together: one SQLite transaction per
    /// `Limits.viewIndexTransactionChanges` changes rather than one per vBucket batch. Random inserts into
    /// the view B-tree dirty a page per row or so, and every commit writes its dirty pages whole to the WAL:
    /// a transaction per vBucket batch of a few dozen documents wrote each page many times over and
    /// checkpointed (fsync) every few seconds of a build. The bodies are dropped once mapped.
    private struct WriteGroup {
        var batches: [MappedChanges] = []
        var changes = 0
        var full: Bool { changes >= Limits.viewIndexTransactionChanges }

        mutating func add(_ batch: MappedChanges) {
            var b = batch
            for i in b.records.indices { b.records[i].value = [] }
            changes += max(1, b.records.count)
            batches.append(b)
        }

        mutating func flush(_ index: DesignIndex, _ writer: IndexWriter, _ state: inout IndexedState) throws {
            guard !batches.isEmpty else { return }
            let pending = batches
            batches = []
            changes = 0
            try index.apply(pending, writer, &state)
        }
    }

    /// The pass's vBuckets mapped on threads of their own (each with its own `MapRunner`: a JavaScript
    /// context is single-threaded), written here in the order each vBucket's batches were mapped.
    private func parallelPass(_ work: [VBucketWork], writer: IndexWriter, state: inout IndexedState) throws {
        let pipeline = MapPipeline(work: work)
        let views = design.views
        let source = self.source
        let threads = min(Limits.viewIndexMapThreads, work.count)
        for t in 0..<threads {
            let thread = Thread { [self] in
                pipeline.mapperMain(views: views, source: source, stopping: { self.isStopping })
            }
            thread.name = "settee.views.\(design.name).map\(t)"
            pipeline.started()
            thread.start()
        }
        defer { pipeline.cancelAndJoin() }
        var group = WriteGroup()
        while let next = try pipeline.next() {
            group.add(next)
            if group.full || isStopping { try group.flush(self, writer, &state) }
            if isStopping { return }
        }
        try group.flush(self, writer, &state)
    }

    /// Writes `batches` in one transaction; `state` changes only once it committed. Removals and TTL entries
    /// go in change order; the rows are staged (`StagedRows`: a document staged twice keeps its later rows)
    /// and inserted once every removal is done, in the view B-tree's key order. Each vBucket's totals and
    /// last seqno are written once, with the group's last batch of it.
    fileprivate func apply(_ batches: [MappedChanges], _ writer: IndexWriter, _ state: inout IndexedState) throws {
        var staged = state
        var rows = StagedRows()
        var removed: [Int: [Int: Int]] = [:]
        var vbuckets: [Int] = []
        var last: [Int: IndexPosition] = [:]
        try writer.db.transaction { () throws(SQLiteError) in
            for batch in batches {
                let vb = batch.work.vb
                for r in batch.records {
                    // A vBucket indexed from scratch in this pass has no rows of a document whose seqno is at
                    // most the high seqno the pass started from: a document indexed earlier in this pass and
                    // changed since is at a newer seqno. Those skip the back-index look-up.
                    if !batch.work.fresh || r.meta.bySeqno.rawValue > batch.work.high {
                        try writer.removeDocument(vb: vb, doc: r.key, deltas: &removed[vb, default: [:]])
                    }
                    let expiry = r.meta.deleted ? 0 : r.meta.expiry
                    if expiry != 0 || staged.expiring[vb]?[r.key] != nil {
                        try writer.setExpiring(vb: vb, doc: r.key, expiry: expiry)
                        staged.expiring[vb, default: [:]][r.key] = expiry == 0 ? nil : expiry
                    }
                }
                rows.stage(vb: vb, records: batch.records, mapped: batch.mapped)
                for e in batch.mapped.errors {
                    // Logged per document (never the body) and skipped for that view, as Couchbase does.
                    logger.warning(
                        "map function failed for a document; skipped",
                        metadata: [
                            "ddoc": "\(design.name)", "view": "\(design.views[e.view].name)", "vb": "\(vb)",
                            "error": "\(e.error)",
                        ])
                }
                // Mappers interleave vBuckets in a group; each vBucket's batches still come in seqno order.
                let position = IndexPosition(seqno: batch.seqno, uuid: batch.work.uuid)
                if last.updateValue(position, forKey: vb) == nil { vbuckets.append(vb) }
            }
            try writer.insert(rows)
            for vb in vbuckets {
                guard let position = last[vb] else { continue }
                var deltas = removed[vb] ?? [:]
                for (view, added) in rows.counts[vb] ?? [:] { deltas[view, default: 0] += added }
                try writer.commitVBucket(vb: vb, position: position, deltas: deltas)
                staged.positions[vb] = position
            }
        }
        // A vBucket indexed for the first time changes what queries must leave out (`excludedVBuckets`).
        if staged.positions.count != state.positions.count { indexedGeneration.wrappingAdd(1, ordering: .releasing) }
        state = staged
    }
}

/// What the worker knows about the index between passes: stored position (seqno and history) per vBucket,
/// and the documents indexed with a TTL (vBucket → doc id → absolute expiry seconds), mirrored in SQLite.
struct IndexedState {
    var positions: [Int: IndexPosition] = [:]
    var expiring: [Int: [[UInt8]: UInt32]] = [:]
}
