import Foundation
import SetteeCore
import SetteeTestSupport
import Testing

@testable import SetteeStorage

/// Throughput measurements. The small ones run by default (and assert only sanity); the big warmup
/// run needs `SETTEE_LARGE_TESTS=1` (and wants `-c release` for meaningful numbers).
@Suite(.onTestThreads) struct PerformanceTests {
    static let large = ProcessInfo.processInfo.environment["SETTEE_LARGE_TESTS"] == "1"

    /// Flusher throughput for 1 KiB JSON documents: time from the first set to everything persisted.
    @Test func flusherThroughput() throws {
        let dir = TemporaryDirectory("storage")
        let n = Self.large ? 200_000 : 20_000
        let e = try openEngine(dir, quotaMB: 1024, vbuckets: 1024)
        defer { e.shutdown() }
        let docs = (0..<256).map { jsonDoc($0, size: 1024) }
        let start = Date()
        for i in 0..<n {
            let k = key("doc-\(i)")
            _ = try e.store(.set, vbOf(k, e), k, value: docs[i & 255], flags: 0, expiry: 0, datatype: .json, cas: .zero)
        }
        let written = Date()
        try waitAllPersisted(e)
        let secs = Date().timeIntervalSince(start)
        let st = e.stats()
        print(
            "flusher: \(n) x 1 KiB JSON persisted in \(String(format: "%.3f", secs)) s = \(Int(Double(n) / secs)) items/s "
                + "(sets alone \(Int(Double(n) / written.timeIntervalSince(start)))/s, \(st.flusherCommits) commits, "
                + "disk \(st.diskUsed / 1024) KiB, memUsed/item \(st.memUsed / n) B)")
        #expect(st.totalPersisted == n)
    }

    /// Warmup of 1,000,000 × 1 KiB documents (large test): prints docs/s and bytes per item in RAM.
    @Test(.enabled(if: PerformanceTests.large)) func warmupMillion() throws {
        let dir = TemporaryDirectory("storage")
        let n = 1_000_000
        do {
            var o = testOptions()
            o.flusherMaxDelay = 0.01
            let e = try openEngine(dir, quotaMB: 8192, vbuckets: 1024, options: o)
            let docs = (0..<256).map { jsonDoc($0, size: 1024) }
            let start = Date()
            for i in 0..<n {
                let k = key("doc-\(i)")
                while case .failure = attempt({ () throws(EngineError) in
                    try e.store(
                        .set, vbOf(k, e), k, value: docs[i & 255], flags: 0, expiry: 0, datatype: .json, cas: .zero)
                }) { usleep(1000) }
            }
            try waitAllPersisted(e)
            let secs = Date().timeIntervalSince(start)
            print(
                "load: \(n) x 1 KiB in \(String(format: "%.1f", secs)) s = \(Int(Double(n) / secs)) items/s persisted")
            e.shutdown()
        }
        // Give memory freed by the loading engine back to the kernel so RSS growth is the warmup's.
        _ = malloc_trim(0)
        let rssBefore = residentBytes()
        let e = try openEngine(dir, quotaMB: 8192, vbuckets: 1024)
        defer { e.shutdown() }
        let rssAfter = residentBytes()
        let st = e.stats()
        print(
            "warmup: \(st.warmupItems) docs in \(String(format: "%.2f", st.warmupSeconds)) s = "
                + "\(Int(Double(st.warmupItems) / st.warmupSeconds)) docs/s; accounted \(st.memUsed / n) B/item, "
                + "RSS growth \((rssAfter - rssBefore) / n) B/item, disk \(st.diskUsed / n) B/item, "
                + "Item stride \(MemoryLayout<Item>.stride) B")
        #expect(st.warmupItems == n && st.currItems == n)
    }
}

/// Resident set size from /proc/self/statm (pages × 4096).
func residentBytes() -> Int {
    guard let s = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let parts = s.split(separator: " ")
    return parts.count > 1 ? (Int(parts[1]) ?? 0) * 4096 : 0
}

/// glibc's `malloc_trim` (in <malloc.h>, which the Glibc module does not export); test-only.
@_silgen_name("malloc_trim")
func malloc_trim(_ pad: Int) -> Int32
