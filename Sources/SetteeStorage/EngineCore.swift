import Logging
import SetteeCore
import SetteeSQLite
import Synchronization

/// How the flusher should stop.
enum StopMode: Int {
    case running = 0
    /// Write everything dirty, then exit (shutdown).
    case drain = 1
    /// Exit without writing anything more (tests: simulate a crash).
    case abandon = 2
}

/// A request executed on the flusher thread, so it is ordered with the batches it writes.
enum FlusherCommand {
    case flushAll(done: @Sendable (Result<Void, EngineError>) -> Void)
    /// Rollback of one non-active vBucket to 0: drop its items and seqnos, durably.
    case resetVBucket(Int, done: @Sendable (Result<Void, EngineError>) -> Void)
    /// One compaction step (ADR 0154): at most `maxPages` free pages of the file given back, between two batches.
    case compactStep(maxPages: Int, keepsWAL: Bool, done: @Sendable (Result<FreePagesReleased, EngineError>) -> Void)
    /// One repack step (ADR 0158): at most `maxRows` rows with rowids in `(after, upTo]` moved to the table's end.
    case repackStep(
        after: Int64, upTo: Int64?, maxRows: Int, done: @Sendable (Result<RowsRepacked, EngineError>) -> Void)
}

/// The state shared by the engine's API and its threads (flusher, background reader, expiry pager).
/// Everything here is either immutable, atomic, or behind a lock; the threads hold this object, not
/// the `BucketEngine`, so dropping the last engine reference can shut them down.
final class EngineCore: Sendable {
    let settings: BucketSettings
    let options: EngineOptions
    let clock: any WallClock
    let logger: Logger
    let directory: String
    let vbuckets: [VBucket]
    let memory: MemoryTracker

    /// Entries in all dirty queues (`ep_queue_size`).
    let dirtyCount = Atomic<Int>(0)
    /// Items the flusher took and is writing (not yet committed).
    let inFlight = Atomic<Int>(0)
    let expired = Atomic<Int>(0)
    /// Tombstones purged since start (`TombstonePurger`).
    let tombstonesPurged = Atomic<Int>(0)
    /// The named collections whose items `CollectionPurger` removes (ADR 0138), set from the bucket's manifest.
    let droppedCollections = Mutex(DroppedCollections.none)
    /// The bucket's collections manifest (nil: a bucket made before collections): what `CollectionEvents` brings each
    /// active vBucket's event items to (ADR 0143).
    let collectionsManifest = Mutex<CollectionsManifest?>(nil)
    /// Raised by every `BucketEngine.setCollections`: the purger passes again.
    let collectionPurgeGeneration = Atomic<UInt64>(0)
    /// Dropped collections' items the purger's last pass left (`ep_collections_items_to_purge`).
    let collectionItemsToPurge = Atomic<Int>(0)
    /// Dropped collections' items removed since start.
    let collectionItemsPurged = Atomic<Int>(0)
    /// Wakes the collection purger (a manifest change, shutdown).
    let purgeWakeup = Wakeup()
    /// Raised after every change of a vBucket's state or hold (`BucketEngine.stateEpoch`).
    let stateEpoch = Atomic<UInt64>(0)
    /// How old a tombstone must be to be purged, in nanoseconds: the bucket's purge interval, which an edit of the
    /// bucket changes live (`BucketEngine.setPurgeInterval`).
    let purgeAgeNanoseconds: Atomic<UInt64>
    let evictions = Atomic<Int>(0)
    let bgFetched = Atomic<Int>(0)
    let totalPersisted = Atomic<Int>(0)
    let flusherCommits = Atomic<Int>(0)
    /// Batches' vBucket state rows left out because the batch's items carry all they would change (ADR 0061).
    let stateRowsSkipped = Atomic<Int>(0)
    /// Durable writes (prepares) since start: accepted by an active vBucket, committed (made visible: by their
    /// writer, or by a copy that became active and committed what it held), aborted on an active vBucket; and
    /// prepares a replica vBucket received (`SyncWriteCounts`).
    let syncWritesAccepted = Atomic<Int>(0)
    let syncWritesCommitted = Atomic<Int>(0)
    let syncWritesAborted = Atomic<Int>(0)
    let replicaPreparesAccepted = Atomic<Int>(0)

