import Logging
import SetteeCore
import SetteeSQLite
import SetteeStreams
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The bucket's persistence thread: takes dirty items from the vBuckets and commits them to SQLite.
///
/// One cycle:
/// ```
///   sleep until dirty / command / stop  ──►  window (flusherMaxDelay; a persistence waiter's vBuckets are
///   written at once in an express batch, ADR 0107)
///   ──►  take (under each vb lock, latest version per key, bounded batch)  ──►  one transaction: items +
///   the touched vBuckets' state rows that changed more than their newest item says (`stateRowNeeded`)
///   ──►  COMMIT (fsync)  ──►  per vb under lock: mark clean if seqno unchanged, advance persistedSeqno,
///   collect waiters  ──►  complete waiters (no lock held)  ──►  item pager if above high watermark
/// ```
/// Invariants:
/// 1. Only this thread writes the file, so batches commit in the order they were taken; a key's
///    versions reach disk in seqno order.
/// 2. `persistedSeqno` advances only after COMMIT returned OK (synchronous=FULL: fsynced).
/// 3. A batch whose write or commit failed (disk full, EIO; SQLite rolled it back) is retried as it is,
///    with backoff (`Limits.flusherRetry*`), before anything else is taken: versions still reach disk
///    in seqno order, and persistence resumes by itself once the disk recovers. While it fails the
///    bucket says so (`EngineCore.failDisk`) and persistence waiters fail. A failed bucket flush or
///    rollback is not retried (memory was already changed): nothing is written after it.
/// 4. No vBucket lock is held while SQLite or LZ4 runs.
/// 5. After any COMMIT, warmup recovers every vBucket's high seqno, max CAS, state, purge seqno and failover log
///    as they were taken into the batch: from the state row, or, where the row was left out (ADR 0061), from
///    the older row plus the batch's newest item, which holds both the high seqno and the max CAS.
/// 6. A drain (shutdown) retries a failing disk for `EngineOptions.shutdownPersistTimeout`, then gives
///    up and records how many items were lost (`EngineCore.lostAtShutdown`).
final class Flusher {
    private let core: EngineCore
    private let conn: Connection
    private let insertItem: Statement
    private let upsertState: Statement
    private let setMeta: Statement
    private let deleteVBucket: Statement
    private let deletePurged: Statement
    private let deleteDropped: Statement
    /// The bucket's max purged revision seqno as last written to `meta` (`StorageSchema.metaMaxPurgedRev`).
    private var writtenMaxPurgedRev = RevSeqNo(0)
    private var envelope = LZ4Envelope()
    private var cursor = 0
    /// The marked vBuckets of the current `take`, in visiting order (buffer reused).
    private var marked: [Int] = []
    /// The same for `takeExpress`.
    private var expressMarked: [Int] = []
    /// Each vBucket's failover log as last written, with its disk form (`encodedFailover`).
    private var failoverCache: [(log: FailoverLog, bytes: [UInt8])?]
    /// Each vBucket's state row as last committed by this flusher (nil until its first one): a batch skips the
    /// row when only the high seqno and max CAS moved and its own items carry both (`stateRowNeeded`).
    private var committedState: [StateRow?]
    /// Which of the current batch's vBuckets wrote their state row (buffer reused; read after COMMIT).
    private var wroteState: [Bool] = []
    /// A bucket flush or rollback failed: nothing more is written (see invariant 3).
    private var failed = false
    /// The batch whose commit failed, retried before anything else is taken.
    private var retry: (batch: [VBBatch], count: Int)?
    private var retryAttempts = 0
    private var retryAt: UInt64 = 0
    private var drainStarted: UInt64?
    /// The item pager found nothing to evict last time; don't rescan every item on every wakeup while
    /// memory stays above the watermark. Cleared when a commit made items clean (evictable) or after
    /// `pagerRetryNanos`.
    private var pagerStalled = false
    private var pagerStalledAt: UInt64 = 0
    /// `core.waitersRegistered` when the flusher last looked: a change means a new persistence waiter.
    private var waitersSeen = 0
    /// The last express batch left work in a vBucket (batch limits).
    private var expressLeft = false
    private static let pagerRetryNanos: UInt64 = 1_000_000_000

    struct VBBatch {
        var vb: Int
        var entries: [FlushEntry]
        var state: StateRow
        /// Rows of tombstones purged since the last batch (`VBucketTable.purgedRows`), deleted in this transaction
        /// with the state row that raises the purge seqno over them (ADR 0095).
        var purged: [PurgedRow] = []
        /// The vBucket's `maxPurgedRev` when `purged` is not empty.
        var maxPurgedRev = RevSeqNo(0)
    }

    init(core: EngineCore, conn: Connection) throws(SQLiteError) {
        self.core = core
        self.conn = conn
        self.failoverCache = Array(repeating: nil, count: core.vbuckets.count)
        self.committedState = Array(repeating: nil, count: core.vbuckets.count)
        self.insertItem = try conn.prepare(StorageSchema.insertItem)
        self.upsertState = try conn.prepare(StorageSchema.upsertState)
        self.setMeta = try conn.prepare(StorageSchema.setMeta)
        self.deleteVBucket = try conn.prepare(StorageSchema.deleteVBucketItems)
        self.deletePurged = try conn.prepare(StorageSchema.deletePurgedItem)
        self.deleteDropped = try conn.prepare(StorageSchema.deleteDroppedItem)
    }

