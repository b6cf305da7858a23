import Histogram

/// Latency percentiles of one op kind, in microseconds.
public struct LatencySummary: Codable, Sendable {
    public var count: UInt64
    public var p50: Double
    public var p99: Double
    public var p999: Double
    public var max: Double
    public var mean: Double

    init(_ h: Histogram<UInt64>) {
        count = h.totalCount
        func us(_ ns: UInt64) -> Double { Double(ns) / 1000 }
        p50 = count == 0 ? 0 : us(h.valueAtPercentile(50))
        p99 = count == 0 ? 0 : us(h.valueAtPercentile(99))
        p999 = count == 0 ? 0 : us(h.valueAtPercentile(99.9))
        max = count == 0 ? 0 : us(h.max)
        mean = count == 0 ? 0 : h.mean / 1000
    }
}

/// One measured phase against one target, as printed and as written to `--json`.
public struct PhaseSummary: Codable, Sendable {
    public var target: String
    public var kind: String
    public var address: String
    public var getPercent: Int
    public var valueSize: Int
    public var keys: Int
    public var connections: Int
    public var connected: Int
    public var depth: Int
    /// Open loop: requested ops/s (nil: closed loop).
    public var rate: Double?
    public var seconds: Double
    /// Answered ops (successes and misses) after the warmup.
    public var ops: Int
    public var opsPerSecond: Double
    public var misses: Int
    public var errors: [String: Int]
    /// Latency by op kind ("get", "set") and over all ops ("all").
    public var latencyMicros: [String: LatencySummary]
    /// Completed ops per second through the phase (settee targets), to show dips during a rebalance.
    public var timeline: [Int]?
    /// The distribution over all ops as HdrHistogram percentile points (`LatencyCurve`); nil in files
    /// written before it existed.
    public var latencyCurve: [PercentilePoint]?

    public init(target: BenchTarget, workload: Workload, options: PhaseOptions, result: PhaseResult) {
        self.target = target.label
        self.kind = target.kind.rawValue
        self.address = "\(target.host):\(target.port)"
        getPercent = workload.getPercent
        valueSize = workload.valueSize
        keys = workload.keys
        connections = options.connections
        connected = result.connected
        depth = options.depth
        rate = options.rate
        seconds = result.measuredSeconds
        let r = result.report
        timeline = result.timeline.isEmpty ? nil : result.timeline
        ops = r.ok.reduce(0, +) + r.misses
        opsPerSecond = seconds > 0 ? Double(ops) / seconds : 0
        misses = r.misses
        errors = r.errors
        var all = makeLatencyHistogram()
        var lat: [String: LatencySummary] = [:]
        for kind in OpKind.allCases where r.latency[kind.rawValue].totalCount > 0 {
            lat[kind.name] = LatencySummary(r.latency[kind.rawValue])
            all.add(r.latency[kind.rawValue])
        }
        lat["all"] = LatencySummary(all)
        latencyMicros = lat
        latencyCurve = LatencyCurve.points(all)
    }

    public var errorCount: Int { errors.values.reduce(0, +) }
}

/// Plain-text tables with right-aligned numeric columns.
public enum TextTable {
    public static func render(header: [String], rows: [[String]]) -> String {
        var widths = header.map(\.count)
        for row in rows {
            for (i, cell) in row.enumerated() where i < widths.count { widths[i] = Swift.max(widths[i], cell.count) }
        }
        func line(_ cells: [String]) -> String {
            cells.enumerated().map { i, c in
                let pad = String(repeating: " ", count: widths[i] - c.count)
                return i == 0 ? c + pad : pad + c
            }.joined(separator: "  ")
        }
        var out = line(header) + "\n"
        out += widths.map { String(repeating: "-", count: $0) }.joined(separator: "  ") + "\n"
        for row in rows { out += line(row) + "\n" }
        return out
    }
}

public func fmt(_ value: Double, _ digits: Int = 1) -> String {
    var s = String(format: value, digits: digits)
    if s == "-0.0" { s = "0.0" }
    return s
}

extension String {
    /// Fixed-point formatting without Foundation.
    init(format value: Double, digits: Int) {
        guard value.isFinite else {
            self = "\(value)"
            return
        }
        var scale = 1.0
        for _ in 0..<digits { scale *= 10 }
        let scaled = (abs(value) * scale).rounded()
        let intPart = Int(scaled / scale)
        var frac = String(Int(scaled.truncatingRemainder(dividingBy: scale)))
        while frac.count < digits { frac = "0" + frac }
        self = (value < 0 ? "-" : "") + String(intPart) + (digits > 0 ? "." + frac : "")
    }
}

extension PhaseSummary {
    /// The human table: one row per op kind plus the total.
    public func table() -> String {
        let header = ["op", "ops", "ops/s", "p50 µs", "p99 µs", "p99.9 µs", "max µs", "mean µs"]
        var rows: [[String]] = []
        for name in ["get", "set", "all"] {
            guard let l = latencyMicros[name], l.count > 0 || name == "all" else { continue }
            rows.append([
                name, String(l.count), fmt(seconds > 0 ? Double(l.count) / seconds : 0, 0), fmt(l.p50), fmt(l.p99),
                fmt(l.p999), fmt(l.max), fmt(l.mean),
            ])
        }
        var out = "\(target) [\(kind) \(address)]  get=\(getPercent)% set=\(100 - getPercent)%  value \(valueSize) B  "
        out += "keys \(keys)  conns \(connected)/\(connections)  "
        out += rate.map { "open loop \(fmt($0, 0)) ops/s" } ?? "depth \(depth)"
        out += "  \(fmt(seconds, 2)) s\n"
        out += TextTable.render(header: header, rows: rows)
        out += "throughput \(fmt(opsPerSecond, 0)) ops/s  misses \(misses)  errors \(errorCount)\n"
        for (kind, n) in errors.sorted(by: { $0.value > $1.value }) { out += "  error \(n) × \(kind)\n" }
        return out
    }
}