    /// Why the bucket cannot persist right now (the last failed commit), nil while persistence works.
    /// Cleared when a retried batch commits; stays set after a failed bucket flush or rollback (those
    /// are not retried: the file and memory disagree until restart).
    let diskFailure = Mutex<String?>(nil)
    /// `diskFailure != nil`, readable without the lock on the hot path.
    let diskFailed = Atomic<Bool>(false)
    /// Failed commits since start (each retry that fails counts).
    let persistFailures = Atomic<Int>(0)
    /// Monotonic nanoseconds when the current failure began (0 while persistence works).
    let failingSince = Atomic<UInt64>(0)
    /// Items a shutdown could not persist before giving up (set when the flusher exits).
    let lostAtShutdown = Atomic<Int>(0)
    /// Test hook: every commit fails while set (a disk that stays full).
    let failAllCommits = Atomic<Bool>(false)
    /// Monotonic nanoseconds of the last log line about an ongoing failure (rate limit).
    let failureLoggedAt = Atomic<UInt64>(0)

    let flusherWakeup = Wakeup()
    /// True while the flusher sleeps with nothing to do: the hot path signals only then.
    let flusherIdle = Atomic<Bool>(false)
    /// Persistence waiters ever registered: when it moved, the flusher writes the vBuckets in `expressVBuckets` at
    /// once (an express batch, group commit) instead of at the end of its window (ADR 0107).
    let waitersRegistered = Atomic<Int>(0)
    /// The vBuckets somebody waits on to be persisted, marked before `waitersRegistered` moves.
    let expressVBuckets: DirtyVBuckets
    /// True while the flusher waits in its window (`flusherMaxDelay`); a new waiter signals then.
    let flusherGathering = Atomic<Bool>(false)
    let stopMode = Atomic<Int>(StopMode.running.rawValue)
    let commands = Mutex<[FlusherCommand]>([])
    /// Test hook: the flusher takes nothing while set.
    let flusherPaused = Atomic<Bool>(false)
    /// Test hook: the next batch fails before COMMIT as if the disk did.
    let failNextCommit = Atomic<Bool>(false)
    /// Test hook: the flusher pauses (`flusherPaused`) once its next batch has committed, as if the process stopped
    /// there: what the file holds between two batches can be read.
    let pauseAfterNextCommit = Atomic<Bool>(false)

    /// A vBucket's state row changed without a mutation (setVBucketState): the flusher has work.
    let pendingStateRows = Atomic<Bool>(false)
    /// The vBuckets the flusher's next `take` visits (queued items or a changed state row).
    let dirtyVBuckets: DirtyVBuckets
    /// vBuckets the flusher has visited (locked to take from), for tests: `take` visits only marked ones.
    let flusherVisits = Atomic<Int>(0)
    /// Set once the flusher thread exited: no persistence will happen any more.
    let closed = Atomic<Bool>(false)

    /// Background fetch requests for the reader thread.
    let fetchQueue = Mutex<[FetchRequest]>([])
    let fetchWakeup = Wakeup()
    /// Wakes the expiry pager early (shutdown).
    let pagerWakeup = Wakeup()

    /// Change observers (`BucketEngine.addChangeObserver`); `observerCount` lets the hot path skip the lock.
    let observers = Mutex<[ChangeObserver]>([])
    let observerCount = Atomic<Int>(0)
    let nextObserverToken = Atomic<UInt64>(1)
    /// Idle read-only connections for change-feed scans (at most `Limits.changeFeedReaders`).
    let changeReaders = Mutex<[ChangeReader]>([])