    func run() {
        var lastBatchFull = false
        while true {
            let stop = core.stop
            if stop == .abandon { break }
            if stop == .drain && drainStarted == nil { drainStarted = monotonicNanos() }
            // Commands run even while a batch waits for its retry: they refuse at once instead of
            // blocking their caller for the length of the disk fault.
            runCommands()
            if retry != nil {
                if drainDeadlinePassed() { break }
                if !retryPending() { continue }
            }
            let paused = stop == .running && core.flusherPaused.load(ordering: .sequentiallyConsistent)
            if !paused && !failed {
                if stop == .running && !lastBatchFull && core.options.flusherMaxDelay > 0
                    && core.dirtyCount.load(ordering: .relaxed) > 0
                {
                    gather()
                }
                lastBatchFull = false
                while core.stop != .abandon && !failed && retry == nil {
                    // A waiter that came while the window drains waits for one batch, not for all of them.
                    if waitersArrived() { flushExpress() }
                    if failed || retry != nil { break }
                    guard let n = flushOnce() else { break }
                    pagerStalled = false
                    if failed || retry != nil { break }
                    if core.flusherPaused.load(ordering: .sequentiallyConsistent) {
                        lastBatchFull = false  // or the outer loop would neither flush nor wait: a spin
                        break
                    }
                    if n >= core.options.flusherBatchMaxItems {
                        lastBatchFull = true
                    }
                    if core.memory.aboveHigh { runPager() }
                    // Under continuous load keep draining; otherwise go back to gathering.
                    if !lastBatchFull && stop == .running { break }
                }
            }
            if core.memory.aboveHigh && !pagerStalled { runPager() }
            if retry != nil { continue }
            if core.stop == .drain && (failed || nothingToFlush()) {
                if !failed { markCleanShutdown() }
                break
            }
            if !lastBatchFull { waitForWork() }
        }
        if core.stop == .drain {
            let lost = unpersistedItems()
            core.lostAtShutdown.store(lost, ordering: .sequentiallyConsistent)
            if lost > 0 {
                core.logger.critical(
                    "shutdown gave up persisting: unpersisted items are lost",
                    metadata: [
                        "lostItems": "\(lost)", "reason": "\(core.diskFailureMessage ?? "disk failed")",
                    ])
            }
        }
        conn.close()
    }

    /// The items whose current version is not on disk, exactly: one per key still `dirty` (a version taken into the
    /// failed batch stays dirty until its commit, and a key written again after it was taken is queued again but is
    /// still one item). Before, the queue's length plus the failed batch's was reported, which counted such a key
    /// twice, and queue entries whose key had since gone (a flush, a vBucket reset) once more: 834 reported after a
    /// disk-full shutdown where 0 of 2,727 acknowledged writes were lost (issue 72). Zero without a scan when nothing
    /// was queued or in flight; otherwise one pass over the vBuckets' tables (shutdown only).
    private func unpersistedItems() -> Int {
        guard core.dirtyCount.load(ordering: .sequentiallyConsistent) > 0 || retry != nil else { return 0 }
        var lost = 0
        for vb in core.vbuckets {
            lost += vb.table.withLock { t in
                var n = 0
                for (_, item) in t.items where item.dirty { n += 1 }
                return n
            }
        }
        return lost
    }

    /// Retries the failed batch once its backoff is over. True when it committed (normal work resumes);
    /// false after waiting out (part of) the backoff or another failure.
    private func retryPending() -> Bool {
        let now = monotonicNanos()
        if now < retryAt {
            var until = retryAt
            if let d = drainDeadline() { until = min(until, d) }
            core.flusherWakeup.locked { core.flusherWakeup.waitLocked(untilMonotonicNanos: until) }
            return false
        }
        let done: [Committed]
        do {
            guard let pending = retry else { return true }
            done = write(pending.batch, count: pending.count)
        }
        for c in done { complete(c) }
        return retry == nil
    }

    /// Takes and writes one batch; nil when nothing was queued. The batch, and with it the entries' references to
    /// the items' boxes, is released before `complete` clears the dirty bits, so that happens in place.
    private func flushOnce() -> Int? {
        let done: [Committed]
        let n: Int
        do {
            let batch = take()
            if batch.isEmpty { return nil }
            n = batch.reduce(0) { $0 + $1.entries.count }
            done = write(batch, count: n)
        }
        for c in done { complete(c) }
        return n
    }

    private func drainDeadline() -> UInt64? {
        guard let drainStarted else { return nil }
        return drainStarted &+ UInt64(max(0, core.options.shutdownPersistTimeout) * 1e9)
    }

    private func drainDeadlinePassed() -> Bool {
        guard let d = drainDeadline() else { return false }
        return monotonicNanos() >= d
    }

