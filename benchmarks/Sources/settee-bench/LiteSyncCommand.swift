import ArgumentParser
import Foundation
import NIOCore
import NIOHTTP1
import SetteeBenchKit
import SetteeJSON
import SetteeLite
import SetteeReplication

/// `settee-bench lite-sync`: SetteeLite's replicator against one gateway database over both protocols it speaks, in
/// one run (issue 68's row). Per round and target, in alternating order:
///
/// - **docs/s**: a fresh Lite database of `--docs` documents (`--doc-size` bytes of JSON, a channel of their own) is
///   pushed one-shot, then pulled one-shot (channel filter) into another fresh database, once with a `ws://` URL
///   (BLIP, `/_blipsync`) and once with `http://` (the CouchDB REST protocol: `_revs_diff`, `_bulk_docs`, `_changes`,
///   `_bulk_get`). Wall time of each replication from `start()` to stopped, checkpoints included; ratios BLIP / REST.
/// - **delta sync**: `--delta-docs` documents of `--delta-doc-size` bytes (members of random hex) pushed and pulled
///   over BLIP, then one member of each edited, pushed, and pulled into the database that holds the previous
///   revisions; once with the database's `delta_sync` on and once off (set through `PUT /db/_config` on the admin
///   port, restored afterwards). Bytes on the wire per update are the gateway's `replication_bytes_received` +
///   `replication_bytes_sent` (`/_expvar`, BLIP frames as on the WebSocket) over the edit's push, and over its pull,
///   divided by the documents; ratio on / off.
///
/// Needs GUEST (or nothing else) with access to `*` on the public port and the admin port of the same database.
struct LiteSync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lite-sync",
        abstract: "Lite's replicator over BLIP (ws://) against REST (http://) on the same gateway: docs/s, and "
            + "bytes on the wire per small edit of large documents with delta sync on and off.")

    @Option(name: .customLong("url"), help: "[NAME@]http://127.0.0.1:PORT/DB: a gateway database (public port).")
    var urls: [String] = []

    @Option(name: .customLong("admin-url"), help: "http://127.0.0.1:PORT/DB: the same database's admin port.")
    var adminURLs: [String] = []

    @Option(help: "Documents pushed and pulled per protocol per round.") var docs: Int = 5000
    @Option(help: "Approximate JSON size of each document in bytes.") var docSize: Int = 1024
    @Option(help: "Documents edited per delta measurement (0: no delta rows).") var deltaDocs: Int = 200
    @Option(help: "Approximate JSON size of each delta document in bytes.") var deltaDocSize: Int = 50 * 1024
    @Option(help: "Rounds; the protocols' order alternates each round.") var rounds: Int = 3
    @Option(help: "Directory for the Lite databases (removed afterwards).") var directory: String =
        NSTemporaryDirectory()
    @Flag(help: "No per-phase lines on stderr.") var quiet = false
    @Option(help: "Write the results as JSON to this file.") var json: String?

    func validate() throws {
        guard !urls.isEmpty, adminURLs.count == urls.count else {
            throw ValidationError("give at least one --url and one --admin-url per --url")
        }
        for (i, u) in urls.enumerated() {
            do { _ = try GatewayTarget.parse(u, admin: adminURLs[i]) } catch {
                throw ValidationError(error.description)
            }
        }
        guard docs > 0, docSize >= 64, deltaDocs >= 0, deltaDocSize >= 1024, rounds > 0 else {
            throw ValidationError("docs and rounds must be positive, doc-size at least 64, delta-doc-size 1024")
        }
    }

    func run() async throws {
        var targets: [GatewayTarget] = []
        for (i, u) in urls.enumerated() { targets.append(try GatewayTarget.parse(u, admin: adminURLs[i])) }
        let run = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        var results: [LiteSyncRound] = []
        var deltas: [LiteSyncDeltaRound] = []
        try await withGenerator(threads: 1) { generator in
            for round in 1...rounds {
                for k in 0..<targets.count {
                    let target = targets[(k + round - 1) % targets.count]
                    let admin = try await GatewayAdmin(group: generator.group, target: target)
                    defer { Task { await admin.close() } }
                    let order: [LiteSyncProtocol] = round % 2 == 1 ? [.blip, .rest] : [.rest, .blip]
                    for proto in order {
                        let r = try await pushPull(target, proto, round: round, run: run)
                        if !quiet { printErr(Self.line(r)) }
                        results.append(r)
                    }
                    guard deltaDocs > 0 else { continue }
                    let original = try await admin.config()
                    do {
                        for on in round % 2 == 1 ? [false, true] : [true, false] {
                            try await admin.setDeltaSync(on, base: original)
                            let d = try await delta(target, admin: admin, on: on, round: round, run: run)
                            if !quiet { printErr(Self.line(d)) }
                            deltas.append(d)
                        }
                    } catch {
                        try? await admin.putConfig(original)
                        throw error
                    }
                    try await admin.putConfig(original)
                }
            }
        }
        let summary = LiteSyncSummary.make(results, deltas, targets: targets.map(\.label))
        print(
            "\(rounds) round(s); \(docs) docs × \(docSize) B one-shot push then pull per protocol; delta: "
                + "\(deltaDocs) docs × \(deltaDocSize) B, one member edited per update")
        print(Self.table(summary))
        if let json {
            try writeJSON(
                LiteSyncOutput(
                    docs: docs, docSize: docSize, deltaDocs: deltaDocs, deltaDocSize: deltaDocSize, rounds: rounds,
                    results: results, deltas: deltas, summary: summary), to: json)
        }
    }

    // MARK: push and pull

    func pushPull(_ target: GatewayTarget, _ proto: LiteSyncProtocol, round: Int, run: String) async throws
        -> LiteSyncRound
    {
        let name = "ls-\(run)-r\(round)-\(proto.rawValue)"
        let dir = "\(directory)/settee-bench-\(getpid())-\(name)"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let source = try Database(name: "source", directory: dir)
        defer { source.close() }
        let documents = (0..<docs).map { i in
            var body = Lite.body(index: i, size: docSize - 32)
            body.set("channels", .array([.string(name)]))
            return Document(id: "\(name)-\(i)", properties: body)
        }
        _ = try source.saveAll(documents)
        let url = proto.url(target.publicURL)
        let push = try await Self.replicate(try Replicator(source, .push(to: url)), expect: docs, what: "push \(url)")
        let sink = try Database(name: "sink", directory: dir)
        defer { sink.close() }
        let pull = try await Self.replicate(
            try Replicator(sink, .pull(from: url), channels: [name]), expect: docs, what: "pull \(url)")
        return LiteSyncRound(
            round: round, target: target.label, protocolName: proto.rawValue, docs: docs,
            pushSeconds: push.seconds, pullSeconds: pull.seconds, pushSteps: push.steps, pullSteps: pull.steps)
    }

    /// Runs one one-shot replication to its end; throws unless it wrote `expect` documents without an error.
    static func replicate(_ r: Replicator, expect: Int, what: String) async throws -> (
        seconds: Double, steps: [String: Double]
    ) {
        let start = DispatchTime.now().uptimeNanoseconds
        r.start()
        let status = await r.waitUntilStopped()
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        guard status.lastError == nil, status.docsWritten == expect, status.docWriteFailures == 0 else {
            throw ValidationError(
                "\(what): wrote \(status.docsWritten) of \(expect) documents, \(status.docWriteFailures) failed, "
                    + "last error \(status.lastError.map { "\($0)" } ?? "none")")
        }
        var steps: [String: Double] = [:]
        for (k, v) in r.timings {
            steps[k] = Double(v.components.seconds) + Double(v.components.attoseconds) / 1e18
        }
        return (seconds, steps)
    }

    // MARK: delta sync

    func delta(_ target: GatewayTarget, admin: GatewayAdmin, on: Bool, round: Int, run: String) async throws
        -> LiteSyncDeltaRound
    {
        let name = "ld-\(run)-r\(round)-\(on ? "on" : "off")"
        let dir = "\(directory)/settee-bench-\(getpid())-\(name)"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let phone = try Database(name: "phone", directory: dir)
        defer { phone.close() }
        let tablet = try Database(name: "tablet", directory: dir)
        defer { tablet.close() }
        // Members of 200 hex characters (random: a compressor finds nothing to share between revisions).
        var rng = UInt64(truncatingIfNeeded: round) &* 0x9E37_79B9_7F4A_7C15 | 1
        func hex(_ n: Int) -> String {
            var s = ""
            s.reserveCapacity(n)
            while s.utf8.count < n {
                rng ^= rng << 13
                rng ^= rng >> 7
                rng ^= rng << 17
                s += String(rng, radix: 16)
            }
            return String(s.prefix(n))
        }
        let fields = max(1, deltaDocSize / 214)
        var documents = (0..<deltaDocs).map { i in
            var members: [(String, JSON)] = [("channels", .array([.string(name)]))]
            for f in 0..<fields { members.append((String(format: "field%03d", f), .string(hex(200)))) }
            return Document(id: "\(name)-\(i)", properties: .object(members))
        }
        documents = try phone.saveAll(documents)
        let url = LiteSyncProtocol.blip.url(target.publicURL)
        _ = try await Self.replicate(try Replicator(phone, .push(to: url)), expect: deltaDocs, what: "push \(url)")
        _ = try await Self.replicate(
            try Replicator(tablet, .pull(from: url), channels: [name]), expect: deltaDocs, what: "pull \(url)")
        for i in documents.indices {
            documents[i].properties.set(String(format: "field%03d", (i * 7) % fields), .string("edited " + hex(12)))
        }
        _ = try phone.saveAll(documents)
        let b0 = try await admin.blipBytes()
        let push = try await Self.replicate(
            try Replicator(phone, .push(to: url)), expect: deltaDocs, what: "edit push \(url)")
        let b1 = try await admin.blipBytes()
        let pull = try await Self.replicate(
            try Replicator(tablet, .pull(from: url), channels: [name]), expect: deltaDocs, what: "edit pull \(url)")
        let b2 = try await admin.blipBytes()
        let body = try phone.document(documents[0].id ?? "")?.properties.serialized().count ?? 0
        return LiteSyncDeltaRound(
            round: round, target: target.label, deltaSync: on, docs: deltaDocs, bodyBytes: body,
            pushBytes: (b1.received - b0.received) + (b1.sent - b0.sent),
            pullBytes: (b2.received - b1.received) + (b2.sent - b1.sent), pushSeconds: push.seconds,
            pullSeconds: pull.seconds, deltasPushed: b2.deltasPushed - b0.deltasPushed,
            deltasSent: b2.deltasSent - b0.deltasSent)
    }

    // MARK: output

    static func line(_ r: LiteSyncRound) -> String {
        "round \(r.round) \(r.target) \(r.protocolName): push \(r.docs) docs in \(fmt(r.pushSeconds, 2)) s = "
            + "\(fmt(Double(r.docs) / r.pushSeconds, 0)) docs/s, pull in \(fmt(r.pullSeconds, 2)) s = "
            + "\(fmt(Double(r.docs) / r.pullSeconds, 0)) docs/s; push steps "
            + r.pushSteps.sorted { $0.key < $1.key }.map { "\($0.key) \(fmt($0.value, 2))" }.joined(separator: ", ")
    }

    static func line(_ d: LiteSyncDeltaRound) -> String {
        "round \(d.round) \(d.target) delta_sync \(d.deltaSync ? "on" : "off"): \(d.docs) docs of \(d.bodyBytes) B, "
            + "per update push \(d.pushBytes / max(d.docs, 1)) B, pull \(d.pullBytes / max(d.docs, 1)) B on the wire; "
            + "edit push \(fmt(d.pushSeconds, 2)) s, pull \(fmt(d.pullSeconds, 2)) s; deltas pushed \(d.deltasPushed), "
            + "sent \(d.deltasSent)"
    }

    static func table(_ summary: LiteSyncSummary) -> String {
        var out = TextTable.render(
            header: ["target", "phase", "BLIP docs/s", "REST docs/s", "BLIP / REST (min–max)"],
            rows: summary.rates.map { s in
                [
                    s.target, s.phase, "\(fmt(s.blipMedian, 0)) (\(fmt(s.blipMin, 0))–\(fmt(s.blipMax, 0)))",
                    "\(fmt(s.restMedian, 0)) (\(fmt(s.restMin, 0))–\(fmt(s.restMax, 0)))",
                    "\(fmt(s.ratioMedian, 3)) (\(fmt(s.ratioMin, 3))–\(fmt(s.ratioMax, 3)))",
                ]
            })
        if !summary.deltas.isEmpty {
            out += "\n"
            out += TextTable.render(
                header: [
                    "target", "phase", "bytes/update delta off", "bytes/update delta on", "on / off", "docs/s off",
                    "docs/s on",
                ],
                rows: summary.deltas.map { s in
                    [
                        s.target, s.phase, fmt(s.offBytesPerUpdate, 0), fmt(s.onBytesPerUpdate, 0),
                        fmt(s.onBytesPerUpdate / max(s.offBytesPerUpdate, 1), 4), fmt(s.offDocsPerSecond, 0),
                        fmt(s.onDocsPerSecond, 0),
                    ]
                })
        }
        return out
    }
}