    /// Rows a repair warmup skipped as corrupt.
    let repairedRows = Atomic<Int>(0)
    let warmupItems = Atomic<Int>(0)
    let warmupNanos = Atomic<Int>(0)

    init(
        settings: BucketSettings, options: EngineOptions, clock: any WallClock, logger: Logger, directory: String,
        vbuckets: [VBucket]
    ) {
        self.settings = settings
        self.options = options
        self.clock = clock
        self.logger = logger
        self.directory = directory
        self.vbuckets = vbuckets
        self.dirtyVBuckets = DirtyVBuckets(count: vbuckets.count)
        self.expressVBuckets = DirtyVBuckets(count: vbuckets.count)
        self.memory = MemoryTracker(quota: settings.ramQuotaBytes)
        self.purgeAgeNanoseconds = Atomic(settings.purgeAgeNanoseconds)
    }

    var stop: StopMode { StopMode(rawValue: stopMode.load(ordering: .sequentiallyConsistent)) ?? .running }

    /// Applies the bucket-wide part of work done under a vBucket lock, and wakes the flusher if it
    /// sleeps and has something to do now.
    @inline(__always)
    func apply(_ fx: Effects, vb: VBucketID) {
        memory.add(fx.memDelta)
        if fx.lastSeqno != .zero && observerCount.load(ordering: .relaxed) > 0 { notify(vb, fx.lastSeqno) }
        if fx.expired != 0 { expired.wrappingAdd(fx.expired, ordering: .relaxed) }
        if !fx.fetchBeforeExpiry.isEmpty { fetchThenExpire(fx.fetchBeforeExpiry, vb: vb) }
        if fx.enqueued != 0 {
            // After the lock that queued the items was released, before the count the flusher waits on.
            dirtyVBuckets.mark(vb.index)
            dirtyCount.wrappingAdd(fx.enqueued, ordering: .sequentiallyConsistent)
            wakeFlusherIfIdle()
        } else if fx.memDelta > 0 && memory.aboveHigh {
            wakeFlusherIfIdle()
        }
    }

    /// A vBucket's state row changed (its `stateDirty` was set under its lock, which is released): the flusher
    /// writes it with its next batch. The caller wakes the flusher.
    func stateRowChanged(_ vb: VBucketID) {
        dirtyVBuckets.mark(vb.index)
        pendingStateRows.store(true, ordering: .sequentiallyConsistent)
    }

    /// Somebody waits for `vb`'s persistence (a waiter is registered under its lock, or a poll found it behind):
    /// the flusher writes it in its next express batch. Pairs with `Flusher.gather`: it announces that it waits,
    /// then re-checks `waitersRegistered` under the wakeup mutex; so either it sees the increment or we see it
    /// waiting and wake it.
    func persistSoon(_ index: Int) {
        expressVBuckets.mark(index)
        waitersRegistered.wrappingAdd(1, ordering: .sequentiallyConsistent)
        if flusherGathering.load(ordering: .sequentiallyConsistent) { flusherWakeup.broadcast() }
    }

    /// Queues expired, evicted items with XATTRs for the background reader; each expires as soon as its
    /// value is back, so its tombstone keeps the system XATTRs (`VBucketTable.live`).
    func fetchThenExpire(_ keys: [[UInt8]], vb: VBucketID) {
        let requests = keys.map { key in
            FetchRequest(vb: vb.rawValue, key: key) { [self] in expireFetched(key, vb: vb) }
        }
        fetchQueue.withLock { $0.append(contentsOf: requests) }
        fetchWakeup.broadcast()
    }