    /// The window (ADR 0107): plain writes wait up to `flusherMaxDelay` (`Limits.flusherWindowMilliseconds`) so that
    /// one transaction carries a window's rows. Most rows of a bucket's table share their B-tree leaves with
    /// other keys (a 1 KiB item is a quarter of a 4 KiB page), so the longer the window, the fewer times each
    /// leaf is written per SET. Somebody waiting for persistence (a durable write, `waitForPersistence`, an
    /// OBSERVE_SEQNO poll) is not kept waiting: their vBuckets are written at once in an express batch, and
    /// the window goes on for the rest; whatever arrives during that batch's fsync makes the next express
    /// batch (group commit). The window ends early for a command, a stop or pause, memory above the high
    /// watermark (only clean items can be evicted), or a full batch's worth of queued items.
    private func gather() {
        let deadline = monotonicNanos() &+ UInt64(max(0, core.options.flusherMaxDelay) * 1e9)
        while true {
            if waitersArrived() {
                flushExpress()
                if failed || retry != nil { return }
                continue
            }
            if windowOver(deadline) { return }
            let seen = waitersSeen
            core.flusherGathering.store(true, ordering: .sequentiallyConsistent)
            // Woken by a new waiter (it broadcasts while we gather) or a command; other broadcasts of
            // `flusherWakeup` (a replica's snapshot applied, a vBucket state changed) say nothing about persistence
            // and do not end the window (ADR 0082). Memory and the queue's length are looked at every
            // `windowCheckNanos`, since nothing signals them.
            core.flusherWakeup.locked {
                while core.waitersRegistered.load(ordering: .sequentiallyConsistent) == seen && !windowOver(deadline) {
                    // A deadline that passed since `windowOver` looked is no wait at all.
                    core.flusherWakeup.waitLocked(
                        untilMonotonicNanos: min(deadline, monotonicNanos() &+ Self.windowCheckNanos))
                }
            }
            core.flusherGathering.store(false, ordering: .sequentiallyConsistent)
        }
    }

    /// How often a window looks at memory and the queue's length while it waits.
    private static let windowCheckNanos: UInt64 = 20_000_000

    private func windowOver(_ deadline: UInt64) -> Bool {
        core.stop != .running || core.flusherPaused.load(ordering: .sequentiallyConsistent)
            || !core.commands.withLock({ $0.isEmpty }) || monotonicNanos() >= deadline || core.memory.aboveHigh
            || core.dirtyCount.load(ordering: .relaxed) >= core.options.flusherBatchMaxItems
    }

    /// A persistence waiter registered since the last look (`waitersSeen` moves on), or the last express batch left
    /// work.
    private func waitersArrived() -> Bool {
        let now = core.waitersRegistered.load(ordering: .sequentiallyConsistent)
        guard now != waitersSeen || expressLeft else { return false }
        waitersSeen = now
        return true
    }

    /// Writes the vBuckets waiters asked for (`takeExpress`), then completes them.
    private func flushExpress() {
        let done: [Committed]
        do {
            let batch = takeExpress()
            if batch.isEmpty { return }
            done = write(batch, count: batch.reduce(0) { $0 + $1.entries.count })
        }
        for c in done { complete(c) }
    }

    private func runPager() {
        let freed = ItemPager.run(core, startAt: cursor)
        if freed == 0 {
            pagerStalled = true
            pagerStalledAt = monotonicNanos()
        }
    }

    private func nothingToFlush() -> Bool {
        core.dirtyCount.load(ordering: .sequentiallyConsistent) == 0
            && !core.pendingStateRows.load(ordering: .sequentiallyConsistent)
    }

    private func hasWork() -> Bool {
        if core.stop != .running { return true }
        if !core.commands.withLock({ $0.isEmpty }) { return true }
        if failed { return false }
        if core.flusherPaused.load(ordering: .sequentiallyConsistent) { return false }
        if !nothingToFlush() { return true }
        return core.memory.aboveHigh && !pagerStalled
    }

    private func waitForWork() {
        core.flusherWakeup.locked {
            core.flusherIdle.store(true, ordering: .sequentiallyConsistent)
            // Re-check after announcing idleness: a producer that incremented before our store is
            // seen here; one that increments after sees us idle and signals under this mutex.
            if !hasWork() { core.flusherWakeup.waitLocked(seconds: 1) }
            core.flusherIdle.store(false, ordering: .sequentiallyConsistent)
        }
        // Retry a stalled pager now and then: access bits age, fetched values become evictable.
        if pagerStalled && monotonicNanos() - pagerStalledAt >= Self.pagerRetryNanos { pagerStalled = false }
    }

    // MARK: take

    /// Takes the latest version of every queued key, vBucket by vBucket, until the batch limits. Visits only the
    /// vBuckets marked in `core.dirtyVBuckets`, round robin from `cursor`; one it left work in (batch limits, or
    /// not reached) is marked again for the next batch.
    private func take() -> [VBBatch] {
        core.pendingStateRows.store(false, ordering: .sequentiallyConsistent)
        let (batch, unvisited) = takeMarked(core.dirtyVBuckets, from: cursor, order: &marked)
        if unvisited { core.pendingStateRows.store(true, ordering: .sequentiallyConsistent) }
        let n = core.vbuckets.count
        cursor = n > 0 ? (cursor + 1) % n : 0
        return batch
    }

