import Foundation
import SetteeJSON

/// What `GET /db/_compact?type=attachment` answers (ADR 0151), in Sync Gateway 3.x's attachment-compaction shape:
/// `{"status": "running"|"completed"|"stopped", "start_time"?, "last_error", "compact_id", "marked_attachments",
/// "purged_attachments"}`, plus our `docs_changed` (documents whose old revision bodies the run dropped).
/// Marking: every blob a kept revision body references; sweeping: every other blob in the bucket, deleted.
struct AttachmentCompactionStatus: Sendable, Equatable {
    var running = false
    /// Seconds since the epoch when the last run started (nil: never ran).
    var startTime: UInt32?
    /// Runs started since the database opened (the `compact_id` of the current or last one).
    var runs = 0
    var markedAttachments = 0
    var purgedAttachments = 0
    var docsChanged = 0

    /// A run starts: false (nothing changes) when one is running already.
    mutating func start(now: UInt32) -> Bool {
        guard !running else { return false }
        running = true
        startTime = now
        runs += 1
        markedAttachments = 0
        purgedAttachments = 0
        docsChanged = 0
        return true
    }

    func json() -> JSON {
        var m: [(String, JSON)] = [("status", .string(running ? "running" : (runs == 0 ? "stopped" : "completed")))]
        if let startTime {
            m.append(("start_time", .string(Date(timeIntervalSince1970: TimeInterval(startTime)).formatted(.iso8601))))
        }
        m.append(("last_error", .string("")))
        m.append(("compact_id", .string(runs == 0 ? "" : String(runs))))
        m.append(("marked_attachments", .number(Double(markedAttachments))))
        m.append(("purged_attachments", .number(Double(purgedAttachments))))
        m.append(("docs_changed", .number(Double(docsChanged))))
        return .object(m)
    }
}

/// What keeps an attachment compaction's sweep from deleting a blob a revision written during the run refers to
/// (ADR 0151 amendment). The mark phase reads the documents the index knew when the run started; a document created
/// or updated after its turn, or a write whose attachment shares a blob already stored (blobs are content-addressed:
/// `_sync:att:<digest>`, inserted once), refers to a blob the mark never saw. A commit names the blob keys its new
/// revision refers to before it stores anything (`begin`) and again when it is done (`end`); a run protects the keys
/// of the commits in flight when it starts and of every commit begun while it goes. The sweep removes a blob only
/// when nothing protects it (`mayRemove`), and asks again after the removal: a write that named it meanwhile makes
/// the sweep put it back. The keys held are bounded by the blobs the commits in flight and those of one run refer to
/// (each a blob in the bucket); a run's protection is dropped when it ends.
struct AttachmentSweepGuard: Sendable, Equatable {
    private(set) var running = false
    private var protected: Set<String> = []
    /// Blob keys of the commits in progress, with how many refer to each.
    private var inFlight: [String: Int] = [:]

    /// A run starts: the commits in flight are protected from it.
    mutating func start() {
        running = true
        protected = Set(inFlight.keys)
    }

    /// The run ends: nothing is protected any more.
    mutating func finish() {
        running = false
        protected = []
    }

    /// A commit referring to `keys` (blob keys) begins: kept from the sweep of a run going now or starting before
    /// it ends.
    mutating func begin(_ keys: [String]) {
        for k in keys { inFlight[k, default: 0] += 1 }
        if running { protected.formUnion(keys) }
    }

    /// The commit `begin` named `keys` for is done (written or not).
    mutating func end(_ keys: [String]) {
        for k in keys {
            guard let n = inFlight[k] else { continue }
            inFlight[k] = n > 1 ? n - 1 : nil
        }
    }

    /// Whether the sweep may remove `key`: false when a write of this run refers to it. Asked once before the
    /// removal and again after it: false then means a write referred to it meanwhile, and the sweep puts it back.
    func mayRemove(_ key: String) -> Bool { !protected.contains(key) }
}
