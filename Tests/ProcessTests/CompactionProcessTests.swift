import Foundation
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

/// Issue 71 item 6 (ADR 0154) on a real `settee-server`: after 90% of a bucket's documents are deleted, the bucket's
/// stats show the data file's and the view index's free pages (`couch_docs_*`, `couch_views_*`, also in `/metrics`),
/// `POST …/controller/compactBucket` gives them back, and the files on disk shrink to about the live data.
@Suite("Bucket and view compaction (real process)", .serialized, .onTestThreads)
struct CompactionProcessTests {
    /// `GET /pools/default/buckets/demo/stats`: each sample's last value.
    static func stats(_ server: ServerProcess) throws -> [String: Int] {
        let r = try server.http("GET", "/pools/default/buckets/demo/stats")
        guard r.status == 200 else { throw HarnessError("stats: \(r.status) \(r.text)") }
        let samples = ((try r.json() as? [String: Any])?["op"] as? [String: Any])?["samples"] as? [String: [Int]]
        return (samples ?? [:]).compactMapValues(\.last)
    }

    /// Proves: 300 documents of 8 KiB indexed by a view whose rows carry 4 KiB each, 270 of them deleted, then
    /// the stats show fragmentation of at least 25% in the data file (the tombstones freed their values' overflow
    /// pages; the leaves they shrank stay, ADR 0154) and 50% in the index; a compaction (no `_compaction` task left
    /// in `/pools/default/tasks`) brings both to 0, each file on disk falls to at most its data size after the
    /// deletes (the data file below half, the index below a tenth of its size on disk), and the 30 kept documents
    /// still read back and are still the view's rows.
    /// On the main before ADR 0154 the stats and the compaction routes were 404.
    @Test func compactionGivesBackWhatDeletesFreed() throws {
        let server = try ServerProcess.started(name: "compaction")
        defer { server.stopAndRemove() }
        try server.initialize()
        try server.waitForViews()
        let design = Array(#"{"views":{"pad":{"map":"function(doc, meta){ emit(meta.id, doc.pad); }"}}}"#.utf8)
        #expect(try server.views("PUT", "/demo/_design/big", body: design).status == 201)

        let kv = try TestKVClient(port: server.kvPort)
        // Hex of random bytes: LZ4 cannot shrink it, so each value takes overflow pages its tombstone frees.
        func hex(_ i: Int, _ salt: UInt64, _ count: Int) -> String {
            var rng = SplitMix64(seed: UInt64(i) &* 31 &+ salt)
            return String((0..<count).map { _ in "0123456789abcdef".randomElement(using: &rng) ?? "0" })
        }
        func body(_ i: Int) -> [UInt8] {
            Array(#"{"n":\#(i),"pad":"\#(hex(i, 1, 4096))","more":"\#(hex(i, 2, 4000))"}"#.utf8)
        }
        for i in 0..<300 {
            let r = try kv.request(
                .set, key: "doc\(i)", value: body(i), extras: TestKVClient.setExtras(flags: 0, expiry: 0), datatype: 1)
            #expect(r.status == .success)
        }
        func rows() throws -> Int {
            let r = try server.views("GET", "/demo/_design/big/_view/pad?stale=false&limit=1")
            return ((try r.json() as? [String: Any])?["total_rows"] as? Int) ?? -1
        }
        #expect(try rows() == 300)
        // On disk before the deletes: the flusher's window (`Limits.flusherWindowMilliseconds`) holds plain writes up to
        // a second, and sets deleted within it never reach the file (on a quiet machine the whole test ran inside one
        // window, and there were no freed pages to count).
        var full: [String: Int] = [:]
        let persisted = try ClusterHarness.eventually(20) {
            full = try Self.stats(server)
            return (full["couch_docs_data_size"] ?? 0) >= 300 * 8000
        }
        #expect(persisted, "\(full)")
        for i in 0..<300 where i % 10 != 0 {
            #expect(try kv.request(.delete, key: "doc\(i)").status == .success)
        }
        #expect(try rows() == 30)
        var deleted: [String: Int] = [:]
        let fragmented = try ClusterHarness.eventually(20) {
            deleted = try Self.stats(server)
            return (deleted["couch_docs_fragmentation"] ?? 0) >= 25 && (deleted["couch_views_fragmentation"] ?? 0) >= 50
        }
        print("compaction figures: written \(full)")
        print("compaction figures: 90% deleted \(deleted)")
        #expect(fragmented, "\(deleted)")
        let metrics = try server.http("GET", "/metrics").text
        #expect(metrics.contains("couch_docs_fragmentation{bucket=\"demo\"}"))
        #expect(metrics.contains("couch_views_actual_disk_size{bucket=\"demo\"}"))

        let compact = try server.http("POST", "/pools/default/buckets/demo/controller/compactBucket")
        #expect(compact.status == 200, "\(compact.text)")
        var after: [String: Int] = [:]
        let compacted = try ClusterHarness.eventually(30) {
            let tasks = try server.http("GET", "/pools/default/tasks").text
            after = try Self.stats(server)
            return !tasks.contains("_compaction") && after["couch_docs_fragmentation"] == 0
                && after["couch_views_fragmentation"] == 0
        }
        print("compaction figures: compacted \(after)")
        #expect(compacted, "\(after)")
        // Each file falls to the pages in use after the deletes (its data size then): the free pages left it.
        let docsAfter = after["couch_docs_actual_disk_size"] ?? .max
        let viewsAfter = after["couch_views_actual_disk_size"] ?? .max
        #expect(docsAfter <= deleted["couch_docs_data_size"] ?? 0, "\(after) vs \(deleted)")
        #expect(viewsAfter <= deleted["couch_views_data_size"] ?? 0, "\(after) vs \(deleted)")
        #expect(docsAfter * 2 < deleted["couch_docs_actual_disk_size"] ?? 0, "\(after) vs \(deleted)")
        #expect(viewsAfter * 10 < deleted["couch_views_actual_disk_size"] ?? 0, "\(after) vs \(deleted)")
        #expect(try rows() == 30)
        for i in stride(from: 0, to: 300, by: 10) {
            let r = try kv.request(.get, key: "doc\(i)")
            #expect(r.status == .success && r.valueBytes == body(i))
        }
    }
}
