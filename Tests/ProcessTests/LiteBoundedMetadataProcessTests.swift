import Foundation
import SetteeJSON
import SetteeTestSupport
import Testing

/// Issue 71 item 5 through the real `settee-lite` executable (ADR 0153).
@Suite("Lite bounded metadata (real processes)", .serialized, .onTestThreads)
struct LiteBoundedMetadataProcessTests {
    static func json(_ output: String) throws -> JSON {
        let line = try #require(output.split(separator: "\n").last(where: { $0.hasPrefix("{") }), "\(output)")
        return try JSON.parse(Array(line.utf8))
    }

    /// Proves, across separate processes on one database: an expiration is stored (`stats` in another process counts
    /// it) and one already past purges the document; a running process (`list --live`) purges a document whose
    /// expiration another process set, by its own timer about a second later; `compact` drops the purged documents'
    /// attachments and gives the file's free pages back, and `stats` agrees. On the main before this change
    /// `expire`, `stats` and `compact` do not exist (exit 64).
    @Test func expiryStatsAndCompactThroughTheCLI() async throws {
        let dir = try LiteAppsProcessTests.tempDir("bounded")
        defer { try? FileManager.default.removeItem(at: dir) }
        let db = dir.appendingPathComponent("lite").path
        // Three 200 KB images of distinct bytes: purging two frees about 100 pages.
        let files = try (0..<3).map { i in
            let url = dir.appendingPathComponent("photo\(i).jpg")
            try Data((0..<200_000).map { UInt8(truncatingIfNeeded: $0 / 7 &+ i &* 31) }).write(to: url)
            return url.path
        }
        let attached = try await LiteProcess.run(["attach", "--db", db] + files)
        #expect(attached.status == 0, "\(attached.output)")
        let ids = attached.output.split(separator: "\n").compactMap { $0.split(separator: "\t").first.map(String.init) }
        try #require(ids.count == 3, "\(attached.output)")

        var stats = try await LiteProcess.run(["stats", "--db", db])
        #expect(stats.status == 0, "\(stats.output)")
        var figures = try Self.json(stats.output)
        #expect(figures["total"]?["documents"] == 3 && figures["attachments"] == 3)

        let past = try await LiteProcess.run(["expire", "--db", db, ids[0], "--at", "2000-01-01T00:00:00Z"])
        #expect(past.status == 0 && past.output.contains("purged"), "\(past.output)")
        let later = try await LiteProcess.run(["expire", "--db", db, ids[1], "--in", "3600"])
        #expect(later.status == 0 && later.output.contains("expires at"), "\(later.output)")
        figures = try Self.json(try await LiteProcess.run(["stats", "--db", db]).output)
        #expect(figures["total"]?["documents"] == 2 && figures["total"]?["expiring_documents"] == 1)
        #expect(figures["total"]?["tombstones"] == 0)

        // A running process purges on its own timer an expiration set by another process.
        let live = try LiteProcess(["list", "--db", db, "--live"])
        defer { live.stop() }
        #expect(await live.waitFor(30) { $0.contains("2 image(s)") }, "\(live.text)")
        let soon = try await LiteProcess.run(["expire", "--db", db, ids[2], "--in", "1"])
        #expect(soon.status == 0 && soon.output.contains("expires at"), "\(soon.output)")
        #expect(await live.waitFor(20) { $0.contains("1 image(s)") }, "\(live.text)")
        live.stop()
        let gone = try await LiteProcess.run(["get", "--db", db, ids[2]])
        #expect(gone.status != 0 && gone.output.contains("no document"), "\(gone.output)")

        let compact = try await LiteProcess.run(["compact", "--db", db])
        #expect(compact.status == 0, "\(compact.output)")
        let r = try Self.json(compact.output)
        #expect(r["attachments_dropped"] == 2 && r["free_pages_after"] == 0, "\(compact.output)")
        let before = try #require(r["page_count_before"]?.intValue)
        let after = try #require(r["page_count_after"]?.intValue)
        #expect(after < before, "\(compact.output)")
        stats = try await LiteProcess.run(["stats", "--db", db])
        figures = try Self.json(stats.output)
        #expect(figures["attachments"] == 1 && figures["total"]?["documents"] == 1 && figures["free_pages"] == 0)
        #expect(figures["page_count"]?.intValue == after, "\(stats.output)")
    }
}
