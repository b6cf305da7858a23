import Foundation
import SetteeCore
import SetteeJSON

/// The tombstone purge's decisions as pure values (ADR 0145): which deleted documents are old enough to go, how far
/// purges have reached into the sequence space, and the status `GET /db/_compact?type=tombstone` answers.
enum TombstonePurgeRule {
    /// Whether a document's tombstone is due for purging at `now` (seconds since the epoch): its winner is deleted and
    /// was deleted at least `intervalSeconds` ago (Sync Gateway's `meta_purge_interval` test on `_sync.tombstoned_at`).
    /// A tombstone without a deletion time (written before the time was kept) is never due: only `_purge` removes it.
    /// A deletion time in the future (a clock moved back) is not due either.
    static func isDue(winnerDeleted: Bool, tombstonedAt: UInt32?, now: UInt32, intervalSeconds: Double) -> Bool {
        guard winnerDeleted, let at = tombstonedAt, now >= at, intervalSeconds.isFinite else { return false }
        return Double(now - at) >= max(0, intervalSeconds)
    }

    /// A purge interval in days (nil: `bucketDays`, else Couchbase's default) as seconds.
    static func intervalSeconds(configDays: Double?, bucketDays: Double?) -> Double {
        let days = configDays ?? bucketDays ?? Limits.defaultPurgeIntervalDays
        return max(0, days.isFinite ? days : Limits.defaultPurgeIntervalDays) * 86_400
    }
}

/// How far purges reached: the highest sequence of a tombstone removed from the database (by tombstone compaction,
/// or by `_purge` of a deleted document), as CouchDB's `purge_seq` tells replicas that purges happened.
///
/// A replica whose checkpoint is below it may have missed a deletion whose tombstone no longer exists, and a pull from
/// there could only hand it the documents that remain: the deleted one would stay live on the replica forever. So such
/// a pull is refused with `GatewayError.checkpointPredatesPurge` (HTTP 410) naming the horizon: the replicator stops
/// with that error instead of going on without the deletion, and restarting its pull from 0 (a reset checkpoint, as a
/// DCP consumer rolled back to 0 rebuilds) serves it. A checkpoint at or above the horizon saw every purged tombstone's
/// deletion (a feed's `last_seq` only passes a sequence after delivering it or finding it invisible to the reader), and
/// a pull from 0 holds nothing yet; both go on as before.
///
/// A pull that started from 0 after a purge pages on from each page's `last_seq`, which stays below the horizon while
/// it walks documents unchanged since before it (ADR 0145 amendment). Such a pull cannot have missed a deletion purged
/// before it began (it never saw those documents live), so the tokens it is handed carry the horizon it began at
/// (`ChangesSince.pullHorizon`, `pullHorizon(startingFrom:stable:)`): it goes on while the horizon has not risen past
/// that mark. A later purge raises the horizon above the mark (a deletion after the pull began has a higher sequence
/// than anything it began with), and the pull is refused as a plain checkpoint below the horizon is.
public struct PurgeHorizon: Sendable, Equatable {
    /// The highest purged tombstone's sequence; 0 while nothing was purged.
    public var purgedThrough: UInt64

    public init(purgedThrough: UInt64 = 0) { self.purgedThrough = purgedThrough }

    /// Whether a pull from `since` may go on: from 0, from at or above the horizon, or from a token of a pull that
    /// began at a horizon (`ChangesSince.pullHorizon`) no lower than today's (no purge since it began).
    public func admits(_ since: ChangesSince) -> Bool {
        if since == .zero { return true }
        if since.plainSince >= purgedThrough { return true }
        return since.pullHorizon != 0 && since.pullHorizon >= purgedThrough
    }

    /// The horizon a pull from `since` began at, to mark the tokens it is handed with (0: none to mark): the one its
    /// `since` carries; for a pull from 0, this horizon (read before the page) capped at `stable`, the sequence its
    /// first page was read at (a tombstone above `stable` may not be in that page's view: a purge of it must raise
    /// the horizon past the mark); none for a plain `since` (admitted at or above the horizon, it stays above it).
    public func pullHorizon(startingFrom since: ChangesSince, stable: UInt64) -> UInt64 {
        if since.pullHorizon != 0 { return since.pullHorizon }
        return since == .zero ? min(purgedThrough, stable) : 0
    }

