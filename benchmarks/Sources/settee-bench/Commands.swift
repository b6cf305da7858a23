import ArgumentParser
import Foundation
import NIOCore
import NIOPosix
import SetteeBenchKit

@main
struct SetteeBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "settee-bench",
        abstract:
            "Closed- or open-loop GET/SET load over memcached-binary, RESP or the settee smart client, on loopback.",
        subcommands: [Run.self, Compare.self, Gateway.self, Report.self, Lite.self, LiteSync.self, Views.self],
        defaultSubcommand: Run.self)
}

/// Writes every key once (pipelined SETs) so GETs hit. Writes refused for now are retried
/// (`TemporaryFailureRetry.preload`); a preload that still misses keys throws: a workload measured on a partial
/// key set would compare misses with hits.
func preload(_ prepared: PreparedTarget, _ options: WorkloadOptions, _ generator: LoadGenerator) async throws {
    var phase = options.preloadPhase
    phase.retry = .preload
    let result = await generator.run(
        prepared, workload: Workload(getPercent: 0, valueSize: options.valueSize, keys: options.keys),
        options: phase, progressLabel: options.quiet ? nil : "preload \(prepared.target.label)")
    let errors = result.report.errors.values.reduce(0, +)
    let written = result.report.ok.reduce(0, +)
    printErr(
        "preload \(prepared.target.label): \(written) keys in \(fmt(result.measuredSeconds, 2)) s"
            + " (\(fmt(result.measuredSeconds > 0 ? Double(written) / result.measuredSeconds : 0, 0)) ops/s),"
            + " retried \(result.report.retried), failed after retries \(result.report.failedAfterRetries),"
            + " errors \(errors)" + (errors > 0 ? " " + result.report.errors.description : ""))
    guard written >= options.keys, errors == 0 else {
        throw PreloadIncomplete(
            description: "preload \(prepared.target.label) wrote \(written) of \(options.keys) keys (\(errors) errors,"
                + " \(result.report.failedAfterRetries) still refused after retries): not measuring a partial key set")
    }
}

/// A preload that could not write every key: the workload is not measured.
struct PreloadIncomplete: Error, CustomStringConvertible {
    var description: String
}

func measure(_ prepared: PreparedTarget, _ options: WorkloadOptions, _ generator: LoadGenerator, label: String)
    async -> PhaseSummary
{
    let workload = options.workload
    let result = await generator.run(
        prepared, workload: workload, options: options.phase, progressLabel: options.quiet ? nil : label)
    return PhaseSummary(target: prepared.target, workload: workload, options: options.phase, result: result)
}

func writeJSON<T: Encodable>(_ value: T, to path: String) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    try encoder.encode(value).write(to: URL(fileURLWithPath: path))
}

func withGenerator<T>(threads: Int, _ body: (LoadGenerator) async throws -> T) async throws -> T {
    let group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
    do {
        let value = try await body(LoadGenerator(group: group))
        try await group.shutdownGracefully()
        return value
    } catch {
        try? await group.shutdownGracefully()
        throw error
    }
}

func printErr(_ s: String) {
    FileHandle.standardError.write(Data((s + "\n").utf8))
}

struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Measure each --target once (preload, then the workload).")

    @OptionGroup var options: WorkloadOptions

    func run() async throws {
        let keySpace = KeySpace(options.workload)
        let summaries = try await withGenerator(threads: options.threads) { generator in
            var summaries: [PhaseSummary] = []
            for target in options.parsedTargets {
                let prepared = PreparedTarget(
                    target, keySpace: keySpace, bucket: options.bucket,
                    credentials: (options.username, options.password))
                if !options.noPreload { try await preload(prepared, options, generator) }
                let summary = await measure(prepared, options, generator, label: target.label)
                print(summary.table())
                summaries.append(summary)
            }
            return summaries
        }
        if let json = options.json { try writeJSON(summaries, to: json) }
        if summaries.contains(where: { $0.ops == 0 }) { throw ExitCode(2) }
    }
}

/// Per-target aggregate over the rounds of a comparison.
struct CompareSummary: Codable {
    var target: String
    var medianOpsPerSecond: Double
    var minOpsPerSecond: Double
    var maxOpsPerSecond: Double
    var medianP50Micros: Double
    var medianP99Micros: Double
    /// Per-round throughput ratio against the first target: median, min, max.
    var ratioMedian: Double
    var ratioMin: Double
    var ratioMax: Double
    var errors: Int
    /// Per-percentile median of the rounds' latency curves; nil in files written before curves existed.
    var latencyCurve: [PercentilePoint]?
}

struct CompareOutput: Codable {
    var rounds: [[PhaseSummary]]
    var summary: [CompareSummary]
}