    private func expireFetched(_ key: [UInt8], vb: VBucketID) {
        // At shutdown the queue's leftovers complete unread: leave them for the next start.
        guard vb.index < vbuckets.count, stop == .running else { return }
        let nowNs = clock.nowNanoseconds()
        let nowS = UInt32(truncatingIfNeeded: nowNs / 1_000_000_000)
        var fx = Effects()
        let lostXattrs = vbuckets[vb.index].table.withLock { t -> Bool in
            guard t.state == .active, let item = t.items[DocKey(key)], !item.deleted else { return false }
            let unread = !item.hasValue && Expiry.isExpired(item.expiry, nowSeconds: nowS)
            _ = t.live(key, nowSeconds: nowS, nowNanoseconds: nowNs, fx: &fx, fetchEvicted: false)
            return unread
        }
        if lostXattrs {
            logger.error(
                "expired a document whose value could not be read back: its tombstone has no system XATTRs",
                metadata: ["vb": "\(vb.rawValue)", "keyLength": "\(key.count)"])
        }
        if fx.expired != 0 || fx.enqueued != 0 { apply(fx, vb: vb) }
    }

    /// Calls every change observer (outside any vBucket lock, on the mutating thread).
    func notify(_ vb: VBucketID, _ seqno: SeqNo) {
        let current = observers.withLock { $0 }
        for o in current { o.callback(vb, seqno) }
    }

    @inline(__always)
    func wakeFlusherIfIdle() {
        // Pairs with the flusher setting `flusherIdle` before re-checking its work under the wakeup
        // mutex: either it sees our increment, or we see it idle and signal (see Flusher.waitForWork).
        if flusherIdle.load(ordering: .sequentiallyConsistent) { flusherWakeup.broadcast() }
    }

    /// Records that a commit failed: the bucket now says so (stats, admin API), persistence waiters
    /// fail with `.persistenceFailing`, and the log says so once at the start and then every
    /// `Limits.persistenceFailureLogIntervalSeconds` while it lasts.
    func failDisk(_ message: String, unpersisted: Int = 0) {
        diskFailure.withLock { $0 = message }
        let first = !diskFailed.exchange(true, ordering: .sequentiallyConsistent)
        persistFailures.wrappingAdd(1, ordering: .relaxed)
        let now = monotonicNanos()
        if first {
            failingSince.store(now, ordering: .relaxed)
            failureLoggedAt.store(now, ordering: .relaxed)
            logger.error(
                "storage cannot persist; retrying with backoff. Durable writes are refused, plain writes once the backlog passes the bound",
                metadata: [
                    "error": "\(message)", "unpersisted": "\(unpersisted)",
                    "backlogBound": "\(options.maxUnpersistedItemsWhileFailing)",
                ])
        } else if now &- failureLoggedAt.load(ordering: .relaxed)
            >= UInt64(Limits.persistenceFailureLogIntervalSeconds) * 1_000_000_000
        {
            failureLoggedAt.store(now, ordering: .relaxed)
            let seconds = (now &- failingSince.load(ordering: .relaxed)) / 1_000_000_000
            logger.error(
                "storage still cannot persist",
                metadata: [
                    "error": "\(message)", "unpersisted": "\(unpersisted)", "failingForSeconds": "\(seconds)",
                    "failedCommits": "\(persistFailures.load(ordering: .relaxed))",
                ])
        }
        failAllWaiters(.persistenceFailing(message))
    }

    /// A retried batch committed: persistence works again.
    func diskRecovered() {
        guard diskFailed.exchange(false, ordering: .sequentiallyConsistent) else { return }
        diskFailure.withLock { $0 = nil }
        let seconds = Double(monotonicNanos() &- failingSince.load(ordering: .relaxed)) / 1e9
        failingSince.store(0, ordering: .relaxed)
        logger.notice("storage persists again", metadata: ["failedForSeconds": "\(seconds)"])
    }

    func failAllWaiters(_ error: EngineError) {
        for vb in vbuckets {
            let ws = vb.table.withLock { t -> [PersistenceWaiter] in
                let w = t.waiters
                t.waiters = []
                return w
            }
            for w in ws { w.completion(.failure(error)) }
        }
    }

    var diskFailureMessage: String? { diskFailure.withLock { $0 } }
}
