import ArgumentParser
import Foundation
import SetteeBenchKit
import SetteeJSON
import SetteeLite
import SetteeSQLite

/// `settee-bench lite`: Lite's document saves against raw SQLite inserts of the same bytes, in one run, on
/// the same file system with the same settings (WAL, synchronous NORMAL, 4 KiB pages): the peer is what Lite
/// would cost if it were only the SQLite under it. Two shapes: every save in one transaction (`saveAll`) and
/// one transaction per save (`save`). Prints one line per shape and, with `--json`, writes the figures.
struct Lite: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Lite saves vs raw SQLite inserts of the same bytes (one transaction, and one per save).")

    @Option(help: "Documents saved in the one-transaction shape.") var documents: Int = 100_000
    @Option(help: "Documents saved in the transaction-per-save shape.") var singles: Int = 10_000
    @Option(help: "Approximate JSON size of each document in bytes.") var size: Int = 1024
    @Option(help: "Rounds (alternating Lite and raw); the median round is reported.") var rounds: Int = 3
    @Option(help: "Directory for the database files (removed afterwards).") var directory: String =
        NSTemporaryDirectory()
    @Option(help: "Write the figures as JSON to this file.") var json: String?

    func run() throws {
        guard documents > 0, singles > 0, rounds > 0, size >= 64 else {
            throw ValidationError("documents, singles and rounds must be positive; size at least 64")
        }
        let bodies = (0..<max(documents, singles)).map { Self.body(index: $0, size: size) }
        var rows: [LiteFigure] = []
        for (shape, count, batched) in [("one transaction", documents, true), ("transaction per save", singles, false)]
        {
            var lite: [Double] = []
            var raw: [Double] = []
            var liteCPU: [Double] = []
            var rawCPU: [Double] = []
            for round in 0..<rounds {
                let base = "\(directory)/settee-bench-lite-\(getpid())-\(round)"
                let cpu0 = Self.processCPUSeconds()
                lite.append(try Self.timeLite(bodies.prefix(count), batched: batched, path: base + "-lite"))
                let cpu1 = Self.processCPUSeconds()
                raw.append(try Self.timeRaw(bodies.prefix(count), batched: batched, path: base + "-raw.sqlite"))
                liteCPU.append(cpu1 - cpu0)
                rawCPU.append(Self.processCPUSeconds() - cpu1)
            }
            let l = Double(count) / Self.median(lite)
            let r = Double(count) / Self.median(raw)
            rows.append(LiteFigure(shape: shape, documents: count, liteDocsPerSecond: l, rawDocsPerSecond: r))
            // CPU seconds (user + system) of each phase, set-up and file removal included: on a shared machine
            // they move less with the load than the wall clock does.
            let cpuRatio = Self.median(rawCPU) / Self.median(liteCPU)
            print(
                "lite \(shape): \(count) docs of ~\(size) B: Lite \(fmt(l, 0)) docs/s, raw SQLite \(fmt(r, 0)) docs/s, "
                    + "ratio \(fmt(l / r, 2))x (median of \(rounds); seconds Lite \(lite.map { fmt($0, 2) }), "
                    + "raw \(raw.map { fmt($0, 2) }); CPU seconds Lite \(liteCPU.map { fmt($0, 2) }), "
                    + "raw \(rawCPU.map { fmt($0, 2) }), CPU ratio \(fmt(cpuRatio, 2))x)")
        }
        if let json {
            let value = JSON.array(
                rows.map { f in
                    JSON.object([
                        ("shape", .string(f.shape)), ("documents", .number(Double(f.documents))),
                        ("liteDocsPerSecond", .number(f.liteDocsPerSecond.rounded())),
                        ("rawDocsPerSecond", .number(f.rawDocsPerSecond.rounded())),
                        ("ratio", .number((f.liteDocsPerSecond / f.rawDocsPerSecond * 100).rounded() / 100)),
                    ])
                })
            try Data(value.serialized()).write(to: URL(fileURLWithPath: json))
        }
    }

    struct LiteFigure {
        var shape: String
        var documents: Int
        var liteDocsPerSecond: Double
        var rawDocsPerSecond: Double
    }

    /// A document of about `size` bytes shaped like an app's: a type, a few fields, a text that fills the rest.
    static func body(index: Int, size: Int) -> JSON {
        let filler = String(repeating: "lorem ipsum ", count: max(1, (size - 96) / 12))
        return .object([
            ("type", .string("note")), ("n", .number(Double(index))), ("title", .string("note \(index)")),
            ("done", .bool(index % 2 == 0)), ("text", .string(filler)),
        ])
    }

    static func timeLite(_ bodies: ArraySlice<JSON>, batched: Bool, path: String) throws -> Double {
        defer { try? FileManager.default.removeItem(atPath: path) }
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let db = try Database(name: "bench", directory: path)
        defer { db.close() }
        let docs = bodies.enumerated().map { Document(id: "doc-\($0.offset)", properties: $0.element) }
        let start = DispatchTime.now().uptimeNanoseconds
        if batched {
            _ = try db.saveAll(docs)
        } else {
            for d in docs { _ = try db.save(d) }
        }
        return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    }

    /// The same ids and serialized bodies into one table with Lite's connection settings.
    static func timeRaw(_ bodies: ArraySlice<JSON>, batched: Bool, path: String) throws -> Double {
        defer {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        }
        var options = Connection.Options()
        options.synchronous = .normal
        options.pageSize = 4096
        options.cacheSizeKiB = 4 * 1024
        options.walAutoCheckpointPages = 1000
        let c = try Connection(path: path, options: options)
        defer { c.close() }
        try c.execute("CREATE TABLE docs (id TEXT PRIMARY KEY, body BLOB NOT NULL)")
        let insert = try c.prepare("INSERT INTO docs (id, body) VALUES (?1, ?2)")
        // Serialized before the clock starts: the peer is SQLite alone.
        let rows = bodies.enumerated().map { ("doc-\($0.offset)", $0.element.serialized()) }
        func put(_ id: String, _ body: [UInt8]) throws {
            defer { insert.reset() }
            try insert.bindText(id, at: 1)
            try insert.bindBlob(body, at: 2)
            _ = try insert.step()
        }
        let start = DispatchTime.now().uptimeNanoseconds
        if batched {
            try c.execute("BEGIN")
            for (id, body) in rows { try put(id, body) }
            try c.execute("COMMIT")
        } else {
            for (id, body) in rows {
                try c.execute("BEGIN")
                try put(id, body)
                try c.execute("COMMIT")
            }
        }
        return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    }

    /// User plus system CPU seconds of this process so far.
    static func processCPUSeconds() -> Double {
        var usage = rusage()
        #if os(Linux)
            let who = __rusage_who_t(RUSAGE_SELF.rawValue)
        #else
            let who = RUSAGE_SELF
        #endif
        guard getrusage(who, &usage) == 0 else { return 0 }
        func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    static func median(_ xs: [Double]) -> Double {
        let s = xs.sorted()
        return s.isEmpty ? 0 : s[s.count / 2]
    }
}
