import ArgumentParser
import Foundation
import SetteeBenchKit

/// The standard suite as data (`benchmarks/suite.json`).
struct SuiteFile: Codable {
    struct Entry: Codable {
        var name: String
        var what: String
        var mix: String
        var valueSize: Int
        var keys: Int
        var connections: Int
        var depth: Int
        var duration: String
        var targets: [String]
    }
    /// Gateway workloads: one `settee-bench gateway` run each (absent in older suite files).
    struct GatewayEntry: Codable {
        var name: String
        var what: String
        var phases: String
        var docs: Int
        var docSize: Int
        var batch: Int
        var connections: Int
        var clients: Int
        var rounds: Int
        var targets: [String]
    }
    var description: String
    var rounds: Int
    var workloads: [Entry]
    var gateway: [GatewayEntry]?
    struct ViewsEntry: Codable {
        var name: String
        var what: String
        var map: String
        var reduce: String
    }
    var views: [ViewsEntry]?
    struct RebalanceEntry: Codable {
        var name: String
        var what: String
        var mix: String
        var valueSize: Int
        var keys: Int
        var connections: Int
        var depth: Int
        var before: Int
        var between: Int
        var after: Int
    }
    var rebalance: [RebalanceEntry]?
    struct WarmupEntry: Codable {
        var name: String
        var what: String
        var items: Int
        var valueSize: Int
    }
    var warmup: [WarmupEntry]?
    /// Backup and restore throughput against tar (`backup-restore.sh`, issue 72).
    struct BackupRestoreEntry: Codable {
        var name: String
        var what: String
        var items: Int
        var valueSize: Int
    }
    var backupRestore: [BackupRestoreEntry]?
    /// Lite's replicator over BLIP against REST (`settee-bench lite-sync`).
    struct LiteSyncEntry: Codable {
        var name: String
        var what: String
        var targets: [String]
    }
    var liteSync: [LiteSyncEntry]?
}

/// A rebalance under load as `suite.sh` writes it: the steady load's per-second timeline and the rebalances' windows.
struct RebalanceResult: Codable {
    struct Event: Codable {
        var label: String
        var startSecond: Double
        var endSecond: Double
        var seconds: Double
        var medianOpsPerSecond: Double
        var minOpsPerSecond: Double
    }
    var name: String
    var baselineOpsPerSecond: Double
    var timeline: [Int]
    var events: [Event]
    var errors: Int
    var errorsByKind: [String: Int]
}

/// A warmup run as `warmup-and-memory.sh` writes it (JSON=...).
struct WarmupResult: Codable {
    var name: String
    var items: Int
    var valueSize: Int
    var loadSeconds: Double
    var loadOpsPerSecond: Double
    var persistedSeconds: Double
    var loadErrors: Int
    var ramBytesPerItem: Double
    var rssAfterWarmupKB: Int
    var diskBytesPerItem: Double
    var restartSeconds: Double
    var warmupItems: Int
    var warmupSeconds: Double
    var warmupDocsPerSecond: Double
    var itemsAfterRestart: Int
}

/// A backup and restore run as `backup-restore.sh` writes it (JSON=...): seconds, items/s and MiB/s of keys + values
/// for each step, and tar's seconds and MiB/s of the bytes it copied as the ceiling.
struct BackupRestoreResult: Codable {
    var name: String
    var items: Int
    var valueSize: Int
    var itemBytes: Int
    var dataDirectoryKB: Int
    var repositoryKB: Int
    var tarBytes: Int
    var tarCreateSeconds: Double
    var tarCreateMiBPerSecond: Double
    var tarExtractSeconds: Double
    var tarExtractMiBPerSecond: Double
    var backupSeconds: Double
    var backupItemsPerSecond: Double
    var backupMiBPerSecond: Double
    var verifySeconds: Double
    var verifyItemsPerSecond: Double
    var verifyMiBPerSecond: Double
    var restoreSeconds: Double
    var restoreItemsPerSecond: Double
    var restoreMiBPerSecond: Double
    var restorePersistedSeconds: Double
    var restorePersistedItemsPerSecond: Double
    var backupOverTar: Double
    var restoreOverTar: Double
}