/// The protocol a Lite replicator speaks, chosen by its URL's scheme.
enum LiteSyncProtocol: String, Codable {
    case blip, rest

    func url(_ e: GatewayEndpoint) -> String {
        (self == .blip ? "ws://" : "http://") + "\(e.host):\(e.port)/\(e.db)"
    }
}

/// One protocol's push and pull in one round.
struct LiteSyncRound: Codable {
    var round: Int
    var target: String
    var protocolName: String
    var docs: Int
    var pushSeconds: Double
    var pullSeconds: Double
    /// The replicator's wall time per kind of step (`Replicator.timings`), seconds.
    var pushSteps: [String: Double]
    var pullSteps: [String: Double]
}

/// One edit of the delta documents pushed and pulled, with delta sync on or off.
struct LiteSyncDeltaRound: Codable {
    var round: Int
    var target: String
    var deltaSync: Bool
    var docs: Int
    /// The first document's serialized size after the edit.
    var bodyBytes: Int
    /// BLIP bytes both ways (the gateway's counters) during the edit's push, and during its pull.
    var pushBytes: Int
    var pullBytes: Int
    var pushSeconds: Double
    var pullSeconds: Double
    /// `delta_sync.delta_push_doc_count` and `deltas_sent` over both.
    var deltasPushed: Int
    var deltasSent: Int
}

