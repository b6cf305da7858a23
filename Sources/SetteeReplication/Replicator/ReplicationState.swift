import SetteeCore
import SetteeJSON

/// The replicator's rules as a pure value: events in, actions out; no I/O, no clock (delays are
/// actions), so every rule is unit-tested without sockets. `Replicator` performs the actions over two
/// `ReplicationEndpoint`s and feeds back what happened.
///
/// Phases (one batch at a time):
/// ```
///  stopped ─start─▶ loadingCheckpoints ─loaded─▶ readingChanges ◀──────────────────────┐
///                         ▲                  rows │   │ none: one-shot → stopped        │
///   waitingRetry/offline ─┘ (if not yet loaded)   ▼   └ continuous → readingChanges      │
///        ▲                                     diffing ─nothing missing─┐  (longpoll)   │
///        │ transient error / network down         │ missing            ▼               │
///        └───────────── any phase            fetching ⇄ uploading ─▶ checkpointing ─saved┘
/// ```
/// Invariants:
/// 1. `since` only moves forward to a batch's `lastSeq` after every revision of that batch was uploaded
///    (or failed per document) and the checkpoint was saved: a restart never skips a change.
/// 2. Per-document write failures (`_bulk_docs` error rows, revisions the source cannot give) are counted
///    in `docWriteFailures` once and never retried, even when a retried batch meets them again; only
///    whole-request failures are retried. A per-document failure that is the peer's state, not the document's
///    (503, 504, 408, 429: a full disk, a bucket in failover) is not one of them: the rest of the batch goes on, and then
///    the batch fails as a transient whole-request failure instead of being checkpointed, so the revision is asked
///    for again (as Couchbase Lite keeps such a revision's sequence pending).
/// 3. Transient failures retry after `min(backoffMax, backoffInitial * 2^(n-1))` ms for the n-th retry in a
///    row; progress (a batch checkpointed, or an empty feed answer) resets n. Non-transient failures stop the
///    replication, and so does the `maxAttempts`-th transient failure in a row (when set).
/// 4. `completed <= total`; a batch abandoned by a retry is taken out of `total` again.
/// 5. Events that do not belong to the current phase (answers to cancelled requests) change nothing.
/// 6. `prefetch` is only a hint; the next `fetch` action asks for exactly the same chunk.
/// 7. The network's reachability is remembered in every phase, `stopped` included: a start while it is down goes
///    `offline` without connecting, and connects when it comes back (as Couchbase Lite's replicator does).
public struct ReplicationState: Sendable {
    public struct Options: Sendable, Equatable {
        public var continuous: Bool
        public var batchSize: Int
        public var bulkGetBatchSize: Int
        public var backoffInitialMs: Int
        public var backoffMaxMs: Int
        /// Failed attempts in a row after which the replication stops with the last error; nil: never.
        public var maxAttempts: Int?
        /// The document ids a `_doc_ids` filter names (nil: no such filter): rows of other documents are not
        /// followed, whatever the source lists.
        public var documentIDs: Set<String>?
        /// A one-shot replication ends after a batch shorter than `batchSize` (a `_changes` answer with fewer rows
        /// than asked is the end of the feed). False: only after an empty batch (BLIP's `changes` messages are as
        /// long as the server makes them, and the end is an empty one; replication-protocol.adoc §subChanges).
        public var shortBatchEndsOneShot: Bool = true
        /// A pull into a database that was empty when it started from no checkpoint is not sent the deleted
        /// documents it never held: a row whose winner is deleted (so every leaf is) and of which the target has no
        /// revision at all (`_revs_diff`: missing, no possible ancestor) is not fetched. Couchbase Lite's rule
        /// (LiteCore's `skipDeleted` on a first pull into an empty database; the BLIP side asks `activeOnly`), kept
        /// here without its race: a document this pull stored live has revisions in the target, so its later
        /// deletion is fetched. Set for Lite's pulls (`ReplicatorOptions.skipsTombstonesIntoEmptyTarget`).
        public var skipsTombstonesIntoEmptyTarget = false

