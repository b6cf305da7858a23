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