    /// Takes only the vBuckets a persistence waiter asked for since the last express batch (`expressVBuckets`),
    /// each with its whole queue within the batch limits, so a durable write waits for its own vBucket's rows and
    /// not for the window's (ADR 0107). A vBucket left unfinished by the limits stays marked for the next one; its
    /// bit in `dirtyVBuckets` stays too (a later visit that finds its queue empty costs one lock).
    private func takeExpress() -> [VBBatch] {
        let (batch, _) = takeMarked(core.expressVBuckets, from: 0, order: &expressMarked)
        // A vBucket the limits left work in is marked again: the next express batch takes the rest without waiting
        // for a new waiter.
        expressLeft = expressMarked.contains { core.expressVBuckets.isMarked($0) }
        return batch
    }

    /// Takes the vBuckets marked in `bits` (clearing them), in round-robin order from `start` (`order` is the
    /// caller's reused buffer), until the batch limits; one it left work in or did not reach is marked again.
    /// `unvisited`: some were not reached.
    private func takeMarked(
        _ bits: DirtyVBuckets, from start: Int, order: inout [Int]
    ) -> (batch: [VBBatch], unvisited: Bool) {
        var out: [VBBatch] = []
        var itemsLeft = core.options.flusherBatchMaxItems
        var bytesLeft = core.options.flusherBatchMaxBytes
        var taken = 0
        bits.takeAll(startingAt: start, into: &order)
        var visited = 0
        for index in order {
            if itemsLeft <= 0 || bytesLeft <= 0 { break }
            visited += 1
            if let batch = take(index, itemsLeft: &itemsLeft, bytesLeft: &bytesLeft, taken: &taken, leftover: bits) {
                out.append(batch)
            }
        }
        let unvisited = visited < order.count
        if unvisited {
            for index in order[visited...] { bits.mark(index) }
        }
        core.flusherVisits.wrappingAdd(visited, ordering: .relaxed)
        return (account(out, items: taken), unvisited)
    }

    /// The counters of a taken batch: `taken` queue entries left the dirty queues; its entries are in flight.
    private func account(_ out: [VBBatch], items taken: Int) -> [VBBatch] {
        if taken > 0 { core.dirtyCount.wrappingAdd(-taken, ordering: .sequentiallyConsistent) }
        let count = out.reduce(0) { $0 + $1.entries.count }
        core.inFlight.wrappingAdd(count, ordering: .relaxed)
        return out
    }

    /// Takes one vBucket's queued keys (their latest versions) and its state row, within the limits. A vBucket it
    /// leaves work in is marked again in `leftover`, for the next batch of the same kind.
    private func take(
        _ index: Int, itemsLeft: inout Int, bytesLeft: inout Int, taken: inout Int, leftover: DirtyVBuckets
    ) -> VBBatch? {
        let vb = core.vbuckets[index]
        return vb.table.withLock { t -> VBBatch? in
            guard !t.dirtyQueue.isEmpty || t.stateDirty else { return nil }
            // The queue is taken out of the table so that each entry's reference to a box is dropped before the
            // key's current item is changed: clearing `queued` then happens in place, never copying the box.
            var queue: [DirtyEntry] = []
            swap(&queue, &t.dirtyQueue)
            var entries: [FlushEntry] = []
            var k = 0
            // A replica's queue holds whole snapshots (applySnapshot): take all of it, so one
            // transaction never ends inside a snapshot and the state row's high seqno is its end.
            let whole = t.state != .active
            // A partial take covers the seqnos below the first entry it leaves (invariant 3 of VBucket), and writes
            // each taken key's current version: one written again since it was queued has a seqno past the cut
            // when the take stops early. So the take goes on, past the limits, until the entry it would stop at is
            // newer than every version it took. Before, such a version went into the file above the state row's
            // high seqno with the mutations between them missing; warmup took its seqno as the vBucket's high, and
            // the restart hold (ADR 0033) compared the replicas with a number the file did not cover.
            var newestTaken = SeqNo.zero
            while k < queue.count
                && (whole || (itemsLeft > 0 && (bytesLeft > 0 || entries.isEmpty)) || newestTaken >= queue[k].seqno)
            {
                let queuedKey = queue[k].item?.docKey
                queue[k].item = nil
                k += 1
                guard let key = queuedKey, let pos = t.items.index(forKey: key), t.items[at: pos].queued else {
                    continue
                }
                t.items[at: pos].queued = false
                // Shares the table's box (read outside the lock: a shared box is never changed in place).
                let item = t.items[at: pos]
                precondition(item.hasValue, "dirty item without value in vb \(index) (invariant 1 of Item)")
                let meta = StoredPrepare.stored(item.meta, prepare: t.isPrepare(key, seqno: item.bySeqno))
                entries.append(FlushEntry(vb: UInt16(index), key: key, item: item, meta: meta))
                newestTaken = max(newestTaken, item.bySeqno)
                itemsLeft -= 1
                bytesLeft -= item.valueCount + key.count
            }
            // A drained queue gives its buffer back (it stays the empty array swapped in): `removeFirst` keeps
            // the capacity of the longest backlog, 16 B an entry, up to one per item after a bulk load.
            if k < queue.count {
                queue.removeFirst(k)
                t.dirtyQueue = queue
                leftover.mark(index)
            }
            // Everything up to the oldest still-queued mutation is covered by this batch.
            let upTo = t.dirtyQueue.first.map { min(SeqNo($0.seqno.rawValue - 1), t.highSeqno) } ?? t.highSeqno
            t.stateDirty = false
            taken += k
            var purged: [PurgedRow] = []
            swap(&purged, &t.purgedRows)
            return VBBatch(
                vb: index, entries: entries,
                state: StateRow(
                    vb: UInt16(index), state: t.persistentState, highSeqno: upTo, maxCAS: t.hlc.maxCAS,
                    purgeSeqno: t.purgeSeqno, failoverLog: t.failoverLog),
                purged: purged, maxPurgedRev: purged.isEmpty ? RevSeqNo(0) : t.maxPurgedRev)
        }
    }