func median(_ values: [Double]) -> Double {
    let s = values.sorted()
    guard !s.isEmpty else { return 0 }
    return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
}

struct Compare: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Same workload against several --targets in alternating rounds; ratios against the first.")

    @OptionGroup var options: WorkloadOptions

    @Option(help: "Rounds; each round measures every target once, the order rotating each round.")
    var rounds: Int = 3

    func validate() throws {
        guard options.targets.count >= 2 else { throw ValidationError("compare needs at least two --target") }
        guard rounds > 0 else { throw ValidationError("--rounds must be positive") }
    }

    func run() async throws {
        let keySpace = KeySpace(options.workload)
        let targets = options.parsedTargets
        let results: [[PhaseSummary]] = try await withGenerator(threads: options.threads) { generator in
            let prepared = targets.map {
                PreparedTarget(
                    $0, keySpace: keySpace, bucket: options.bucket, credentials: (options.username, options.password))
            }
            if !options.noPreload {
                for p in prepared { try await preload(p, options, generator) }
            }
            var results: [[PhaseSummary]] = []
            for round in 1...rounds {
                // Rotate the order so no target always runs right after another's load.
                var row = [PhaseSummary?](repeating: nil, count: targets.count)
                for k in 0..<targets.count {
                    let i = (k + round - 1) % targets.count
                    let s = await measure(prepared[i], options, generator, label: "round \(round) \(targets[i].label)")
                    printErr(
                        "round \(round) \(targets[i].label): \(fmt(s.opsPerSecond, 0)) ops/s  p50 \(fmt(s.latencyMicros["all"]!.p50)) µs"
                            + "  p99 \(fmt(s.latencyMicros["all"]!.p99)) µs  errors \(s.errorCount)")
                    row[i] = s
                }
                results.append(row.map { $0! })
            }
            return results
        }

        // Per-round table.
        var rows: [[String]] = []
        for (r, row) in results.enumerated() {
            for s in row {
                let l = s.latencyMicros["all"]!
                rows.append([
                    String(r + 1), s.target, fmt(s.opsPerSecond, 0), fmt(l.p50), fmt(l.p99), fmt(l.p999), fmt(l.max),
                    String(s.errorCount), fmt(s.opsPerSecond / max(row[0].opsPerSecond, 1e-9), 3),
                ])
            }
        }
        print(
            TextTable.render(
                header: ["round", "target", "ops/s", "p50 µs", "p99 µs", "p99.9 µs", "max µs", "errors", "× first"],
                rows: rows))

        var summary: [CompareSummary] = []
        for (i, t) in targets.enumerated() {
            let runs = results.map { $0[i] }
            let tput = runs.map(\.opsPerSecond)
            let ratios = results.map { $0[i].opsPerSecond / max($0[0].opsPerSecond, 1e-9) }
            summary.append(
                CompareSummary(
                    target: t.label, medianOpsPerSecond: median(tput), minOpsPerSecond: tput.min()!,
                    maxOpsPerSecond: tput.max()!, medianP50Micros: median(runs.map { $0.latencyMicros["all"]!.p50 }),
                    medianP99Micros: median(runs.map { $0.latencyMicros["all"]!.p99 }), ratioMedian: median(ratios),
                    ratioMin: ratios.min()!, ratioMax: ratios.max()!, errors: runs.map(\.errorCount).reduce(0, +),
                    latencyCurve: runs.allSatisfy { $0.latencyCurve != nil }
                        ? LatencyCurve.median(runs.map { $0.latencyCurve! }) : nil))
        }
        let w = options.workload
        print(
            "\(rounds) rounds, get=\(w.getPercent)% value \(w.valueSize) B, keys \(w.keys), conns \(options.connections), "
                + (options.rate.map { "open loop \(fmt($0, 0)) ops/s" } ?? "depth \(options.depth)"))
        print(
            TextTable.render(
                header: [
                    "target", "median ops/s", "min–max ops/s", "median p50 µs", "median p99 µs", "ratio (min–max)",
                    "errors",
                ],
                rows: summary.map {
                    [
                        $0.target, fmt($0.medianOpsPerSecond, 0),
                        "\(fmt($0.minOpsPerSecond, 0))–\(fmt($0.maxOpsPerSecond, 0))",
                        fmt($0.medianP50Micros), fmt($0.medianP99Micros),
                        "\(fmt($0.ratioMedian, 3)) (\(fmt($0.ratioMin, 3))–\(fmt($0.ratioMax, 3)))", String($0.errors),
                    ]
                }))
        if let json = options.json { try writeJSON(CompareOutput(rounds: results, summary: summary), to: json) }
    }
}
