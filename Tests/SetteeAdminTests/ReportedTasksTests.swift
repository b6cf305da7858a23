import SetteeCore
import SetteeJSON
import Testing

@testable import SetteeAdmin

/// Issue 72 item 4: backups and restores in `/pools/default/tasks` as their CLIs report them, bounded in count, time
/// and size, without clocks or sockets (`now` is given).
struct ReportedTasksTests {
    static func report(_ id: String, status: String = "running", progress: Int = 10) -> ReportedTasks.Report {
        ReportedTasks.Report(
            id: id, kind: "backup", bucket: "demo", name: "2026-11-30T13_00_00.000Z", status: status,
            progress: progress, items: 5, bytes: 50)
    }

    @Test func aTaskShowsItsLastReportThenGoesStaleThenAway() {
        var t = ReportedTasks()
        t.record(Self.report("backup:demo:1"), now: 0)
        t.record(Self.report("backup:demo:1", progress: 60), now: 5)
        let shown = t.tasksJSON(now: 6)
        #expect(shown.count == 1)
        #expect(shown.first?["type"] == .string("backup") && shown.first?["status"] == .string("running"))
        #expect(shown.first?["progress"] == .int(60) && shown.first?["statusId"] == .string("backup:demo:1"))
        let stale = Double(Limits.reportedTaskStaleSeconds)
        #expect(t.tasksJSON(now: 5 + stale).first?["status"] == .string("stale"))
        t.record(Self.report("backup:demo:1", status: "completed", progress: 100), now: 10)
        let kept = Double(Limits.reportedTaskKeptSeconds)
        #expect(t.tasksJSON(now: 10 + stale).first?["status"] == .string("completed"))
        #expect(t.tasksJSON(now: 10 + kept).isEmpty)
    }

    @Test func theCountIsBoundedFinishedTasksGoFirst() {
        var t = ReportedTasks()
        t.record(Self.report("done", status: "completed"), now: 0)
        for i in 1..<Limits.reportedTasksKept { t.record(Self.report("r\(i)"), now: Double(i)) }
        #expect(t.tasksJSON(now: 40).count == Limits.reportedTasksKept)
        t.record(Self.report("new"), now: 41)
        let ids = t.tasksJSON(now: 41).compactMap { $0["statusId"]?.stringValue }
        #expect(ids.count == Limits.reportedTasksKept && !ids.contains("done") && ids.contains("new"))
        t.record(Self.report("newer"), now: 42)
        let again = t.tasksJSON(now: 42).compactMap { $0["statusId"]?.stringValue }
        #expect(again.count == Limits.reportedTasksKept && !again.contains("r1") && again.contains("newer"))
    }

    @Test func badReportsAreRefusedByField() {
        var bad: [(ReportedTasks.Report, String)] = []
        var r = Self.report("x y")
        bad.append((r, "id"))
        r = Self.report(String(repeating: "a", count: 129))
        bad.append((r, "id"))
        r = Self.report("ok")
        r.kind = "compaction"
        bad.append((r, "kind"))
        r = Self.report("ok", status: "done")
        bad.append((r, "status"))
        r = Self.report("ok", progress: 101)
        bad.append((r, "progress"))
        r = Self.report("ok")
        r.items = -1
        bad.append((r, "items"))
        r = Self.report("ok")
        r.message = String(repeating: "m", count: Limits.reportedTaskMessageBytes + 1)
        bad.append((r, "message"))
        r = Self.report("ok")
        r.bucket = ""
        bad.append((r, "bucket"))
        var t = ReportedTasks()
        for (report, field) in bad {
            #expect(report.refusal?.field == field, "\(report)")
            t.record(report, now: 0)
        }
        #expect(t.tasksJSON(now: 0).isEmpty)
        #expect(Self.report("backup:demo:0f/a.b_c-d").refusal == nil)
    }
}