    // MARK: write

    /// What a committed batch leaves to do under each vBucket's lock: keys and the seqnos written, no item.
    struct Committed {
        var vb: Int
        var written: [(key: DocKey, seqno: SeqNo)]
        var upTo: SeqNo
    }

    /// Writes `batch` in one transaction. Committed: what `complete` does next (the caller releases `batch`
    /// first); failed: nothing, the batch is kept for its retry.
    private func write(_ batch: [VBBatch], count: Int) -> [Committed] {
        let result = Result { () throws(TransactionError<SQLiteError>) in
            try conn.transaction { () throws(SQLiteError) in
                wroteState.removeAll(keepingCapacity: true)
                var maxPurgedRev = writtenMaxPurgedRev
                for b in batch {
                    for row in b.purged { try deletePurgedRow(vb: b.state.vb, row) }
                    if b.maxPurgedRev > maxPurgedRev { maxPurgedRev = b.maxPurgedRev }
                    var newest: FlushEntry?
                    for e in b.entries {
                        try insert(e)
                        if newest.map({ e.meta.bySeqno > $0.meta.bySeqno }) ?? true { newest = e }
                    }
                    let last = Int(b.state.vb) < committedState.count ? committedState[Int(b.state.vb)] : nil
                    let needed = Self.stateRowNeeded(
                        b.state, lastCommitted: last, newest: newest.map { ($0.meta.bySeqno, $0.meta.cas) })
                    if needed { try writeState(b.state) }
                    wroteState.append(needed)
                }
                if maxPurgedRev > writtenMaxPurgedRev {
                    try setMeta.bindText(StorageSchema.metaMaxPurgedRev, at: 1)
                    try setMeta.bind(Int64(bitPattern: maxPurgedRev.rawValue), at: 2)
                    defer { setMeta.reset() }
                    _ = try setMeta.step()
                }
                if core.failNextCommit.exchange(false, ordering: .sequentiallyConsistent)
                    || core.failAllCommits.load(ordering: .sequentiallyConsistent)
                {
                    throw SQLiteError(extendedCode: 10, message: "injected I/O failure", context: "test hook")
                }
            }
        }
        if case .failure(let error) = result {
            // The batch stays in flight (counted by `inFlight`) until a retry commits it.
            if retry == nil { retry = (batch, count) }
            retryAttempts += 1
            let delayMs = Backoff.doubling(
                Limits.flusherRetryInitialMilliseconds, attempt: retryAttempts - 1,
                cap: Limits.flusherRetryMaxMilliseconds)
            retryAt = monotonicNanos() &+ UInt64(delayMs) * 1_000_000
            insertItem.reset()
            upsertState.reset()
            deletePurged.reset()
            setMeta.reset()
            let message: String
            switch error {
            case .sqlite(let e): message = e.description
            case .body(let e): message = e.description
            }
            core.failDisk(
                "flusher commit failed: \(message)",
                unpersisted: core.dirtyCount.load(ordering: .relaxed) + core.inFlight.load(ordering: .relaxed))
            return []
        }
        core.inFlight.wrappingAdd(-count, ordering: .relaxed)
        for b in batch where b.maxPurgedRev > writtenMaxPurgedRev { writtenMaxPurgedRev = b.maxPurgedRev }
        for (b, wrote) in zip(batch, wroteState) where wrote { noteCommitted(b.state) }
        core.stateRowsSkipped.wrappingAdd(wroteState.count - wroteState.count { $0 }, ordering: .relaxed)
        if retry != nil {
            retry = nil
            retryAttempts = 0
            core.diskRecovered()
        }
        core.totalPersisted.wrappingAdd(count, ordering: .relaxed)
        core.flusherCommits.wrappingAdd(1, ordering: .relaxed)
        if core.pauseAfterNextCommit.exchange(false, ordering: .sequentiallyConsistent) {
            core.flusherPaused.store(true, ordering: .sequentiallyConsistent)
        }
        return batch.map { b in
            Committed(vb: b.vb, written: b.entries.map { ($0.key, $0.meta.bySeqno) }, upTo: b.state.highSeqno)
        }
    }