        public init(
            continuous: Bool = false, batchSize: Int = ReplicationLimits.defaultBatchSize,
            bulkGetBatchSize: Int = ReplicationLimits.bulkGetBatchSize,
            backoffInitialMs: Int = ReplicationLimits.retryBackoffInitialMs,
            backoffMaxMs: Int = ReplicationLimits.retryBackoffMaxMs, maxAttempts: Int? = nil,
            documentIDs: Set<String>? = nil
        ) {
            precondition(batchSize > 0 && bulkGetBatchSize > 0, "batch sizes must be positive")
            precondition(backoffInitialMs > 0 && backoffMaxMs >= backoffInitialMs, "bad backoff bounds")
            self.continuous = continuous
            self.batchSize = batchSize
            self.bulkGetBatchSize = bulkGetBatchSize
            self.backoffInitialMs = backoffInitialMs
            self.backoffMaxMs = backoffMaxMs
            self.maxAttempts = maxAttempts.map { max(1, $0) }
            self.documentIDs = documentIDs
        }
    }

    /// What the replicator is doing, as Couchbase Lite reports it.
    public enum Activity: String, Sendable, Equatable {
        case stopped, offline, connecting, idle, busy
    }

    public struct Status: Sendable, Equatable {
        public var activity: Activity
        /// Changes processed (uploaded, already present, or failed per document).
        public var completed: Int
        /// Changes seen so far.
        public var total: Int
        public var docsRead: Int
        public var docsWritten: Int
        public var docWriteFailures: Int
        public var lastError: ReplicationError?
    }

    public enum Event: Sendable, Equatable {
        case start
        /// Both `_local` logs read (nil when absent); `sessionID` is new and random for this run; `targetEmpty`:
        /// the target held no document then (asked only with `Options.skipsTombstonesIntoEmptyTarget`).
        case checkpointsLoaded(
            source: ReplicationCheckpoint?, target: ReplicationCheckpoint?, sessionID: String, targetEmpty: Bool = false
        )
        case changesReceived(ChangesBatch)
        case revsDiffAnswered([String: RevsDiffEntry])
        case revisionsFetched([FetchedRevision])
        /// `_bulk_docs` rows, one per uploaded document.
        case uploaded([JSON])
        case checkpointSaved
        case failed(ReplicationError)
        case retryTimerFired
        case networkChanged(reachable: Bool)
        /// The policy hook said "not now"; try again after `recheckMs`.
        case deferred(recheckMs: Int)
        case stop
    }

    public enum Action: Sendable, Equatable {
        case loadCheckpoints
        case requestChanges(since: SequenceID?, limit: Int, feed: ChangesFeedKind)
        case requestRevsDiff([String: [String]])
        case fetch([BulkGetRequest])
        /// A hint: the next `fetch` will ask exactly this; the shell may start it now so it overlaps the
        /// upload that follows (the state still waits for that `fetch`'s event as usual).
        case prefetch([BulkGetRequest])
        case upload([FetchedRevision])
        /// Write this log to both sides (`_local/<replication id>`).
        case saveCheckpoint(ReplicationCheckpoint)
        case scheduleRetry(afterMs: Int)
        /// Abandon the request in flight (its answer, if any, must not be fed back).
        case cancelInFlight
        /// The replication ended (one-shot done, stopped, or a permanent error: see `status`).
        case finished
    }

    enum Phase: Sendable, Equatable {
        case stopped, loadingCheckpoints, readingChanges, diffing, fetching, uploading, checkpointing
        case waitingRetry, offline
    }

