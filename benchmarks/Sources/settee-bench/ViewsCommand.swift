import ArgumentParser
import Foundation
import Logging
import SetteeClusterMap
import SetteeCore
import SetteeStorage
import SetteeViews

/// `settee-bench views`: the index build rate of a simple JavaScript map, through the code a node runs: a
/// real `BucketEngine` holds the documents, `BucketViews` indexes them from the engine's change feed into
/// its SQLite index. Prints the build time and documents per second (median of the rounds).
struct Views: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "View index build rate: a simple JS map over N documents stored in a real bucket engine.")

    @Option(help: "Documents stored and indexed.") var documents: Int = 100_000
    @Option(help: "Approximate JSON size of each document in bytes.") var size: Int = 1024
    @Option(help: "Rounds (a fresh index each round); the median round is reported.") var rounds: Int = 3
    @Option(help: "Directory for the bucket and index files (removed afterwards).") var directory: String =
        NSTemporaryDirectory()
    @Option(help: "Write the median round as JSON (the suite's view build result) to this file.") var json: String?
    @Option(help: "The result's name in the JSON.") var name: String = "view-build-json"
    @Flag(
        help: """
            Wait until the flusher persisted every loaded document before the first round, so the build does not \
            share the machine with it (a node indexing data it just received does).
            """)
    var persistedFirst = false

    static let designDocument =
        #"{"views":{"by_time":{"map":"function(doc, meta){ if (doc.type == \"image\") emit(doc.timestamp_added, null); }","reduce":"_count"}}}"#

    func run() throws {
        guard documents > 0, rounds > 0, size >= 64 else {
            throw ValidationError("documents and rounds must be positive; size at least 64")
        }
        var logger = Logger(label: "settee.bench.views")
        logger.logLevel = .critical
        let root = "\(directory)/settee-bench-views-\(getpid())"
        defer { try? FileManager.default.removeItem(atPath: root) }
        let settings = BucketSettings(name: "bench", uuid: "00000000000000000000000000000001", ramQuotaMB: 4096)
        var options = EngineOptions()
        options.expiryPagerInterval = 3600
        let engine = try BucketEngine(
            settings: settings, directory: root + "/data", options: options, logger: logger)
        defer { engine.shutdown() }
        for vb in 0..<settings.numVBuckets { engine.setVBucketState(VBucketID(UInt16(vb)), .active) }
        for i in 0..<documents {
            let key = Array("img-\(i)".utf8)
            let value = Array(Self.body(index: i, size: size).utf8)
            // A Result rather than `catch .temporaryFailure`: that typed catch crashed the release compiler
            // (Swift 6.3, SIL ownership verifier) in this function.
            var stored = false
            while !stored {
                let r = Result { () throws(EngineError) -> MutationResult in
                    try engine.store(
                        .set, VBucketHash.vbucket(forKey: key), key, value: value, flags: 0, expiry: 0,
                        datatype: .json, cas: .zero)
                }
                switch r {
                case .success: stored = true
                case .failure(.temporaryFailure): usleep(1000)  // the flusher is behind: let it catch up
                case .failure(let e): throw e
                }
            }
        }
        if persistedFirst {
            let start = ContinuousClock.now
            for vb in 0..<settings.numVBuckets {
                let id = VBucketID(UInt16(vb))
                while true {
                    let info = engine.seqnoInfo(id)
                    if info.persistedSeqno >= info.highSeqno { break }
                    usleep(10_000)
                }
            }
            print("persisted the loaded documents in \(ContinuousClock.now - start)")
        }
        var seconds: [Double] = []
        for round in 0..<rounds {
            let views = try BucketViews(
                bucket: "bench", directory: root + "/views-\(round)", source: EngineViewSource(engine: engine),
                logger: logger)
            let start = ContinuousClock.now
            try views.put(try DesignDocument(name: "images", body: Array(Self.designDocument.utf8)))
            guard let index = views.index(named: "images") else { throw ValidationError("no index") }
            try index.update(wait: true, timeoutSeconds: 7200)
            let d = ContinuousClock.now - start
            var q = ViewQuery()
            q.stale = .ok
            let count = try index.query(view: "by_time", q).rows.first.map { String(decoding: $0.value, as: UTF8.self) }
            views.stop()
            guard count == String(documents) else {
                throw ValidationError("index holds \(count ?? "no") rows, expected \(documents)")
            }
            seconds.append(Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18)
            print("round \(round): \(fmtRate(Double(documents) / seconds[round])) docs/s")
        }
        let median = seconds.sorted()[seconds.count / 2]
        if let json {
            let result = ViewBuildResult(
                name: name, documents: documents, seconds: median, docsPerSecond: Double(documents) / median)
            try JSONEncoder().encode(result).write(to: URL(fileURLWithPath: json))
        }
        print(
            "views: \(documents) docs x \(size) B, map emit(doc.timestamp_added, null): build "
                + "\(String(format: "%.2f", median)) s = \(fmtRate(Double(documents) / median)) docs/s (median of \(rounds))"
        )
    }

    /// A JSON document of about `size` bytes with the fields the map reads.
    static func body(index i: Int, size: Int) -> String {
        let head = #"{"type":"image","owner":"user\#(i % 97)","timestamp_added":\#(1_700_000_000 + i),"pad":""#
        return head + String(repeating: "x", count: max(0, size - head.utf8.count - 2)) + #""}"#
    }

    private func fmtRate(_ r: Double) -> String { String(Int(r.rounded())) }
}