    /// Deletes a purged row if it still holds the purged version (a newer version of the key stays): a tombstone's
    /// (ADR 0095) only while it is deleted, a dropped collection's item (ADR 0138) whatever it is.
    private func deletePurgedRow(vb: UInt16, _ row: PurgedRow) throws(SQLiteError) {
        let s = row.droppedCollection ? deleteDropped : deletePurged
        defer { s.reset() }
        try s.bind(Int64(vb), at: 1)
        try s.bind(Int64(bitPattern: row.seqno.rawValue), at: 3)
        try s.withBlobBound(row.key.bytes, at: 2) { () throws(SQLiteError) in _ = try s.step() }
    }

    private func insert(_ e: FlushEntry) throws(SQLiteError) {
        let s = insertItem
        try s.bind(Int64(e.vb), at: 1)
        try s.bind(Int64(bitPattern: e.meta.bySeqno.rawValue), at: 3)
        try s.bind(Int64(bitPattern: e.meta.revSeqno.rawValue), at: 4)
        try s.bind(Int64(bitPattern: e.meta.cas.rawValue), at: 5)
        try s.bind(Int64(e.meta.flags), at: 6)
        try s.bind(Int64(e.meta.expiry), at: 7)
        try s.bind(Int64(e.meta.datatype.rawValue), at: 8)
        try s.bind(e.meta.deleted ? 1 : 0, at: 9)
        try s.bind(Int64(e.item.valueCount), at: 11)
        // Key and (possibly compressed) value are bound in place, read from the item's box (shared with the table,
        // so never changed while this entry holds it); the step runs inside both scopes.
        defer { s.reset() }
        let box = e.item.box
        let r = box.withKeyBytes { key in
            box.withValueBytes { value in
                Result { () throws(SQLiteError) in
                    try s.withBlobBound(key, at: 2) { () throws(SQLiteError) in
                        try envelope.withEncoded(raw: value) { (codec, stored, crc) throws(SQLiteError) in
                            try s.bind(Int64(codec.rawValue), at: 10)
                            try s.bind(Int64(crc), at: 12)
                            try s.bindBlobNoCopy(stored, at: 13)
                            _ = try s.step()
                        }
                    }
                }
            }
        }
        try r.get()
    }

    /// Whether a batch must write its vBucket's state row (ADR 0061). Warmup takes the high seqno and max CAS as
    /// the largest of the state row's and the items' (`VBucketTable.load`), so a row that would change only those
    /// two is redundant when the batch's newest item carries both: after its COMMIT the file recovers exactly what
    /// the row would have said. Anything else (state, purge seqno, failover log, a high seqno past the newest item
    /// such as a replica snapshot's end or a partly taken queue, a max CAS from a lock or a remote CAS, no row yet
    /// committed by this flusher) writes the row.
    static func stateRowNeeded(
        _ row: StateRow, lastCommitted last: StateRow?, newest: (seqno: SeqNo, cas: CAS)?
    ) -> Bool {
        guard let last, let newest else { return true }
        let sameRest =
            last.vb == row.vb && last.state == row.state && last.purgeSeqno == row.purgeSeqno
            && last.failoverLog == row.failoverLog
        let carried =
            newest.seqno == row.highSeqno && newest.cas == row.maxCAS && last.highSeqno <= row.highSeqno
            && last.maxCAS <= row.maxCAS
        return !(sameRest && carried)
    }

    /// Records `st` as its vBucket's committed state row (called after its transaction committed).
    private func noteCommitted(_ st: StateRow) {
        let i = Int(st.vb)
        if i < committedState.count { committedState[i] = st }
    }

    private func writeState(_ st: StateRow) throws(SQLiteError) {
        let s = upsertState
        try s.bind(Int64(st.vb), at: 1)
        try s.bind(StorageSchema.stateCode(st.state), at: 2)
        try s.bind(Int64(bitPattern: st.highSeqno.rawValue), at: 3)
        try s.bind(Int64(bitPattern: st.maxCAS.rawValue), at: 4)
        try s.bind(Int64(bitPattern: st.purgeSeqno.rawValue), at: 5)
        try s.bindBlob(encodedFailover(st), at: 6)
        _ = try s.step()
        s.reset()
    }

    /// The disk form of the row's failover log, encoded again only when the log changed since this vBucket's
    /// last row (a state change, a new history, a replica adopting its producer's): most rows repeat it.
    private func encodedFailover(_ st: StateRow) -> [UInt8] {
        let i = Int(st.vb)
        guard i < failoverCache.count else { return st.failoverLog.encoded() }
        if let cached = failoverCache[i], cached.log == st.failoverLog { return cached.bytes }
        let bytes = st.failoverLog.encoded()
        failoverCache[i] = (st.failoverLog, bytes)
        return bytes
    }

