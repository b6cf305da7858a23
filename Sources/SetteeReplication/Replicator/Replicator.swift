import Logging
import SetteeCore
import SetteeJSON
import Synchronization

/// What a replicator reports: activity, progress counters and the last error.
public typealias ReplicationStatus = ReplicationState.Status

/// Settings of one replication.
public struct ReplicatorOptions: Sendable {
    /// Keep following the source's changes (longpoll once caught up) instead of stopping when caught up.
    public var continuous: Bool
    /// Only these documents or channels.
    public var filter: ReplicationFilter?
    public var batchSize: Int
    public var bulkGetBatchSize: Int
    public var backoffInitialMs: Int
    public var backoffMaxMs: Int
    /// Failed attempts in a row before the replication gives up with the last error; nil: Couchbase Lite's
    /// defaults (`ReplicationLimits.oneShotMaxAttempts` for a one-shot replication, unlimited when continuous).
    public var maxAttempts: Int?
    /// Asked before each `_changes` request; `false` defers syncing (metered network, battery, ...):
    /// the replicator goes `offline` and asks again after `policyRecheckMs`.
    public var policy: (@Sendable () async -> Bool)?
    public var policyRecheckMs: Int
    /// Overrides the computed replication id (names the `_local` checkpoint documents).
    public var replicationID: String?
    /// `ReplicationState.Options.shortBatchEndsOneShot` (false for BLIP, whose feed ends with an empty batch).
    var shortBatchEndsOneShot = true
    /// `ReplicationState.Options.skipsTombstonesIntoEmptyTarget`: a pull into a database empty at its start from no
    /// checkpoint does not fetch deleted documents the database never held (Couchbase Lite's first-pull rule). Lite
    /// sets it on its pulls; a replication into a database other replicas feed too should leave it off.
    public var skipsTombstonesIntoEmptyTarget = false

    public init(
        continuous: Bool = false, filter: ReplicationFilter? = nil, batchSize: Int = ReplicationLimits.defaultBatchSize,
        bulkGetBatchSize: Int = ReplicationLimits.bulkGetBatchSize,
        backoffInitialMs: Int = ReplicationLimits.retryBackoffInitialMs,
        backoffMaxMs: Int = ReplicationLimits.retryBackoffMaxMs, policy: (@Sendable () async -> Bool)? = nil,
        policyRecheckMs: Int = 1000, replicationID: String? = nil, maxAttempts: Int? = nil
    ) {
        self.maxAttempts = maxAttempts
        self.continuous = continuous
        self.filter = filter
        self.batchSize = batchSize
        self.bulkGetBatchSize = bulkGetBatchSize
        self.backoffInitialMs = backoffInitialMs
        self.backoffMaxMs = backoffMaxMs
        self.policy = policy
        self.policyRecheckMs = policyRecheckMs
        self.replicationID = replicationID
    }
}

/// Replicates one direction, `source` → `target`, by running `ReplicationState` over two endpoints:
/// the state machine decides, this shell performs its actions one at a time on a task and feeds the
/// results back. Push and pull are the same thing with the endpoints swapped.
///
/// ```swift
/// let pull = Replicator(source: try RemoteEndpoint(url: gatewayURL), target: local, options: .init(continuous: true))
/// pull.start()
/// for await s in pull.status { print(s.activity, s.completed, s.total) }
/// ```
public final class Replicator: Sendable {
    public let source: any ReplicationEndpoint
    public let target: any ReplicationEndpoint
    public let options: ReplicatorOptions
    /// Names `_local/<replicationID>` on both sides.
    public let replicationID: String
    private let logger: Logger

    private struct Shared {
        var machine: ReplicationState
        var generation = 0
        var task: Task<Void, Never>?
        var subscribers: [Int: AsyncStream<ReplicationStatus>.Continuation] = [:]
        var nextSubscriber = 0
        var waiters: [CheckedContinuation<ReplicationStatus, Never>] = []
        var finished = false
        /// `_rev` of each side's checkpoint document as last read or written.
        var sourceRev: String?
        var targetRev: String?
        /// The target's `instance_start_time` when this run connected or last checkpointed.
        var targetStart: String?
        var timings: [String: Duration] = [:]
    }
    private let shared: Mutex<Shared>

