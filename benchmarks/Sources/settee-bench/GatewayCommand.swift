import ArgumentParser
import Foundation
import NIOPosix
import SetteeBenchKit

/// `settee-bench gateway`: replicator-shaped load on Sync Gateway-compatible endpoints (settee-gateway).
struct Gateway: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Push, pull and longpoll fan-out against Sync Gateway-compatible databases over HTTP (loopback).",
        discussion: """
            Each --url is one gateway database ([NAME@]http://127.0.0.1:PORT/DB, the public port); --admin-url \
            (repeatable, same order) names its admin port, used for update_seq and the fan-out write. Every \
            round runs the phases against every target, the order rotating each round; ratios are against \
            the first target (push/pull: docs/s; fanout: p99, lower is better).
            """)

    @Option(name: .customLong("url"), help: "[NAME@]http://127.0.0.1:PORT/DB: a gateway database (public port).")
    var urls: [String] = []

    @Option(name: .customLong("admin-url"), help: "http://127.0.0.1:PORT/DB: the same database's admin port.")
    var adminURLs: [String] = []

    @Option(help: "Phases, comma-separated or repeated: push, pull, fanout (pull reads what push wrote).")
    var phase: [String] = ["push", "pull"]

    @Option(help: "Documents pushed (and pulled) per round.")
    var docs: Int = 10_000

    @Option(help: "Approximate JSON size of each document in bytes.")
    var docSize: Int = 1024

    @Option(help: "Documents per _revs_diff/_bulk_docs batch, rows per _changes page and _bulk_get.")
    var batch: Int = 200

    @Option(help: "Concurrent batches (push) or _bulk_get requests (pull).")
    var connections: Int = 4

    @Option(help: "fanout: longpoll feeds held open.")
    var clients: Int = 1000

    @Option(help: "Rounds; each round runs every phase against every target.")
    var rounds: Int = 1

    @Option(help: "fanout: the feeds' timeout in ms (a feed not answered by then is counted missed).")
    var waitMs: Int = 30_000

    @Option(help: "fanout: longest wait (ms) for every feed to be waiting before the write is sent anyway.")
    var settleMs: Int = 10_000

    @Option(help: "NAME:PASSWORD for the public port (default GUEST, which needs channel bench or *).")
    var user: String?

    @Option(help: "Event-loop threads for the client.")
    var threads: Int = 2

    @Flag(help: "No progress lines on stderr.")
    var quiet = false

    @Option(help: "Write the results as JSON to this file.")
    var json: String?

    var phases: [GatewayPhase] {
        phase.flatMap { $0.split(separator: ",") }.compactMap { GatewayPhase(rawValue: String($0)) }
    }

    func validate() throws {
        guard !urls.isEmpty else { throw ValidationError("at least one --url is required") }
        guard adminURLs.isEmpty || adminURLs.count == urls.count else {
            throw ValidationError("give one --admin-url per --url, or none")
        }
        for (i, u) in urls.enumerated() {
            do { _ = try GatewayTarget.parse(u, admin: adminURLs.isEmpty ? nil : adminURLs[i]) } catch {
                throw ValidationError(error.description)
            }
        }
        let names = phase.flatMap { $0.split(separator: ",") }
        guard !names.isEmpty, names.allSatisfy({ GatewayPhase(rawValue: String($0)) != nil }) else {
            throw ValidationError("--phase takes push, pull, fanout")
        }
        guard docs > 0, docSize > 0, batch > 0, batch <= 10_000, connections > 0, clients > 0, clients <= 60_000,
            rounds > 0, threads > 0, waitMs > 0, settleMs >= 0
        else { throw ValidationError("counts must be positive (batch ≤ 10000, clients ≤ 60000)") }
        if let user, !user.contains(":") { throw ValidationError("--user is NAME:PASSWORD") }
    }

    func run() async throws {
        let targets = urls.enumerated().map { i, u in
            try! GatewayTarget.parse(u, admin: adminURLs.isEmpty ? nil : adminURLs[i])
        }
        let credentials = user.map { u -> (name: String, password: String) in
            let parts = u.split(separator: ":", maxSplits: 1).map(String.init)
            return (parts[0], parts.count > 1 ? parts[1] : "")
        }
        let options = GatewayLoadOptions(
            docs: docs, docSize: docSize, batch: batch, connections: connections, clients: clients,
            waitMillis: waitMs, settleMillis: settleMs, user: credentials, progress: !quiet)
        // A run id keeps document names of separate runs apart (a re-pushed revision would be skipped).
        let run = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let phases = self.phases
        let results: [GatewayPhaseResult] = try await withGenerator(threads: threads) { generator in
            var results: [GatewayPhaseResult] = []
            for round in 1...rounds {
                for k in 0..<targets.count {
                    let target = targets[(k + round - 1) % targets.count]
                    let load = GatewayLoad(group: generator.group, target: target, options: options)
                    let prefix = "gwbench-\(run)-r\(round)"
                    var since = "0"
                    if phases.contains(.pull) && phases.contains(.push) {
                        do { since = try await load.updateSeq() } catch {
                            printErr("gateway \(target.label): update_seq: \(error)")
                        }
                    }
                    for p in phases {
                        let r: GatewayPhaseResult
                        switch p {
                        case .push: r = await load.push(prefix: prefix, round: round)
                        case .pull: r = await load.pull(since: since, round: round)
                        case .fanout: r = await load.fanout(prefix: prefix, round: round)
                        }
                        printErr(Self.line(r))
                        results.append(r)
                    }
                }
            }
            return results
        }
        let summary = GatewaySummary.make(results, targets: targets.map(\.label))
        print(Self.roundsTable(results))
        var what: [String] = []
        if phases.contains(.push) || phases.contains(.pull) {
            what.append("push/pull \(docs) docs × \(docSize) B, batch \(batch), \(connections) connections")
        }
        if phases.contains(.fanout) { what.append("fanout \(clients) longpoll clients") }
        print("\(rounds) round(s); " + what.joined(separator: "; "))
        print(Self.summaryTable(summary))
        if let json {
            try writeJSON(
                GatewayOutput(
                    docs: docs, docSize: docSize, batch: batch, connections: connections, clients: clients,
                    rounds: rounds, results: results, summary: summary), to: json)
        }
        if results.contains(where: { $0.docs == 0 }) { throw ExitCode(2) }
    }

    static func line(_ r: GatewayPhaseResult) -> String {
        let l = r.latencyMicros
        var s = "round \(r.round) \(r.target) \(r.phase.rawValue): \(r.docs) docs"
        if r.phase == .fanout {
            s += " of \(r.clients ?? 0) feeds  p50 \(fmt(l.p50 / 1000, 2)) ms  p99 \(fmt(l.p99 / 1000, 2)) ms"
            s += "  max \(fmt(l.max / 1000, 2)) ms  early \(r.early ?? 0)  missed \(r.missed ?? 0)"
        } else {
            s += " in \(fmt(r.seconds, 2)) s = \(fmt(r.docsPerSecond, 0)) docs/s"
            s += "  batch p50 \(fmt(l.p50 / 1000, 1)) ms  p99 \(fmt(l.p99 / 1000, 1)) ms"
        }
        return s + "  errors \(r.errorCount)" + (r.errorCount > 0 ? " \(r.errors)" : "")
    }

    static func roundsTable(_ results: [GatewayPhaseResult]) -> String {
        TextTable.render(
            header: [
                "round", "target", "phase", "docs", "seconds", "docs/s", "p50 ms", "p99 ms", "max ms", "errors",
            ],
            rows: results.map { r in
                let l = r.latencyMicros
                return [
                    String(r.round), r.target, r.phase.rawValue,
                    r.phase == .fanout ? "\(r.docs)/\(r.clients ?? 0)" : String(r.docs), fmt(r.seconds, 2),
                    r.phase == .fanout ? "-" : fmt(r.docsPerSecond, 0), fmt(l.p50 / 1000, 2), fmt(l.p99 / 1000, 2),
                    fmt(l.max / 1000, 2), String(r.errorCount),
                ]
            })
    }

    static func summaryTable(_ summary: [GatewaySummary]) -> String {
        TextTable.render(
            header: [
                "phase", "target", "median docs/s", "min–max docs/s", "median p50 ms", "median p99 ms", "max ms",
                "ratio (min–max)", "arrived", "errors",
            ],
            rows: summary.map { s in
                let fan = s.phase == .fanout
                return [
                    s.phase.rawValue, s.target, fan ? "-" : fmt(s.medianDocsPerSecond, 0),
                    fan ? "-" : "\(fmt(s.minDocsPerSecond, 0))–\(fmt(s.maxDocsPerSecond, 0))",
                    fmt(s.medianP50Micros / 1000, 2), fmt(s.medianP99Micros / 1000, 2), fmt(s.maxMicros / 1000, 2),
                    "\(fmt(s.ratioMedian, 3)) (\(fmt(s.ratioMin, 3))–\(fmt(s.ratioMax, 3)))"
                        + (fan ? " p99" : ""),
                    fan ? "\(s.docs)/\(s.clients ?? 0)" : String(s.docs), String(s.errors),
                ]
            })
    }
}