/// One view index build as `suite.sh` writes it (`<name>.json`).
struct ViewBuildResult: Codable {
    var name: String
    var documents: Int
    var seconds: Double
    var docsPerSecond: Double
}

/// `report.json`: the summaries of every step of the run.
struct CombinedReport: Codable {
    var workloads: [String: [CompareSummary]]
    var gateway: [String: [GatewaySummary]]
    var views: [String: ViewBuildResult] = [:]
    var rebalance: [String: RebalanceResult] = [:]
    var warmup: [String: WarmupResult] = [:]
    var liteSync: [String: LiteSyncSummary] = [:]
    var backupRestore: [String: BackupRestoreResult] = [:]
}

/// `settee-bench report`: renders the results of a suite run (one `compare` JSON per workload) as one
/// self-contained HTML page (tables + inline SVG bars, no scripts, no network) and a combined JSON.
struct Report: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Render a suite run's compare results (DIR/<workload>.json) as DIR/report.html and DIR/report.json.")

    @Option(help: "The suite file the run used.")
    var suite: String = "suite.json"

    @Option(help: "Directory holding <workload>.json files from `compare --json`.")
    var results: String

    @Option(help: "A line about the machine and the build, shown under the title.")
    var note: String = ""

    func run() async throws {
        let suiteFile = try JSONDecoder().decode(SuiteFile.self, from: Data(contentsOf: URL(fileURLWithPath: suite)))
        var sections: [(SuiteFile.Entry, CompareOutput)] = []
        for entry in suiteFile.workloads {
            guard let output = try load(CompareOutput.self, entry.name) else { continue }
            sections.append((entry, output))
        }
        var html = """
            <!doctype html><html><head><meta charset="utf-8"><title>Settee benchmark report</title>
            <style>body{font:14px system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
            table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
            th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}.what{color:#555}
            .bar{fill:#3b7dd8}.first{fill:#999}</style></head><body>
            <h1>Settee benchmark report</h1><p>\(escape(note))</p><p class="what">\(escape(suiteFile.description))</p>

            """
        var combined = CombinedReport(workloads: [:], gateway: [:])
        for (entry, output) in sections {
            combined.workloads[entry.name] = output.summary
            html += "<h2>\(escape(entry.name))</h2><p class=\"what\">\(escape(entry.what)) — mix \(escape(entry.mix)), "
            html +=
                "value \(entry.valueSize) B, \(entry.keys) keys, \(entry.connections) connections, depth \(entry.depth), "
            html += "\(escape(entry.duration)) × \(output.rounds.count) alternated rounds</p>"
            html += bars(output.summary)
            html += "<table><tr><th>target</th><th>median ops/s</th><th>min–max ops/s</th><th>median p50 µs</th>"
            html +=
                "<th>median p99 µs</th><th>ratio to \(escape(output.summary.first?.target ?? "")) (min–max)</th><th>errors</th></tr>"
            for s in output.summary {
                html += "<tr><td>\(escape(s.target))</td><td>\(fmt(s.medianOpsPerSecond, 0))</td>"
                html += "<td>\(fmt(s.minOpsPerSecond, 0))–\(fmt(s.maxOpsPerSecond, 0))</td>"
                html += "<td>\(fmt(s.medianP50Micros))</td><td>\(fmt(s.medianP99Micros))</td>"
                html +=
                    "<td>\(fmt(s.ratioMedian, 3)) (\(fmt(s.ratioMin, 3))–\(fmt(s.ratioMax, 3)))</td><td>\(s.errors)</td></tr>"
            }
            html += "</table>"
            if output.summary.contains(where: { $0.latencyCurve != nil }) {
                html += LatencyCurve.svg(
                    title: "latency percentiles, all ops (per-percentile median of the rounds)",
                    series: output.summary.map { ($0.target, $0.latencyCurve ?? []) })
            }
        }
        for entry in suiteFile.gateway ?? [] {
            guard let output = try load(GatewayOutput.self, entry.name) else { continue }
            combined.gateway[entry.name] = output.summary
            html += gatewaySection(entry, output)
        }
        for entry in suiteFile.liteSync ?? [] {
            guard let output = try load(LiteSyncOutput.self, entry.name) else { continue }
            combined.liteSync[entry.name] = output.summary
            html += liteSyncSection(entry, output)
        }
        for entry in suiteFile.views ?? [] {
            guard let build = try load(ViewBuildResult.self, entry.name) else { continue }
            combined.views[entry.name] = build
            html += "<h2>\(escape(entry.name))</h2><p class=\"what\">\(escape(entry.what))</p>"
            html +=
                "<p class=\"what\">map <code>\(escape(entry.map))</code>, reduce <code>\(escape(entry.reduce))</code></p>"
            html += "<table><tr><th>documents</th><th>seconds</th><th>docs/s</th></tr>"
            html += "<tr><td>\(build.documents)</td><td>\(fmt(build.seconds, 2))</td>"
            html += "<td>\(fmt(build.docsPerSecond, 0))</td></tr></table>"
        }
        for entry in suiteFile.rebalance ?? [] {
            guard let result = try load(RebalanceResult.self, entry.name) else { continue }
            combined.rebalance[entry.name] = result
            html += rebalanceSection(entry, result)
        }
        for entry in suiteFile.warmup ?? [] {
            guard let result = try load(WarmupResult.self, entry.name) else { continue }
            combined.warmup[entry.name] = result
            html += warmupSection(entry, result)
        }
        for entry in suiteFile.backupRestore ?? [] {
            guard let result = try load(BackupRestoreResult.self, entry.name) else { continue }
            combined.backupRestore[entry.name] = result
            html += backupRestoreSection(entry, result)
        }
        html += "</body></html>\n"
        try Data(html.utf8).write(to: URL(fileURLWithPath: results + "/report.html"))
        try writeJSON(combined, to: results + "/report.json")
        print(
            "wrote \(results)/report.html and \(results)/report.json (\(sections.count) workloads,"
                + " \(combined.gateway.count) gateway)")
    }

    /// The result file of one step (`DIR/<name>.json`), or nil (with a line on stderr) when the run skipped it.
    func load<T: Decodable>(_ type: T.Type, _ name: String) throws -> T? {
        let path = results + "/" + name + ".json"
        guard let data = FileManager.default.contents(atPath: path) else {
            printErr("report: no results for \(name) (\(path)); skipped")
            return nil
        }
        return try JSONDecoder().decode(type, from: data)
    }

    /// A rebalance under load: per-second throughput columns with the rebalance windows shaded, and a table.
    func rebalanceSection(_ entry: SuiteFile.RebalanceEntry, _ r: RebalanceResult) -> String {
        var html = "<h2>\(escape(entry.name))</h2><p class=\"what\">\(escape(entry.what)) — mix \(escape(entry.mix)), "
        html +=
            "value \(entry.valueSize) B, \(entry.keys) keys, \(entry.connections) connections, depth \(entry.depth)</p>"
        let top = Double(max(r.timeline.max() ?? 1, 1))
        let width = 720
        let height = 160
        let step = Double(width - 60) / Double(max(r.timeline.count, 1))
        var svg = "<svg width=\"\(width)\" height=\"\(height + 20)\" role=\"img\">"
        for e in r.events {
            let x = 60 + Int(e.startSecond * step)
            let w = max(Int((e.endSecond - e.startSecond) * step), 2)
            svg += "<rect x=\"\(x)\" y=\"0\" width=\"\(w)\" height=\"\(height)\" fill=\"#f3d9a4\"/>"
        }
        for (i, ops) in r.timeline.enumerated() {
            let h = Int(Double(height - 10) * Double(ops) / top)
            svg += "<rect class=\"bar\" x=\"\(60 + Int(Double(i) * step))\" y=\"\(height - h)\" "
            svg += "width=\"\(max(Int(step) - 1, 1))\" height=\"\(h)\"/>"
        }
        svg += "<text x=\"0\" y=\"12\">\(fmt(top, 0))</text><text x=\"0\" y=\"\(height)\">0 ops/s</text>"
        svg += "<text x=\"60\" y=\"\(height + 16)\">seconds of steady load (shaded: rebalancing)</text></svg>"
        html += svg
        html += "<table><tr><th>phase</th><th>seconds</th><th>median ops/s</th><th>× before</th>"
        html += "<th>lowest second ops/s</th><th>× before</th></tr>"
        html +=
            "<tr><td>before (steady)</td><td></td><td>\(fmt(r.baselineOpsPerSecond, 0))</td><td>1.00</td><td></td><td></td></tr>"
        let base = max(r.baselineOpsPerSecond, 1e-9)
        for e in r.events {
            html +=
                "<tr><td>\(escape(e.label))</td><td>\(fmt(e.seconds, 1))</td><td>\(fmt(e.medianOpsPerSecond, 0))</td>"
            html += "<td>\(fmt(e.medianOpsPerSecond / base, 2))</td><td>\(fmt(e.minOpsPerSecond, 0))</td>"
            html += "<td>\(fmt(e.minOpsPerSecond / base, 2))</td></tr>"
        }
        html += "</table><p>errors over the whole run: \(r.errors)"
        for (kind, n) in r.errorsByKind.sorted(by: { $0.key < $1.key }) { html += "; \(escape(kind)) \(n)" }
        return html + "</p>"
    }

    /// Lite over BLIP against REST: docs/s per protocol and phase with the ratio, then delta sync's bytes per update.
    func liteSyncSection(_ entry: SuiteFile.LiteSyncEntry, _ o: LiteSyncOutput) -> String {
        var html = "<h2>\(escape(entry.name))</h2><p class=\"what\">\(escape(entry.what)) — \(o.rounds) round(s)</p>"
        html += "<table><tr><th>target</th><th>phase</th><th>BLIP docs/s (min–max)</th><th>REST docs/s (min–max)</th>"
        html += "<th>BLIP / REST (min–max)</th></tr>"
        for r in o.summary.rates {
            html += "<tr><td>\(escape(r.target))</td><td>\(r.phase)</td>"
            html += "<td>\(fmt(r.blipMedian, 0)) (\(fmt(r.blipMin, 0))–\(fmt(r.blipMax, 0)))</td>"
            html += "<td>\(fmt(r.restMedian, 0)) (\(fmt(r.restMin, 0))–\(fmt(r.restMax, 0)))</td>"
            html += "<td>\(fmt(r.ratioMedian, 3)) (\(fmt(r.ratioMin, 3))–\(fmt(r.ratioMax, 3)))</td></tr>"
        }
        html += "</table>"
        guard !o.summary.deltas.isEmpty else { return html }
        html += "<table><tr><th>target</th><th>phase</th><th>BLIP bytes per update, delta_sync off</th>"
        html += "<th>on</th><th>on / off</th><th>docs/s off</th><th>docs/s on</th></tr>"
        for d in o.summary.deltas {
            html += "<tr><td>\(escape(d.target))</td><td>\(d.phase)</td><td>\(fmt(d.offBytesPerUpdate, 0))</td>"
            html +=
                "<td>\(fmt(d.onBytesPerUpdate, 0))</td><td>\(fmt(d.onBytesPerUpdate / max(d.offBytesPerUpdate, 1), 4))</td>"
            html += "<td>\(fmt(d.offDocsPerSecond, 0))</td><td>\(fmt(d.onDocsPerSecond, 0))</td></tr>"
        }
        return html + "</table>"
    }

    /// A warmup run: load, persistence, memory and disk per item, restart and warmup times.
    func warmupSection(_ entry: SuiteFile.WarmupEntry, _ w: WarmupResult) -> String {
        var html = "<h2>\(escape(entry.name))</h2><p class=\"what\">\(escape(entry.what))</p><table>"
        let rows: [(String, String)] = [
            ("documents × value", "\(w.items) × \(w.valueSize) B"),
            (
                "load (pipelined SETQ)",
                "\(fmt(w.loadSeconds, 2)) s = \(fmt(w.loadOpsPerSecond, 0)) ops/s, \(w.loadErrors) errors"
            ),
            ("all persisted after", "\(fmt(w.persistedSeconds, 2)) s"),
            ("RAM per resident item", "\(fmt(w.ramBytesPerItem, 0)) B"),
            ("disk per item (LZ4 + SQLite)", "\(fmt(w.diskBytesPerItem, 0)) B"),
            ("restart after kill -9 until the KV port accepts", "\(fmt(w.restartSeconds, 2)) s"),
            (
                "engine warmup",
                "\(w.warmupItems) items in \(fmt(w.warmupSeconds, 2)) s = \(fmt(w.warmupDocsPerSecond, 0)) docs/s"
            ),
            ("items after the restart", "\(w.itemsAfterRestart)"),
        ]
        for (k, v) in rows { html += "<tr><td>\(escape(k))</td><td>\(escape(v))</td></tr>" }
        return html + "</table>"
    }

    /// Backup and restore: each step's seconds, items/s and MiB/s beside tar's, and the ratio of their times.
    func backupRestoreSection(_ entry: SuiteFile.BackupRestoreEntry, _ r: BackupRestoreResult) -> String {
        var html = "<h2>\(escape(entry.name))</h2><p class=\"what\">\(escape(entry.what))</p>"
        html +=
            "<p class=\"what\">\(r.items) × \(r.valueSize) B: \(fmt(Double(r.itemBytes) / 1_048_576, 1)) MiB of keys + "
        html += "values; data directory \(r.dataDirectoryKB) kB, repository \(r.repositoryKB) kB</p>"
        html += "<table><tr><th>step</th><th>seconds</th><th>items/s</th><th>MiB/s</th><th>time over tar's</th></tr>"
        let rows: [(String, Double, Double?, Double, Double?)] = [
            ("tar -c of the data directory (+ sync)", r.tarCreateSeconds, nil, r.tarCreateMiBPerSecond, nil),
            ("tar -x into an empty directory (+ sync)", r.tarExtractSeconds, nil, r.tarExtractMiBPerSecond, nil),
            ("settee backup --full", r.backupSeconds, r.backupItemsPerSecond, r.backupMiBPerSecond, r.backupOverTar),
            ("settee backup verify", r.verifySeconds, r.verifyItemsPerSecond, r.verifyMiBPerSecond, nil),
            ("settee restore", r.restoreSeconds, r.restoreItemsPerSecond, r.restoreMiBPerSecond, r.restoreOverTar),
            (
                "restore until persisted", r.restorePersistedSeconds, r.restorePersistedItemsPerSecond,
                Double(r.itemBytes) / 1_048_576 / max(r.restorePersistedSeconds, 1e-9), nil
            ),
        ]
        for (step, seconds, items, mib, over) in rows {
            html += "<tr><td>\(escape(step))</td><td>\(fmt(seconds, 2))</td><td>\(items.map { fmt($0, 0) } ?? "—")</td>"
            html += "<td>\(fmt(mib, 1))</td><td>\(over.map { fmt($0, 2) + " ×" } ?? "—")</td></tr>"
        }
        return html + "</table>"
    }

    /// Horizontal bars of median throughput, the first target (the ratios' baseline) in grey.
    func bars(_ summary: [CompareSummary]) -> String {
        bars(summary.map { ($0.target, $0.medianOpsPerSecond, "\(fmt($0.medianOpsPerSecond, 0)) ops/s") })
    }

    func bars(_ rows: [(name: String, value: Double, label: String)]) -> String {
        let top = max(rows.map(\.value).max() ?? 1, 1e-9)
        let rowHeight = 22
        var svg = "<svg width=\"720\" height=\"\(rows.count * rowHeight + 4)\" role=\"img\">"
        for (i, r) in rows.enumerated() {
            let y = i * rowHeight + 2
            let width = Int(480 * r.value / top)
            svg += "<text x=\"0\" y=\"\(y + 15)\">\(escape(r.name))</text>"
            svg += "<rect class=\"\(i == 0 ? "first" : "bar")\" x=\"140\" y=\"\(y)\" width=\"\(width)\" height=\"18\"/>"
            svg += "<text x=\"\(146 + width)\" y=\"\(y + 15)\">\(escape(r.label))</text>"
        }
        return svg + "</svg>"
    }

    /// A gateway workload: per phase, bars (docs/s; fan-out: p99 arrival), a table and the latency curves.
    func gatewaySection(_ entry: SuiteFile.GatewayEntry, _ output: GatewayOutput) -> String {
        var html = "<h2>\(escape(entry.name))</h2><p class=\"what\">\(escape(entry.what)) — \(output.rounds) round(s); "
        var parts: [String] = []
        if output.summary.contains(where: { $0.phase != .fanout }) {
            parts.append(
                "push/pull \(output.docs) docs × \(output.docSize) B, batch \(output.batch), \(output.connections) connections"
            )
        }
        if output.summary.contains(where: { $0.phase == .fanout }) {
            parts.append("fan-out \(output.clients) longpoll clients")
        }
        html += parts.joined(separator: "; ") + "</p>"
        for phase in GatewayPhase.allCases {
            let rows = output.summary.filter { $0.phase == phase }
            guard !rows.isEmpty else { continue }
            let fan = phase == .fanout
            html += "<h3>\(phase.rawValue)</h3>"
            html += bars(
                rows.map {
                    fan
                        ? ($0.target, $0.medianP99Micros / 1000, "p99 \(fmt($0.medianP99Micros / 1000, 1)) ms")
                        : ($0.target, $0.medianDocsPerSecond, "\(fmt($0.medianDocsPerSecond, 0)) docs/s")
                })
            html += "<table><tr><th>target</th>"
            html += fan ? "<th>arrived</th>" : "<th>median docs/s</th><th>min–max docs/s</th>"
            html +=
                fan
                ? "<th>median p50 ms</th><th>median p99 ms</th>"
                : "<th>median p50 ms (batch)</th><th>median p99 ms</th>"
            html += "<th>max ms</th><th>\(fan ? "p99" : "throughput") ratio to \(escape(rows[0].target)) (min–max)</th>"
            html += "<th>errors</th></tr>"
            for s in rows {
                html += "<tr><td>\(escape(s.target))</td>"
                html +=
                    fan
                    ? "<td>\(s.docs) / \(s.clients ?? 0)</td>"
                    : "<td>\(fmt(s.medianDocsPerSecond, 0))</td><td>\(fmt(s.minDocsPerSecond, 0))–\(fmt(s.maxDocsPerSecond, 0))</td>"
                html += "<td>\(fmt(s.medianP50Micros / 1000, 2))</td><td>\(fmt(s.medianP99Micros / 1000, 2))</td>"
                html += "<td>\(fmt(s.maxMicros / 1000, 2))</td>"
                html +=
                    "<td>\(fmt(s.ratioMedian, 3)) (\(fmt(s.ratioMin, 3))–\(fmt(s.ratioMax, 3)))</td><td>\(s.errors)</td></tr>"
            }
            html += "</table>"
            html += LatencyCurve.svg(
                title: fan
                    ? "fan-out: write sent → row arrived, per feed" : "\(phase.rawValue): latency per batch",
                series: rows.map { ($0.target, $0.latencyCurve) })
        }
        return html
    }

    func escape(_ s: String) -> String { htmlEscape(s) }
}