    public let options: Options
    private(set) var phase = Phase.stopped
    public private(set) var status = Status(
        activity: .stopped, completed: 0, total: 0, docsRead: 0, docsWritten: 0, docWriteFailures: 0, lastError: nil)
    /// The last checkpointed sequence (nil: from the beginning).
    public private(set) var since: SequenceID?
    /// The log as last saved (or loaded); nil before the checkpoints are read.
    public private(set) var log: ReplicationCheckpoint?
    private var batch: ChangesBatch?
    private var batchDocRows = 0
    private var fetchQueue: [[BulkGetRequest]] = []
    private var caughtUp = false
    /// This run pulls into a database that was empty at its start from no checkpoint
    /// (`Options.skipsTombstonesIntoEmptyTarget`).
    private var intoEmptyTarget = false
    /// Deleted documents this run did not fetch because the target never held them (`intoEmptyTarget`).
    public private(set) var tombstonesSkipped = 0
    /// Revisions that failed per document in this run (`id NUL rev`): skipped if a retried batch meets them
    /// again, so they are neither retried nor counted twice.
    private var failedRevisions: Set<String> = []
    /// The leaf revisions of each document this batch asked the target about (`_revs_diff`).
    private var diffRequest: [String: [String]] = [:]
    /// The documents this batch asked the source for revisions of: a fetched revision of another is not stored. Not
    /// the revisions: `open_revs` with `latest=true` answers a newer leaf of a revision asked for.
    private var requested: Set<String> = []
    private var uploading: [FetchedRevision] = []
    /// The first per-document failure of this batch that the peer may not repeat (invariant 2): set, the batch
    /// is not checkpointed but retried.
    private var transientFailure: ReplicationError?
    private var retries = 0
    /// What the last `networkChanged` said (true until told otherwise); kept while stopped (invariant 7).
    private var networkReachable = true
    private var feedAfterCatchUp: ChangesFeedKind { options.continuous && caughtUp ? .longpoll : .normal }

    public init(options: Options) {
        self.options = options
    }