struct LiteSyncSummary: Codable {
    struct Rates: Codable {
        var target: String
        var phase: String
        var blipMedian, blipMin, blipMax, restMedian, restMin, restMax: Double
        /// BLIP docs/s over REST docs/s of the same round.
        var ratioMedian, ratioMin, ratioMax: Double
    }
    struct Deltas: Codable {
        var target: String
        var phase: String
        var offBytesPerUpdate, onBytesPerUpdate, offDocsPerSecond, onDocsPerSecond: Double
    }
    var rates: [Rates]
    var deltas: [Deltas]

    static func median(_ v: [Double]) -> Double {
        guard !v.isEmpty else { return 0 }
        let s = v.sorted()
        return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
    }

    static func make(_ rounds: [LiteSyncRound], _ deltas: [LiteSyncDeltaRound], targets: [String]) -> LiteSyncSummary {
        var rates: [Rates] = []
        var deltaRows: [Deltas] = []
        for t in targets {
            for phase in ["push", "pull"] {
                func rate(_ r: LiteSyncRound) -> Double {
                    Double(r.docs) / max(phase == "push" ? r.pushSeconds : r.pullSeconds, 1e-9)
                }
                let mine = rounds.filter { $0.target == t }
                let blip = mine.filter { $0.protocolName == "blip" }
                let rest = mine.filter { $0.protocolName == "rest" }
                var ratios: [Double] = []
                for b in blip {
                    if let r = rest.first(where: { $0.round == b.round }) { ratios.append(rate(b) / rate(r)) }
                }
                let bv = blip.map(rate)
                let rv = rest.map(rate)
                rates.append(
                    Rates(
                        target: t, phase: phase, blipMedian: median(bv), blipMin: bv.min() ?? 0,
                        blipMax: bv.max() ?? 0, restMedian: median(rv), restMin: rv.min() ?? 0, restMax: rv.max() ?? 0,
                        ratioMedian: median(ratios), ratioMin: ratios.min() ?? 0, ratioMax: ratios.max() ?? 0))
            }
            let mine = deltas.filter { $0.target == t }
            guard !mine.isEmpty else { continue }
            for phase in ["push", "pull"] {
                func perUpdate(_ on: Bool) -> Double {
                    median(
                        mine.filter { $0.deltaSync == on }.map {
                            Double(phase == "push" ? $0.pushBytes : $0.pullBytes) / Double(max($0.docs, 1))
                        })
                }
                func rate(_ on: Bool) -> Double {
                    median(
                        mine.filter { $0.deltaSync == on }.map {
                            Double($0.docs) / max(phase == "push" ? $0.pushSeconds : $0.pullSeconds, 1e-9)
                        })
                }
                deltaRows.append(
                    Deltas(
                        target: t, phase: phase, offBytesPerUpdate: perUpdate(false), onBytesPerUpdate: perUpdate(true),
                        offDocsPerSecond: rate(false), onDocsPerSecond: rate(true)))
            }
        }
        return LiteSyncSummary(rates: rates, deltas: deltaRows)
    }
}