    /// The stored form (`_sync:purged`): `{"purged_through": N}`.
    func json() -> JSON { .object([("purged_through", .number(Double(purgedThrough)))]) }

    /// Reads the stored form; an unreadable one counts as nothing purged.
    init(bytes: [UInt8]) {
        let n = (try? JSON.parse(bytes))?["purged_through"]?.uint64Value ?? 0
        self.init(purgedThrough: n)
    }
}

extension GatewayError {
    /// A pull whose `since` predates purged tombstones (`PurgeHorizon`): 410 Gone, naming where purges reached.
    static func checkpointPredatesPurge(since: ChangesSince, horizon: PurgeHorizon) -> GatewayError {
        .status(
            410,
            "since \(since) predates tombstones purged through sequence \(horizon.purgedThrough): a deletion may have been missed; restart the pull from 0 with a reset checkpoint"
        )
    }
}

/// The tombstone compaction's state as `GET /db/_compact?type=tombstone` shows it (Sync Gateway's background-process
/// status: `status` is one of `running`, `stopping`, `stopped`, `completed`, `error`).
struct TombstoneCompactionStatus: Sendable, Equatable {
    enum State: String, Sendable {
        case running, stopping, stopped, completed, error
    }

    var state = State.stopped
    /// Seconds since the epoch when the last run started (nil: never ran).
    var startTime: UInt32?
    /// Tombstones the current (or last) run purged.
    var docsPurged = 0
    /// Documents the current (or last) run looked at.
    var docsChecked = 0
    /// Channel removals the current (or last) run pruned from documents not written since they became due
    /// (`GatewayDatabase.pruneIdleMetadata`; not a Sync Gateway field).
    var channelHistoryPruned = 0
    /// Documents the current (or last) run trimmed the `recent_sequences` of (not written since the previous run; not
    /// a Sync Gateway field).
    var recentSequencesTrimmed = 0
    /// The stable sequence when the last run's at-rest pass planned (0: none yet since the database opened): a
    /// document whose sequence is at or below it was not written for a whole run interval, and only such a document
    /// has its recent sequences trimmed (`GatewayDatabase.pruneIdleMetadata`). Kept across runs.
    var idleSequenceMark: UInt64 = 0
    /// Runs started since the database opened (the `compact_id` of the current or last one).
    var runs = 0
    var lastError = ""

    var isRunning: Bool { state == .running || state == .stopping }

    /// A run starts: false (nothing changes) when one is running already.
    mutating func start(now: UInt32) -> Bool {
        guard !isRunning else { return false }
        state = .running
        startTime = now
        docsPurged = 0
        docsChecked = 0
        channelHistoryPruned = 0
        recentSequencesTrimmed = 0
        runs += 1
        lastError = ""
        return true
    }

    /// `action=stop`: false when no run is going.
    mutating func requestStop() -> Bool {
        guard state == .running else { return false }
        state = .stopping
        return true
    }

    /// The run ended: completed unless it was stopped, or failed with `error`.
    mutating func finish(error: String?) {
        if let error {
            state = .error
            lastError = error
        } else {
            state = state == .stopping ? .stopped : .completed
        }
    }

    func json() -> JSON {
        var m: [(String, JSON)] = [("status", .string(state.rawValue))]
        if let startTime {
            let date = Date(timeIntervalSince1970: TimeInterval(startTime))
            m.append(("start_time", .string(date.formatted(.iso8601))))
        }
        m.append(("last_error", .string(lastError)))
        m.append(("compact_id", .string(runs == 0 ? "" : String(runs))))
        m.append(("docs_purged", .number(Double(docsPurged))))
        m.append(("docs_checked", .number(Double(docsChecked))))
        m.append(("channel_history_pruned", .number(Double(channelHistoryPruned))))
        m.append(("recent_sequences_trimmed", .number(Double(recentSequencesTrimmed))))
        return .object(m)
    }
}