    /// Applies one event; returns what to do next, in order.
    public mutating func handle(_ event: Event) -> [Action] {
        switch event {
        case .start:
            guard phase == .stopped else { return [] }
            status.lastError = nil
            retries = 0
            if !networkReachable {
                phase = .offline
                status.activity = .offline
                return []
            }
            return beginConnecting()

        case .checkpointsLoaded(let source, let target, let sessionID, let targetEmpty):
            guard phase == .loadingCheckpoints else { return [] }
            since = ReplicationCheckpoint.startSequence(source: source, target: target)
            intoEmptyTarget = options.skipsTombstonesIntoEmptyTarget && targetEmpty && since == nil
            let base = target ?? source
            log = ReplicationCheckpoint(
                sessionID: sessionID, sourceLastSeq: since ?? .zero, history: base?.history ?? [], rev: nil)
            return requestNext()

        case .changesReceived(let received):
            guard phase == .readingChanges else { return [] }
            status.lastError = nil
            // A doc-ids filter holds on the rows as they come: a source listing other documents is not followed
            // (they were never asked for, and storing them would let it write any local document).
            let docRows = received.rows.filter {
                !$0.isUserRow && !$0.revs.isEmpty && (options.documentIDs?.contains($0.id) ?? true)
            }
            if received.rows.isEmpty {
                retries = 0
                if !options.continuous {
                    return finish(error: nil)
                }
                caughtUp = true
                if let last = received.lastSeq { since = last }
                status.activity = .idle
                return [.requestChanges(since: since, limit: options.batchSize, feed: .longpoll)]
            }
            batch = received
            batchDocRows = docRows.count
            status.total += docRows.count
            status.activity = .busy
            caughtUp = received.rows.count < options.batchSize
            if docRows.isEmpty { return checkpointBatch() }
            var request: [String: [String]] = [:]
            for row in docRows { request[row.id, default: []].append(contentsOf: row.revs) }
            diffRequest = request
            phase = .diffing
            return [.requestRevsDiff(request)]

        case .revsDiffAnswered(let answer):
            guard phase == .diffing, let batch else { return [] }
            var requests: [BulkGetRequest] = []
            var seen = Set<String>()
            // Only what was asked about: a target naming other documents or revisions as missing (a hostile one on a
            // push) would otherwise be sent documents outside the replication's filter.
            for row in batch.rows where seen.insert(row.id).inserted {
                guard let entry = answer[row.id], let asked = diffRequest[row.id] else { continue }
                if intoEmptyTarget && row.deleted && entry.possibleAncestors.isEmpty && !entry.missing.isEmpty {
                    tombstonesSkipped += 1
                    continue
                }
                for rev in entry.missing where asked.contains(rev) && !failedRevisions.contains(row.id + "\u{0}" + rev)
                {
                    requests.append(BulkGetRequest(id: row.id, rev: rev, attsSince: entry.possibleAncestors))
                }
            }
            if requests.isEmpty { return checkpointBatch() }
            requested = Set(requests.map(\.id))
            fetchQueue = stride(from: 0, to: requests.count, by: options.bulkGetBatchSize).map {
                Array(requests[$0..<min(requests.count, $0 + options.bulkGetBatchSize)])
            }
            phase = .fetching
            return [.fetch(fetchQueue.removeFirst())]

        case .revisionsFetched(let revisions):
            guard phase == .fetching else { return [] }
            // Only revisions of documents this batch asked for are stored: a source answering with another
            // document is not believed.
            let good = revisions.filter { $0.error == nil && requested.contains($0.id) }
            var later = 0
            for r in revisions {
                guard let e = r.error else { continue }
                if e.isPeerUnavailable && requested.contains(r.id) {
                    later += 1
                    noteTransient(e, id: r.id, rev: r.rev)
                } else {
                    failedRevisions.insert(r.id + "\u{0}" + r.rev)
                }
            }
            status.docsRead += good.count
            status.docWriteFailures += revisions.count - good.count - later
            if good.isEmpty { return nextFetchOrCheckpoint() }
            phase = .uploading
            uploading = good
            if let next = fetchQueue.first { return [.prefetch(next), .upload(good)] }
            return [.upload(good)]

        case .uploaded(let rows):
            guard phase == .uploading else { return [] }
            var failed = 0
            var later = 0
            for (i, row) in rows.enumerated() {
                guard let name = row["error"] else { continue }
                let id = row["id"]?.stringValue ?? (i < uploading.count ? uploading[i].id : "")
                let error = name.stringValue ?? "error"
                let code = row["status"]?.intValue ?? CouchError.status(named: error) ?? 400
                let refusal = CouchError(status: code, error: error, reason: row["reason"]?.stringValue ?? "")
                if refusal.isPeerUnavailable {
                    later += 1
                    noteTransient(refusal, id: id, rev: row["rev"]?.stringValue ?? "")
                    continue
                }
                failed += 1
                // The row's own rev when it names one this upload sent (two revisions of one document can be in one
                // upload: the first by id alone may be the one the target took); else the first sent for the id.
                let sent = uploading.lazy.filter { $0.id == id }.map(\.rev)
                let named = row["rev"]?.stringValue
                let rev = named.flatMap { r in sent.contains(r) ? r : nil } ?? sent.first ?? named ?? ""
                failedRevisions.insert(id + "\u{0}" + rev)
            }
            // Written: what was sent less what a row refused. Not `rows.count - failed`: CouchDB 2 and 3 answer a
            // `new_edits:false` `_bulk_docs` with error rows only, so its rows do not count the documents taken.
            status.docWriteFailures += failed
            status.docsWritten += max(0, uploading.count - failed - later)
            uploading = []
            return nextFetchOrCheckpoint()

        case .checkpointSaved:
            guard phase == .checkpointing, let batch else { return [] }
            retries = 0
            if let last = batch.lastSeq { since = last }
            status.completed += batchDocRows
            let full = batch.rows.count >= options.batchSize
            self.batch = nil
            batchDocRows = 0
            if !options.continuous && !full && options.shortBatchEndsOneShot { return finish(error: nil) }
            return requestNext()

        case .failed(let error):
            guard phase != .stopped && phase != .waitingRetry && phase != .offline else { return [] }
            abandonBatch()
            status.lastError = error
            guard error.isTransient else { return finish(error: error) }
            retries += 1
            if let limit = options.maxAttempts, retries >= limit { return finish(error: error) }
            phase = .waitingRetry
            status.activity = .offline
            let delay = Backoff.doubling(options.backoffInitialMs, attempt: retries - 1, cap: options.backoffMaxMs)
            return [.scheduleRetry(afterMs: delay)]

        case .retryTimerFired:
            guard phase == .waitingRetry else { return [] }
            return log == nil ? beginConnecting() : requestNext()

        case .deferred(let recheckMs):
            guard phase != .stopped && phase != .waitingRetry && phase != .offline else { return [] }
            abandonBatch()
            phase = .waitingRetry
            status.activity = .offline
            return [.cancelInFlight, .scheduleRetry(afterMs: recheckMs)]

        case .networkChanged(let reachable):
            networkReachable = reachable
            if reachable {
                guard phase == .offline || phase == .waitingRetry else { return [] }
                retries = 0
                return log == nil ? beginConnecting() : requestNext()
            }
            guard phase != .stopped && phase != .offline else { return [] }
            abandonBatch()
            phase = .offline
            status.activity = .offline
            return [.cancelInFlight]

        case .stop:
            guard phase != .stopped else { return [] }
            abandonBatch()
            phase = .stopped
            status.activity = .stopped
            return [.cancelInFlight, .finished]
        }
    }