    public init(
        source: any ReplicationEndpoint, target: any ReplicationEndpoint, options: ReplicatorOptions = .init(),
        logger: Logger = Logger(label: "settee.replicator")
    ) {
        self.source = source
        self.target = target
        self.options = options
        self.replicationID =
            options.replicationID
            ?? ReplicationID.make(source: source.identity, target: target.identity, filter: options.filter)
        self.logger = logger
        var machineOptions = ReplicationState.Options(
            continuous: options.continuous, batchSize: options.batchSize, bulkGetBatchSize: options.bulkGetBatchSize,
            backoffInitialMs: options.backoffInitialMs, backoffMaxMs: options.backoffMaxMs,
            maxAttempts: options.maxAttempts ?? (options.continuous ? nil : ReplicationLimits.oneShotMaxAttempts),
            documentIDs: { if case .docIDs(let ids)? = options.filter { Set(ids) } else { nil } }())
        machineOptions.shortBatchEndsOneShot = options.shortBatchEndsOneShot
        machineOptions.skipsTombstonesIntoEmptyTarget = options.skipsTombstonesIntoEmptyTarget
        shared = Mutex(Shared(machine: ReplicationState(options: machineOptions)))
    }

    deinit {
        shared.withLock { s in
            s.task?.cancel()
            for c in s.subscribers.values { c.finish() }
        }
    }

    // MARK: Control

    /// Starts (or restarts after it stopped) from the checkpoints. Does nothing while running.
    public func start() {
        let (actions, started, offline) = shared.withLock { s -> ([ReplicationState.Action], Bool, Bool) in
            let wasStopped = s.machine.phase == .stopped
            let a = s.machine.handle(.start)
            // Started: connecting, or offline waiting for the network (no action until it comes back).
            let started = wasStopped && s.machine.phase != .stopped
            if started { s.finished = false }
            return (a, started, s.machine.phase == .offline)
        }
        guard started else { return }
        logger.info(
            "replication starting",
            metadata: [
                "id": "\(replicationID)", "continuous": "\(options.continuous)", "networkReachable": "\(!offline)",
            ])
        if offline { publish(finished: false) } else { launch(actions) }
    }

    /// Stops; the status becomes `stopped`. Returns once the run task has ended.
    public func stop() async {
        let task = shared.withLock { s -> Task<Void, Never>? in
            _ = s.machine.handle(.stop)
            s.generation += 1
            let t = s.task
            s.task = nil
            t?.cancel()
            return t
        }
        publish(finished: true)
        await task?.value
        await source.replicationEnded()
        await target.replicationEnded()
    }

    /// Tells the replicator whether the network is usable: going down abandons the request in flight and
    /// reports `offline`; coming back resumes at once (no backoff).
    public func setNetworkReachable(_ reachable: Bool) {
        let actions = shared.withLock { s -> [ReplicationState.Action] in
            let a = s.machine.handle(.networkChanged(reachable: reachable))
            if a.contains(.cancelInFlight) {
                s.generation += 1
                s.task?.cancel()
                s.task = nil
            }
            return a.filter { $0 != .cancelInFlight }
        }
        publish(finished: false)
        launch(actions)
    }

    // MARK: Status

    public var currentStatus: ReplicationStatus { shared.withLock { $0.machine.status } }
    /// Deleted documents this run did not fetch under `ReplicatorOptions.skipsTombstonesIntoEmptyTarget`.
    public var tombstonesSkipped: Int { shared.withLock { $0.machine.tombstonesSkipped } }

