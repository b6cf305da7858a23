import SetteeCore
import SetteeJSON
import Synchronization

/// Backups and restores that `settee backup` / `settee restore` report to the cluster while they run
/// (`POST /controller/reportBackupTask`), shown in `GET /pools/default/tasks` beside the rebalance, compactions and logs
/// collections (issue 72 item 4). The CLI does the work; the orchestrator only keeps what it was last told.
///
/// Bounded: at most `Limits.reportedTasksKept` tasks (a report past it replaces the least recently reported one,
/// finished ones first); a finished task is shown for `Limits.reportedTaskKeptSeconds` after its last report, and a
/// running one that stopped reporting for `Limits.reportedTaskStaleSeconds` is shown as `"status":"stale"` (its
/// process may have died) until it too ages out. Pure: time comes in as `now` (monotonic seconds).
public struct ReportedTasks: Sendable, Equatable {
    /// One report: the task's whole state as its reporter last saw it.
    public struct Report: Sendable, Equatable {
        /// The reporter's id for the task (`statusId`): 1-128 characters of `[A-Za-z0-9._:/-]`.
        public var id: String
        /// `backup` or `restore`.
        public var kind: String
        public var bucket: String
        /// The backup's name in its repository.
        public var name: String
        /// `running`, `completed` or `failed`.
        public var status: String
        /// 0-100.
        public var progress: Int
        public var items: Int
        public var bytes: Int
        /// Why a failed task failed (at most `Limits.reportedTaskMessageBytes` bytes).
        public var message: String

        public init(
            id: String, kind: String, bucket: String, name: String, status: String, progress: Int, items: Int,
            bytes: Int, message: String = ""
        ) {
            self.id = id
            self.kind = kind
            self.bucket = bucket
            self.name = name
            self.status = status
            self.progress = progress
            self.items = items
            self.bytes = bytes
            self.message = message
        }

        static let kinds: Set<String> = ["backup", "restore"]
        static let statuses: Set<String> = ["running", "completed", "failed"]

        /// Why the report cannot be kept (a field out of its range), or nil.
        public var refusal: (field: String, message: String)? {
            let idCharacters = id.utf8.allSatisfy { b in
                (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a)
                    || b == 0x2e || b == 0x5f || b == 0x3a || b == 0x2f || b == 0x2d
            }
            if id.isEmpty || id.utf8.count > 128 || !idCharacters {
                return ("id", "1-128 characters of letters, digits and . _ : / -")
            }
            if !Self.kinds.contains(kind) { return ("kind", "backup or restore") }
            if !Self.statuses.contains(status) { return ("status", "running, completed or failed") }
            if bucket.isEmpty || bucket.utf8.count > Limits.maxBucketNameLength { return ("bucket", "a bucket name") }
            if name.utf8.count > 128 { return ("name", "at most 128 bytes") }
            if !(0...100).contains(progress) { return ("progress", "0-100") }
            if items < 0 || bytes < 0 { return ("items", "not negative") }
            if message.utf8.count > Limits.reportedTaskMessageBytes {
                return ("message", "at most \(Limits.reportedTaskMessageBytes) bytes")
            }
            return nil
        }
    }

    struct Kept: Sendable, Equatable {
        var report: Report
        var at: Double
    }

    private(set) var kept: [String: Kept] = [:]

    public init() {}

    /// Keeps `report` (replacing the task's earlier one), evicting as the bound says. A refused report changes
    /// nothing (the caller answers its `refusal`).
    public mutating func record(_ report: Report, now: Double) {
        guard report.refusal == nil else { return }
        forgetExpired(now: now)
        if kept[report.id] == nil, kept.count >= Limits.reportedTasksKept {
            let victim =
                kept.values.filter { $0.report.status != "running" }.min { $0.at < $1.at }
                ?? kept.values.min { $0.at < $1.at }
            if let victim { kept[victim.report.id] = nil }
        }
        kept[report.id] = Kept(report: report, at: now)
    }

    /// The tasks to show at `now`, oldest report first, as `/pools/default/tasks` entries.
    public func tasksJSON(now: Double) -> [JSON] {
        kept.values.filter { now - $0.at < Double(Limits.reportedTaskKeptSeconds) }.sorted { $0.at < $1.at }.map {
            let r = $0.report
            let stale = r.status == "running" && now - $0.at >= Double(Limits.reportedTaskStaleSeconds)
            var fields: [(String, JSON)] = [
                ("type", .string(r.kind)), ("statusId", .string(r.id)), ("status", .string(stale ? "stale" : r.status)),
                ("bucket", .string(r.bucket)), ("name", .string(r.name)), ("progress", .int(r.progress)),
                ("items", .int(r.items)), ("bytes", .int(r.bytes)),
                ("secondsSinceReport", .int(Int(max(0, now - $0.at)))), ("recommendedRefreshPeriod", 2),
            ]
            if !r.message.isEmpty { fields.append(("errorMessage", .string(r.message))) }
            return .object(fields)
        }
    }

    private mutating func forgetExpired(now: Double) {
        kept = kept.filter { now - $0.value.at < Double(Limits.reportedTaskKeptSeconds) }
    }
}

/// The node's `ReportedTasks`, shared by the routes.
final class ReportedTaskBoard: Sendable {
    private let tasks = Mutex(ReportedTasks())
    private let started = ContinuousClock.now

    private var now: Double {
        let d = ContinuousClock.now - started
        return Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }

    func record(_ report: ReportedTasks.Report) {
        let t = now
        tasks.withLock { $0.record(report, now: t) }
    }

    func tasksJSON() -> [JSON] {
        let t = now
        return tasks.withLock { $0.tasksJSON(now: t) }
    }
}
