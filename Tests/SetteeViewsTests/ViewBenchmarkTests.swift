import Foundation
import SetteeClusterMap
import SetteeCore
import SetteeJSON
import SetteeStorage
import SetteeTestSupport
import SetteeViews
import Testing

@Suite struct ViewBenchmarkTests {
    // Measures (SETTEE_LARGE_TESTS=1; SETTEE_VIEWS_BENCH_DOCS documents, default 1,000,000) the index
    // build rate through a simple JS map over a real BucketEngine, and the cost of `_count` over the
    // whole range (stored reduction) and over half the range (SQL range aggregate); asserts the counts.
    @Test(.enabled(if: ProcessInfo.processInfo.environment["SETTEE_LARGE_TESTS"] == "1"))
    func indexBuildRateAndCountCost() throws {
        let n = Int(ProcessInfo.processInfo.environment["SETTEE_VIEWS_BENCH_DOCS"] ?? "") ?? 1_000_000
        let dir = TemporaryDirectory("views")
        let settings = BucketSettings(name: "bench", uuid: "00000000000000000000000000000001", ramQuotaMB: 4096)
        var options = EngineOptions()
        options.expiryPagerInterval = 3600
        let engine = try BucketEngine(
            settings: settings, directory: dir.path + "/data", options: options, logger: quietLogger())
        for vb in 0..<settings.numVBuckets { engine.setVBucketState(VBucketID(UInt16(vb)), .active) }
        let base = 1_700_000_000
        for i in 0..<n {
            let key = Array("img-\(i)".utf8)
            let body = #"{"type":"image","owner":"user\#(i % 97)","timestamp_added":\#(base + i)}"#
            var stored = false
            while !stored {
                let r = Result { () throws(EngineError) -> MutationResult in
                    try engine.store(
                        .set, VBucketHash.vbucket(forKey: key), key, value: Array(body.utf8), flags: 0, expiry: 0,
                        datatype: .json, cas: .zero)
                }
                switch r {
                case .success: stored = true
                case .failure(.temporaryFailure): usleep(1000)  // the flusher is behind: let it catch up
                case .failure(let e): throw e
                }
            }
        }
        let views = try BucketViews(
            bucket: "bench", directory: dir.path + "/views", source: EngineViewSource(engine: engine),
            logger: quietLogger())
        let ddoc =
            #"{"views":{"by_time":{"map":"function(doc, meta){ if (doc.type == \"image\") emit(doc.timestamp_added, null); }","reduce":"_count"}}}"#
        let start = ContinuousClock.now
        try views.put(try DesignDocument(name: "images", body: Array(ddoc.utf8)))
        let index = try #require(views.index(named: "images"))
        try index.update(wait: true, timeoutSeconds: 7200)
        let build = ContinuousClock.now - start
        let buildSeconds = Double(build.components.seconds) + Double(build.components.attoseconds) / 1e18

        func timed(_ q: ViewQuery) throws -> (ViewResult, Double) {
            let t = ContinuousClock.now
            let r = try index.query(view: "by_time", q)
            let d = ContinuousClock.now - t
            return (r, (Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18) * 1000)
        }
        var q = ViewQuery()
        q.stale = .ok
        let (whole, wholeMs) = try timed(q)
        #expect(whole.rows.first.map { String(decoding: $0.value, as: UTF8.self) } == String(n))
        q.startKey = .number(Double(base + n / 2))
        let (half, halfMs) = try timed(q)
        #expect(half.rows.first.map { String(decoding: $0.value, as: UTF8.self) } == String(n - n / 2))
        var page = ViewQuery()
        page.stale = .ok
        page.reduce = false
        page.descending = true
        page.limit = 20
        let (top, topMs) = try timed(page)
        #expect(top.rows.count == 20)
        let report = """
            views benchmark: \(n) docs, map `emit(doc.timestamp_added, null)`, reduce _count
            index build: \(String(format: "%.1f", buildSeconds)) s = \(Int(Double(n) / buildSeconds)) docs/s
            _count whole range (stored reduction): \(String(format: "%.2f", wholeMs)) ms
            _count half range (SQL range aggregate): \(String(format: "%.1f", halfMs)) ms
            descending=true&limit=20 map page: \(String(format: "%.2f", topMs)) ms

            """
        print(report)
        try? report.write(toFile: "/tmp/settee-views-bench.txt", atomically: true, encoding: .utf8)
        views.stop()
        engine.shutdown()
    }
}
