import Foundation
import SetteeCore
import SetteeDiagnostics
import SetteeJSON
import SetteeTestSupport
import Testing

/// The audit log's writer: records are JSON lines with Couchbase's fields, files rotate by size and interval and are
/// bounded in number, a full queue drops events (counted, then reported by one record), settings switch it on and off.
@Suite struct AuditLogTests {
    static func file(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }

    /// A record carries id, name, description, the clock's time, real_userid with the user marked as user data, and
    /// remote; a disabled id and a disabled log write nothing.
    @Test func recordShapeAndSettings() throws {
        let clock = ManualWallClock(nanoseconds: 1_764_473_941_123_000_000)
        let log = AuditLog.inMemory(clock: clock)
        log.record(
            .loginSucceeded(domain: "local", user: "ann", source: "rest", remote: .init(ip: "127.0.0.1", port: 5000)))
        let json = try JSON.parse(Array(#require(log.lines.first).utf8))
        #expect(json["id"]?.intValue == 8192)
        #expect(json["name"]?.stringValue == "login success")
        #expect(json["timestamp"]?.stringValue == "2025-11-30T03:39:01.123Z")
        #expect(json["real_userid"]?["user"]?.stringValue == "<ud>ann</ud>")
        #expect(json["real_userid"]?["domain"]?.stringValue == "local")
        #expect(json["remote"]?["ip"]?.stringValue == "127.0.0.1")
        #expect(json["remote"]?["port"]?.intValue == 5000)
        #expect(json["source"]?.stringValue == "rest")

        log.apply(AuditSettings(auditdEnabled: true, disabled: [8193]))
        log.record(.loginFailed(user: "ann", source: "rest", remote: nil))
        #expect(log.lines.count == 1)
        log.apply(AuditSettings(auditdEnabled: false))
        log.record(.loginSucceeded(domain: "local", user: "ann", source: "rest", remote: nil))
        #expect(log.lines.count == 1)
    }

    /// A line that would take the live file past `rotateSize` renames it aside first: no file exceeds the size, and
    /// only `Limits.auditRetainedFiles` rotated files are kept.
    @Test func rotatesBySizeAndKeepsABoundedNumberOfFiles() throws {
        let dir = TemporaryDirectory("audit-size")
        let writer = AuditFileWriter(directory: dir.path)
        let line = String(repeating: "x", count: 99)  // 100 bytes with its newline
        let total = Limits.auditRetainedFiles + 10
        for i in 0..<(total * 3) {
            try writer.write([line], now: UInt64(i) * 1_000_000_000, rotateSize: 300, rotateInterval: 86_400)
        }
        let rotated = writer.rotatedFiles()
        #expect(rotated.count == Limits.auditRetainedFiles)
        for name in rotated + [AuditFileWriter.liveName] {
            let size = try FileManager.default.attributesOfItem(atPath: dir.path + "/" + name)[.size] as? Int ?? -1
            #expect(size <= 300, "\(name) holds \(size) bytes")
        }
        #expect(Self.file(writer.livePath).count == 300)
    }

    /// The live file is renamed aside once it is older than `rotateInterval`, by the next write or by an idle pass.
    @Test func rotatesByInterval() throws {
        let dir = TemporaryDirectory("audit-interval")
        let writer = AuditFileWriter(directory: dir.path)
        let start: UInt64 = 1_764_000_000_000_000_000
        try writer.write(["a"], now: start, rotateSize: 0, rotateInterval: 900)
        try writer.write(["b"], now: start + 899_000_000_000, rotateSize: 0, rotateInterval: 900)
        #expect(writer.rotatedFiles().isEmpty)
        try writer.write(["c"], now: start + 900_000_000_000, rotateSize: 0, rotateInterval: 900)
        #expect(writer.rotatedFiles().count == 1)
        #expect(Self.file(writer.livePath) == "c\n")
        #expect(!writer.isDue(now: start + 1_799_000_000_000, rotateInterval: 900))
        #expect(writer.isDue(now: start + 1_800_000_000_000, rotateInterval: 900))
    }

    /// Past the queue's bound an event is dropped and counted; the writer then writes the queued events and one
    /// `audit events dropped` record with the count.
    @Test func fullQueueDropsCountsAndReports() throws {
        let dir = TemporaryDirectory("audit-drop")
        let log = AuditLog(
            defaultDirectory: dir.path, settings: AuditSettings(auditdEnabled: true), queueCapacity: 3,
            startWriter: false)
        for i in 0..<5 {
            log.record(.loginFailed(user: "u\(i)", source: "rest", remote: nil))
        }
        #expect(log.droppedEvents == 2)
        var writer = AuditFileWriter(directory: dir.path)
        #expect(log.drainOnce(into: &writer) == 4)
        let lines = Self.file(dir.path + "/audit.log").split(separator: "\n")
        #expect(lines.count == 4)
        let last = try JSON.parse(Array(lines[3].utf8))
        #expect(last["id"]?.intValue == AuditEvent.Kind.eventsDropped.rawValue)
        #expect(last["count"]?.intValue == 2)
        #expect(log.drainOnce(into: &writer) == 0)
    }

    /// The writer thread writes what `record` queued to `<directory>/audit.log`, and follows a new `logPath`.
    @Test func writerThreadWritesAndFollowsLogPath() async throws {
        let dir = TemporaryDirectory("audit-thread")
        let log = AuditLog(defaultDirectory: dir.path + "/a", settings: AuditSettings(auditdEnabled: true))
        defer { log.shutdown() }
        log.record(.loginFailed(user: "x", source: "rest", remote: nil))
        #expect(try await offPool { log.waitUntilWritten() })
        #expect(Self.file(dir.path + "/a/audit.log").contains("\"login failure\""))
        log.apply(AuditSettings(auditdEnabled: true, logPath: dir.path + "/b"))
        log.record(.loginFailed(user: "y", source: "rest", remote: nil))
        #expect(try await offPool { log.waitUntilWritten() })
        #expect(Self.file(dir.path + "/b/audit.log").contains("<ud>y</ud>"))
        #expect(log.writtenEvents == 2)
    }

    /// Settings out of Couchbase's ranges are refused field by field.
    @Test func settingsErrors() {
        #expect(AuditSettings().errors.isEmpty)
        let bad = AuditSettings(logPath: "relative", rotateInterval: 10, rotateSize: Limits.maxAuditFileBytes + 1)
        #expect(Set(bad.errors.map(\.0)) == ["rotateInterval", "rotateSize", "logPath"])
    }
}