    /// The batch is done: record its last sequence in the log and ask for it to be saved (nothing to
    /// save when the sequence did not move).
    private mutating func checkpointBatch() -> [Action] {
        if let failure = transientFailure { return handle(.failed(failure)) }
        guard let batch, let lastSeq = batch.lastSeq, lastSeq != since, let current = log else {
            phase = .checkpointing
            return handle(.checkpointSaved)
        }
        let entry = ReplicationCheckpoint.Entry(
            sessionID: current.sessionID, recordedSeq: lastSeq, docsRead: status.docsRead,
            docsWritten: status.docsWritten, docWriteFailures: status.docWriteFailures)
        log = current.recording(entry)
        phase = .checkpointing
        return [.saveCheckpoint(log!)]
    }

    private mutating func nextFetchOrCheckpoint() -> [Action] {
        if fetchQueue.isEmpty { return checkpointBatch() }
        phase = .fetching
        return [.fetch(fetchQueue.removeFirst())]
    }

    private mutating func requestNext() -> [Action] {
        phase = .readingChanges
        let feed = feedAfterCatchUp
        status.activity = feed == .longpoll ? .idle : .busy
        return [.requestChanges(since: since, limit: options.batchSize, feed: feed)]
    }

    private mutating func beginConnecting() -> [Action] {
        phase = .loadingCheckpoints
        status.activity = .connecting
        return [.loadCheckpoints]
    }

    /// Records a per-document failure the peer may not repeat: the batch's other revisions go on, and the batch
    /// then fails with the first such failure instead of being checkpointed (invariant 2).
    private mutating func noteTransient(_ e: CouchError, id: String, rev: String) {
        guard transientFailure == nil else { return }
        transientFailure = .http(status: e.status, error: e.error, reason: "\(id) \(rev): \(e.reason)")
    }

    private mutating func abandonBatch() {
        if batch != nil { status.total -= batchDocRows }
        transientFailure = nil
        uploading = []
        batch = nil
        batchDocRows = 0
        fetchQueue = []
    }

    private mutating func finish(error: ReplicationError?) -> [Action] {
        phase = .stopped
        status.activity = .stopped
        status.lastError = error
        return [.finished]
    }
}