    /// A new stream of status changes, starting with the current one; ends when the replicator is gone.
    public var status: AsyncStream<ReplicationStatus> {
        let (stream, continuation) = AsyncStream.makeStream(
            of: ReplicationStatus.self, bufferingPolicy: .bufferingNewest(64))
        let id = shared.withLock { s -> Int in
            let id = s.nextSubscriber
            s.nextSubscriber += 1
            s.subscribers[id] = continuation
            continuation.yield(s.machine.status)
            return id
        }
        continuation.onTermination = { [weak self] _ in
            self?.shared.withLock { _ = $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    /// Waits until the replication stops (one-shot done, `stop()`, or a permanent error).
    public func waitUntilStopped() async -> ReplicationStatus {
        await withCheckedContinuation { (c: CheckedContinuation<ReplicationStatus, Never>) in
            let done = shared.withLock { s -> ReplicationStatus? in
                if s.finished || (s.machine.status.activity == .stopped && s.task == nil) { return s.machine.status }
                s.waiters.append(c)
                return nil
            }
            if let done { c.resume(returning: done) }
        }
    }

    // MARK: Running

    private func launch(_ actions: [ReplicationState.Action]) {
        guard !actions.isEmpty else { return }
        shared.withLock { s in
            s.generation += 1
            let generation = s.generation
            s.task?.cancel()
            s.task = Task { [self] in await self.run(actions, generation: generation) }
        }
        publish(finished: false)
    }

    private func run(_ initial: [ReplicationState.Action], generation: Int) async {
        var queue = initial[...]
        // `_bulk_get`s started early (`prefetch`) so the source works while the target stores the previous chunk.
        var prefetched: [[BulkGetRequest]: Task<[FetchedRevision], any Error>] = [:]
        defer { for task in prefetched.values { task.cancel() } }
        /// Hands `event` to the machine and queues the actions it answers; false when a newer run replaced this one.
        func advance(_ event: ReplicationState.Event) -> Bool {
            logDocumentFailures(event)
            let next = shared.withLock { s -> [ReplicationState.Action]? in
                guard s.generation == generation else { return nil }
                return s.machine.handle(event)
            }
            guard let next else { return false }
            publish(finished: false)
            queue.append(contentsOf: next.filter { $0 != .cancelInFlight })
            return true
        }
        while let action = queue.popFirst() {
            if Task.isCancelled { return }
            if case .prefetch(let requests) = action {
                let source = self.source
                prefetched[requests] = Task { try await source.bulkGet(requests) }
                continue
            }
            if case .fetch(let requests) = action, let early = prefetched.removeValue(forKey: requests) {
                let event: ReplicationState.Event?
                do {
                    event = .revisionsFetched(
                        try await withTaskCancellationHandler {
                            try await early.value
                        } onCancel: {
                            early.cancel()
                        })
                } catch {
                    event = Task.isCancelled ? nil : .failed(error as? ReplicationError ?? .badResponse("\(error)"))
                }
                guard let event, !Task.isCancelled, advance(event) else { return }
                continue
            }
            if action == .finished {
                let status = currentStatus
                let skipped = tombstonesSkipped
                logger.info(
                    "replication stopped",
                    metadata: [
                        "id": "\(replicationID)", "completed": "\(status.completed)",
                        "written": "\(status.docsWritten)", "tombstonesSkipped": "\(skipped)",
                        "failures": "\(status.docWriteFailures)",
                        "error": "\(status.lastError.map { "\($0)" } ?? "none")",
                    ])
                await source.replicationEnded()
                await target.replicationEnded()
                shared.withLock { s in if s.generation == generation { s.task = nil } }
                publish(finished: true)
                return
            }
            let started = ContinuousClock.now
            let event = await perform(action)
            let took = ContinuousClock.now - started
            shared.withLock { $0.timings[Replicator.kind(action), default: .zero] += took }
            guard let event else { continue }
            if Task.isCancelled || !advance(event) { return }
        }
    }

    /// A revision the source could not give or the target refused is skipped, not retried: say which and why.
    private func logDocumentFailures(_ event: ReplicationState.Event) {
        switch event {
        case .revisionsFetched(let revisions):
            for r in revisions {
                guard let error = r.error else { continue }
                logger.warning(
                    "revision not fetched",
                    metadata: ["id": "\(replicationID)", "doc": "\(r.id)", "rev": "\(r.rev)", "error": "\(error)"])
            }
        case .uploaded(let rows):
            for row in rows where row["error"] != nil {
                logger.warning(
                    "revision not written",
                    metadata: [
                        "id": "\(replicationID)", "doc": "\(row["id"]?.stringValue ?? "?")",
                        "rev": "\(row["rev"]?.stringValue ?? "?")", "error": "\(row["error"]?.stringValue ?? "?")",
                        "reason": "\(row["reason"]?.stringValue ?? "")",
                    ])
            }
        default: return
        }
    }

    /// Performs one action; the event it produced, or nil (cancelled, or nothing to report).
    private func perform(_ action: ReplicationState.Action) async -> ReplicationState.Event? {
        do {
            switch action {
            case .loadCheckpoints:
                async let s = source.getLocal(replicationID)
                async let t = target.getLocal(replicationID)
                async let started = target.ensureFullCommit()
                let (sj, tj, start) = try await (s, t, started)
                let sc = sj.flatMap(ReplicationCheckpoint.init(json:))
                let tc = tj.flatMap(ReplicationCheckpoint.init(json:))
                // Asked only when it can matter: a first pull (no log on the target) under the first-pull rule.
                let targetEmpty =
                    options.skipsTombstonesIntoEmptyTarget && tc == nil
                    ? try await target.changes(since: nil, limit: 1, feed: .normal, filter: nil, heartbeatMs: nil)
                        .rows.isEmpty : false
                shared.withLock { st in
                    st.sourceRev = sj?["_rev"]?.stringValue
                    st.targetRev = tj?["_rev"]?.stringValue
                    st.targetStart = start
                }
                return .checkpointsLoaded(
                    source: sc, target: tc, sessionID: Replicator.makeSessionID(), targetEmpty: targetEmpty)

            case .requestChanges(let since, let limit, let feed):
                if let policy = options.policy, await !policy() {
                    return .deferred(recheckMs: options.policyRecheckMs)
                }
                let batch = try await source.changes(
                    since: since?.description, limit: limit, feed: feed, filter: options.filter,
                    heartbeatMs: feed == .continuous ? ReplicationLimits.changesHeartbeatMs : nil)
                return .changesReceived(batch)

            case .requestRevsDiff(let request):
                let answer = try await target.revsDiff(request)
                return .revsDiffAnswered(try RevsDiff.parseAnswer(answer))

            case .fetch(let requests):
                return .revisionsFetched(try await source.bulkGet(requests))

            case .upload(let revisions):
                return .uploaded(try await target.bulkDocs(revisions, newEdits: false))

            case .saveCheckpoint(let log):
                try await ensureTargetKeptTheBatch()
                try await save(log, onTarget: true)
                do {
                    try await save(log, onTarget: false)
                } catch is CancellationError {
                    return nil
                } catch {
                    // A read-only source cannot keep a log; the target's still lets us resume.
                    logger.debug("source checkpoint not saved", metadata: ["error": "\(error)"])
                }
                return .checkpointSaved

            case .scheduleRetry(let ms):
                logger.debug("retrying", metadata: ["id": "\(replicationID)", "afterMs": "\(ms)"])
                try await Task.sleep(for: .milliseconds(ms))
                return .retryTimerFired

            case .cancelInFlight, .finished, .prefetch:
                return nil
            }
        } catch is CancellationError {
            return nil
        } catch let error as ReplicationError {
            if Task.isCancelled { return nil }
            logger.debug("replication step failed", metadata: ["id": "\(replicationID)", "error": "\(error)"])
            return .failed(error)
        } catch {
            if Task.isCancelled { return nil }
            return .failed(.badResponse("\(error)"))
        }
    }

    /// PUTs the log on one side with the `_rev` last seen there; on a 409 reads the current `_rev` and
    /// tries once more.
    /// Before a checkpoint moves past a batch: the target must have it on disk, and must be the instance
    /// that acknowledged it. A target that restarted since (its `instance_start_time` changed) may have
    /// lost writes it acknowledged, so the batch fails as transient and is sent again from the last
    /// checkpoint (CouchDB's replicator does the same).
    private func ensureTargetKeptTheBatch() async throws {
        let start = try await target.ensureFullCommit()
        let previous = shared.withLock { st in
            defer { st.targetStart = start }
            return st.targetStart
        }
        guard let start, let previous, start != previous else { return }
        logger.warning(
            "target restarted since the last checkpoint; sending the batch again",
            metadata: ["id": "\(replicationID)", "was": "\(previous)", "now": "\(start)"])
        throw ReplicationError.network("the target restarted (instance_start_time \(previous) -> \(start))")
    }

    private func save(_ log: ReplicationCheckpoint, onTarget: Bool) async throws {
        let endpoint = onTarget ? target : source
        var rev = shared.withLock { onTarget ? $0.targetRev : $0.sourceRev }
        for attempt in 0..<2 {
            var doc = log
            doc.rev = rev
            do {
                try await endpoint.putLocal(replicationID, doc.json())
                let next = Replicator.nextLocalRev(rev)
                shared.withLock { if onTarget { $0.targetRev = next } else { $0.sourceRev = next } }
                return
            } catch ReplicationError.http(let status, _, _) where (status == 409 || status == 404) && attempt == 0 {
                rev = try await endpoint.getLocal(replicationID)?["_rev"]?.stringValue
            }
        }
    }

    /// Wall time spent per kind of step so far (`changes`, `revsDiff`, `fetch`, `upload`, `checkpoint`,
    /// `checkpoints`, `retryWait`): where a replication's time goes, for tuning and reports.
    public var timings: [String: Duration] { shared.withLock { $0.timings } }

    static func kind(_ action: ReplicationState.Action) -> String {
        switch action {
        case .loadCheckpoints: return "checkpoints"
        case .requestChanges: return "changes"
        case .requestRevsDiff: return "revsDiff"
        case .fetch, .prefetch: return "fetch"
        case .upload: return "upload"
        case .saveCheckpoint: return "checkpoint"
        case .scheduleRetry: return "retryWait"
        case .cancelInFlight, .finished: return "other"
        }
    }

    /// `_local` documents count revisions `0-1`, `0-2`, ... (CouchDB and Sync Gateway): the `_rev` the peer
    /// holds after a PUT with `rev`. `rev` is the peer's word (`GET _local/<id>`), so a rev this side cannot
    /// count on from (not `0-N` with 0 ≤ N < `Int.max`: garbled, negative, or one a bignum peer such as CouchDB
    /// counted past `Int.max`) gives `0-1`, as a missing one does: the next save's PUT then meets a 409, and
    /// `save` reads the peer's current `_rev` and puts again. Checkpoints stay correct, nothing traps.
    static func nextLocalRev(_ rev: String?) -> String {
        guard let rev, rev.hasPrefix("0-"), let n = Int(rev.dropFirst(2)), n >= 0 else { return "0-1" }
        let (next, overflow) = n.addingReportingOverflow(1)
        return overflow ? "0-1" : "0-\(next)"
    }

    static func makeSessionID() -> String {
        var g = SystemRandomNumberGenerator()
        return String(g.next() as UInt64, radix: 16) + String(g.next() as UInt64, radix: 16)
    }

    private func publish(finished: Bool) {
        let (status, subscribers, waiters) = shared.withLock { s in
            if finished { s.finished = true }
            let w = finished ? s.waiters : []
            if finished { s.waiters = [] }
            return (s.machine.status, Array(s.subscribers.values), w)
        }
        for c in subscribers { c.yield(status) }
        for w in waiters { w.resume(returning: status) }
    }
}