    /// After COMMIT: clean what did not change since, advance the persisted seqno, release waiters.
    private func complete(_ c: Committed) {
        let upTo = c.upTo
        let ready = core.vbuckets[c.vb].table.withLock { t -> [PersistenceWaiter] in
            for (key, seqno) in c.written {
                // Only if unchanged since taken: a newer version is still dirty (and queued). In place: the
                // flusher holds no reference to the box any more.
                if let i = t.items.index(forKey: key), t.items[at: i].bySeqno == seqno, t.items[at: i].dirty {
                    t.items[at: i].dirty = false
                }
            }
            if upTo > t.persistedSeqno { t.persistedSeqno = upTo }
            guard !t.waiters.isEmpty else { return [] }
            let p = t.persistedSeqno
            var done: [PersistenceWaiter] = []
            t.waiters.removeAll { w in
                if w.seqno <= p {
                    done.append(w)
                    return true
                }
                return false
            }
            return done
        }
        for w in ready { w.completion(.success(())) }
    }

    // MARK: commands

    private func runCommands() {
        let cmds = core.commands.withLock { c in
            let x = c
            c = []
            return x
        }
        for cmd in cmds {
            switch cmd {
            case .flushAll(let done): done(flushAll())
            case .resetVBucket(let vb, let done): done(resetVBucket(vb))
            case .compactStep(let maxPages, let keepsWAL, let done):
                done(compactStep(maxPages: maxPages, keepsWAL: keepsWAL))
            case .repackStep(let after, let upTo, let maxRows, let done):
                done(repackStep(after: after, upTo: upTo, maxRows: maxRows))
            }
        }
    }

    /// One compaction step (ADR 0154), on this thread so it never runs inside a batch: at most `maxPages` free pages
    /// given back in a transaction of their own (the first step of a file made before ADR 0154 rewrites it with one
    /// `VACUUM`). No item changes, so no vBucket state or waiter is touched; a crash leaves the file before or after
    /// the step. Once a step leaves no free page, the WAL is checkpointed so the file on disk shrinks now (a busy
    /// reader only delays that to a later checkpoint), and truncated unless `keepsWAL`. Refused while the disk
    /// fails: the batch to retry comes first.
    private func compactStep(maxPages: Int, keepsWAL: Bool) -> Result<FreePagesReleased, EngineError> {
        if failed { return .failure(.ioFailure(core.diskFailureMessage ?? "disk failed")) }
        if retry != nil { return .failure(.persistenceFailing(core.diskFailureMessage ?? "disk failed")) }
        do {
            let step = try conn.releaseFreePages(maxPages: maxPages)
            if step.remaining == 0 && (step.released > 0 || step.rewroteFile) {
                do { try conn.checkpoint(keepsWAL ? .restart : .truncate) } catch {
                    core.logger.info("compaction: checkpoint deferred", metadata: ["error": "\(error)"])
                }
            }
            return .success(step)
        } catch {
            core.logger.error("compaction step failed", metadata: ["error": "\(error)"])
            return .failure(.ioFailure("compaction: \(error)"))
        }
    }

    /// One repack step (ADR 0158), on this thread so it never runs inside a batch: at most `maxRows` rows moved to the
    /// table's end in a transaction of their own (`Connection.repackRows`). Rows keep their keys and contents, so no
    /// vBucket state, waiter or in-memory item is touched. Refused while the disk fails, as a compaction step is.
    private func repackStep(after: Int64, upTo: Int64?, maxRows: Int) -> Result<RowsRepacked, EngineError> {
        if failed { return .failure(.ioFailure(core.diskFailureMessage ?? "disk failed")) }
        if retry != nil { return .failure(.persistenceFailing(core.diskFailureMessage ?? "disk failed")) }
        do {
            return .success(try conn.repackRows("items", after: after, upTo: upTo, maxRows: maxRows))
        } catch {
            core.logger.error("repack step failed", metadata: ["error": "\(error)"])
            return .failure(.ioFailure("repack: \(error)"))
        }
    }

