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

    /// Hex of random bytes: LZ4 cannot shrink it, so each value takes overflow pages its tombstone frees.
    static func hex(_ i: Int, _ salt: UInt64, _ count: Int) -> String {
        var rng = SplitMix64(seed: UInt64(i) &* 31 &+ salt)
        return String((0..<count).map { _ in "0123456789abcdef".randomElement(using: &rng) ?? "0" })
    }

    /// Document `i`: about 8 KiB of JSON.
    static func body(_ i: Int) -> [UInt8] {
        Array(#"{"n":\#(i),"pad":"\#(hex(i, 1, 4096))","more":"\#(hex(i, 2, 4000))"}"#.utf8)
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
        // The node's own auto-compaction off (ADR 0159), so the figures below are the deletes' and the run the
        // request's.
        let off = try server.http(
            "POST", "/controller/setAutoCompaction",
            form: [
                ("databaseFragmentationThreshold[percentage]", "undefined"),
                ("viewFragmentationThreshold[percentage]", "undefined"),
            ])
        #expect(off.status == 200, "\(off.text)")
        try server.waitForViews()
        let design = Array(#"{"views":{"pad":{"map":"function(doc, meta){ emit(meta.id, doc.pad); }"}}}"#.utf8)
        #expect(try server.views("PUT", "/demo/_design/big", body: design).status == 201)

        let kv = try TestKVClient(port: server.kvPort)
        let body = Self.body
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

    /// ADR 0159: a node compacts its buckets by itself once a file's fragmentation reaches the cluster's threshold
    /// (`/settings/autoCompaction`, set with `POST /controller/setAutoCompaction` as Couchbase's), with no compaction
    /// request. The settings read back in Couchbase's shape; values out of range, time periods and a cluster-wide
    /// purge interval are refused with field errors. 300 documents of 8 KiB, 270 deleted: the data file's
    /// fragmentation falls back below the threshold and the data file on disk holds no more than the pages in use
    /// after the deletes (its WAL is left at its size for the writes to reuse), with every kept document readable. On the main before ADR 0159 both routes answered 404 and the file kept its free pages.
    @Test func aNodeCompactsAFileWhoseFragmentationReachesTheThreshold() throws {
        let server = try ServerProcess(name: "auto-compaction")
        server.extraArguments = ["--auto-compaction-check-seconds", "0.5"]
        try server.start()
        defer { server.stopAndRemove() }
        try server.initialize()
        func settings() throws -> [String: Any] {
            let r = try server.http("GET", "/settings/autoCompaction")
            #expect(r.status == 200, "\(r.text)")
            return try r.json() as? [String: Any] ?? [:]
        }
        let defaults = try settings()
        let auto = defaults["autoCompactionSettings"] as? [String: Any]
        let db = auto?["databaseFragmentationThreshold"] as? [String: Any]
        #expect(db?["percentage"] as? Int == 30 && db?["size"] as? String == "undefined", "\(defaults)")
        #expect(auto?["parallelDBAndViewCompaction"] as? Bool == false && defaults["purgeInterval"] as? Double == 3)
        for (field, value) in [
            ("databaseFragmentationThreshold[percentage]", "1"), ("databaseFragmentationThreshold[percentage]", "101"),
            ("viewFragmentationThreshold[size]", "0"), ("databaseFragmentationThreshold[size]", "big"),
            ("parallelDBAndViewCompaction", "yes"), ("allowedTimePeriod[fromHour]", "1"), ("purgeInterval", "2"),
        ] {
            let r = try server.http("POST", "/controller/setAutoCompaction", form: [(field, value)])
            #expect(r.status == 400 && r.text.contains(field), "\(field)=\(value): \(r.status) \(r.text)")
        }
        // Off while the documents go in, so the check cannot catch the file half-deleted and compact it early.
        let off = try server.http(
            "POST", "/controller/setAutoCompaction", form: [("databaseFragmentationThreshold[percentage]", "undefined")]
        )
        #expect(off.status == 200, "\(off.text)")
        let kv = try TestKVClient(port: server.kvPort)
        for i in 0..<300 {
            let r = try kv.request(
                .set, key: "doc\(i)", value: Self.body(i), extras: TestKVClient.setExtras(flags: 0, expiry: 0),
                datatype: 1)
            #expect(r.status == .success)
        }
        var figures: [String: Int] = [:]
        #expect(
            try ClusterHarness.eventually(20) {
                figures = try Self.stats(server)
                return (figures["couch_docs_data_size"] ?? 0) >= 300 * 8000
            }, "\(figures)")
        for i in 0..<300 where i % 10 != 0 {
            #expect(try kv.request(.delete, key: "doc\(i)").status == .success)
        }
        var deleted: [String: Int] = [:]
        #expect(
            try ClusterHarness.eventually(20) {
                deleted = try Self.stats(server)
                return (deleted["couch_docs_fragmentation"] ?? 0) >= 25
            }, "\(deleted)")
        // The data file itself, checkpointed (an auto-compaction leaves the WAL at its size for the writes to reuse).
        func mainFileBytes() -> Int {
            let files = FileManager.default.enumerator(atPath: server.dataDir)?.compactMap { $0 as? String } ?? []
            return files.filter { $0.hasSuffix("/data.sqlite") }.reduce(0) { sum, path in
                sum
                    + ((try? FileManager.default.attributesOfItem(atPath: server.dataDir + "/" + path)[.size] as? Int)
                        ?? 0)
            }
        }
        print("auto-compaction figures: 90% deleted \(deleted)")

        let on = try server.http(
            "POST", "/controller/setAutoCompaction",
            form: [("databaseFragmentationThreshold[percentage]", "10"), ("parallelDBAndViewCompaction", "false")])
        #expect(on.status == 200, "\(on.text)")
        let now = try settings()
        let nowDB =
            (now["autoCompactionSettings"] as? [String: Any])?["databaseFragmentationThreshold"] as? [String: Any]
        #expect(nowDB?["percentage"] as? Int == 10, "\(now)")
        var after: [String: Int] = [:]
        var mainAfter = 0
        let compacted = try ClusterHarness.eventually(30) {
            after = try Self.stats(server)
            mainAfter = mainFileBytes()
            return (after["couch_docs_fragmentation"] ?? 100) < 10 && mainAfter > 0
                && mainAfter <= deleted["couch_docs_data_size"] ?? 0
        }
        print("auto-compaction figures: after \(after), data file \(mainAfter) B")
        #expect(compacted, "\(after) vs \(deleted); data file \(mainAfter) B")
        #expect(try String(contentsOf: server.logURL, encoding: .utf8).contains("auto-compaction started"))
        for i in stride(from: 0, to: 300, by: 10) {
            let r = try kv.request(.get, key: "doc\(i)")
            #expect(r.status == .success && r.valueBytes == Self.body(i))
        }
    }
}