/// `settee-bench lite-sync --json`: every round and the summary.
struct LiteSyncOutput: Codable {
    var docs: Int
    var docSize: Int
    var deltaDocs: Int
    var deltaDocSize: Int
    var rounds: Int
    var results: [LiteSyncRound]
    var deltas: [LiteSyncDeltaRound]
    var summary: LiteSyncSummary
}

/// The admin port of the database under test: its config (`delta_sync` is switched through `PUT /db/_config`) and
/// its BLIP counters (`/_expvar`).
final class GatewayAdmin: Sendable {
    let connection: HTTPConnection
    let endpoint: GatewayEndpoint

    init(group: any EventLoopGroup, target: GatewayTarget) async throws {
        guard let admin = target.adminURL else { throw ValidationError("\(target.label): no --admin-url") }
        endpoint = admin
        connection = try await HTTPConnection.connect(group: group, host: admin.host, port: admin.port)
    }

    func close() async { await connection.close() }

    func config() async throws -> JSON {
        let reply = try await connection.request(.GET, endpoint.path("/_config"))
        return try JSON.parse(reply.body.readableBytesView)
    }

    func putConfig(_ config: JSON) async throws {
        _ = try await connection.request(.PUT, endpoint.path("/_config"), body: ByteBuffer(bytes: config.serialized()))
    }

    func setDeltaSync(_ on: Bool, base: JSON) async throws {
        var config = base
        config.set("delta_sync", .object([("enabled", .bool(on))]))
        try await putConfig(config)
    }

    /// The database's BLIP byte counters and delta counters.
    func blipBytes() async throws -> (sent: Int, received: Int, deltasPushed: Int, deltasSent: Int) {
        let reply = try await connection.request(.GET, "/_expvar")
        let all = try JSON.parse(reply.body.readableBytesView)
        let db = all["syncgateway"]?["per_db"]?[endpoint.db]
        func n(_ group: String, _ key: String) -> Int { db?[group]?[key]?.intValue ?? 0 }
        return (
            n("database", "replication_bytes_sent"), n("database", "replication_bytes_received"),
            n("delta_sync", "delta_push_doc_count"), n("delta_sync", "deltas_sent")
        )
    }
}