    /// Bucket flush, as kv_engine does it (every vBucket deleted and recreated): empty every vBucket in
    /// memory, restart its seqnos at 0 and, for an active one, start a new history at 0 (a new failover-log
    /// entry), then delete every row in one transaction with the state rows. A consumer that followed the old
    /// history is told to roll back to 0 when it asks again, and producers end their open streams (the high
    /// seqno went below what they sent), so replicas, views and change streams restart clean instead of
    /// waiting for seqnos that will never come. CAS keeps rising (the clock is kept). Runs between batches,
    /// so nothing taken is in flight.
    private func flushAll() -> Result<Void, EngineError> {
        if failed { return .failure(.ioFailure(core.diskFailureMessage ?? "disk failed")) }
        if retry != nil { return .failure(.persistenceFailing(core.diskFailureMessage ?? "disk failed")) }
        var states: [StateRow] = []
        var released: [PersistenceWaiter] = []
        var rng = SystemRandomNumberGenerator()
        for (i, vb) in core.vbuckets.enumerated() {
            let (freed, dequeued, row) = vb.table.withLock { t -> (Int, Int, StateRow) in
                let (f, d) = t.removeAll()
                t.stateDirty = false
                t.highSeqno = .zero
                t.persistedSeqno = .zero
                t.purgeSeqno = .zero
                if t.state == .active {
                    t.failoverLog.branch(at: .zero, using: &rng)
                } else {
                    t.failoverLog.rollBack(to: .zero)
                }
                // What waited for persistence is settled by the flush: its write is gone for good.
                released.append(contentsOf: t.waiters)
                t.waiters = []
                return (
                    f, d,
                    StateRow(
                        vb: UInt16(i), state: t.persistentState, highSeqno: .zero, maxCAS: t.hlc.maxCAS,
                        purgeSeqno: .zero, failoverLog: t.failoverLog)
                )
            }
            core.memory.add(-freed)
            if dequeued > 0 { core.dirtyCount.wrappingAdd(-dequeued, ordering: .sequentiallyConsistent) }
            states.append(row)
        }
        for w in released { w.completion(.success(())) }
        let result = Result { () throws(TransactionError<SQLiteError>) in
            try conn.transaction { () throws(SQLiteError) in
                try conn.execute("DELETE FROM items")
                for st in states { try writeState(st) }
            }
        }
        if case .failure(let error) = result {
            failed = true
            core.failDisk("bucket flush failed: \(error)")
            return .failure(.ioFailure("bucket flush failed"))
        }
        for st in states { noteCommitted(st) }
        // Streams and indexers following a vBucket learn at once that it went back to 0.
        if core.observerCount.load(ordering: .relaxed) > 0 {
            for st in states { core.notify(VBucketID(st.vb), .zero) }
        }
        core.logger.info("bucket flushed", metadata: ["bucket": "\(core.settings.name)"])
        return .success(())
    }

    /// Rollback to 0 of one non-active vBucket: empty it in memory (seqnos restart at 0, its persistence
    /// waiters fail), then delete its rows and write its state row in one transaction. Runs between
    /// batches, so nothing of it is in flight.
    private func resetVBucket(_ index: Int) -> Result<Void, EngineError> {
        if failed { return .failure(.ioFailure(core.diskFailureMessage ?? "disk failed")) }
        if retry != nil { return .failure(.persistenceFailing(core.diskFailureMessage ?? "disk failed")) }
        let (freed, dequeued, row, waiters) = core.vbuckets[index].table.withLock {
            t -> (Int, Int, StateRow, [PersistenceWaiter]) in
            let (f, d) = t.removeAll()
            t.stateDirty = false
            t.highSeqno = .zero
            t.persistedSeqno = .zero
            t.purgeSeqno = .zero
            let w = t.waiters
            t.waiters = []
            return (
                f, d,
                StateRow(
                    vb: UInt16(index), state: t.persistentState, highSeqno: .zero, maxCAS: t.hlc.maxCAS,
                    purgeSeqno: .zero, failoverLog: t.failoverLog),
                w
            )
        }
        core.memory.add(-freed)
        if dequeued > 0 { core.dirtyCount.wrappingAdd(-dequeued, ordering: .sequentiallyConsistent) }
        for w in waiters { w.completion(.failure(.notMyVBucket)) }
        let result = Result { () throws(TransactionError<SQLiteError>) in
            try conn.transaction { () throws(SQLiteError) in
                try deleteVBucket.bind(Int64(index), at: 1)
                _ = try deleteVBucket.step()
                deleteVBucket.reset()
                try writeState(row)
            }
        }
        if case .failure(let error) = result {
            deleteVBucket.reset()
            failed = true
            core.failDisk("vBucket rollback failed: \(error)")
            return .failure(.ioFailure("vBucket rollback failed"))
        }
        noteCommitted(row)
        core.logger.info("vBucket rolled back to 0", metadata: ["vb": "\(index)"])
        return .success(())
    }

    /// Last act of a clean shutdown: the next open must not start a new failover history.
    private func markCleanShutdown() {
        // A held or unsettled vBucket's question (is a replica ahead?) is still open: the next start must ask it again.
        let open = core.vbuckets.reduce(0) { n, v in n + (v.table.withLock { $0.held || $0.unsettled } ? 1 : 0) }
        if open > 0 {
            core.logger.warning(
                "shutdown leaves the unclean-shutdown marker: vBuckets are still held back or not yet compared",
                metadata: ["bucket": "\(core.settings.name)", "unsettledVBuckets": "\(open)"])
            return
        }
        do {
            try conn.transaction { () throws(SQLiteError) in
                try setMeta.bindText(StorageSchema.metaCleanShutdown, at: 1)
                try setMeta.bind(1, at: 2)
                _ = try setMeta.step()
                setMeta.reset()
            }
            // Fold the WAL into the main file so the next open has nothing to replay.
            try? conn.checkpoint(.truncate)
        } catch {
            setMeta.reset()
            core.failDisk("writing the clean-shutdown marker failed: \(error)")
        }
    }
}
