import Histogram

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// One point of a latency distribution: the latency (µs) at or below which `percentile` % of ops fell.
public struct PercentilePoint: Codable, Sendable, Equatable {
    public var percentile: Double
    public var micros: Double

    public init(percentile: Double, micros: Double) {
        self.percentile = percentile
        self.micros = micros
    }
}

/// HdrHistogram percentile curves and their chart: x is log10(1/(1-p)) (so 90, 99, 99.9, 99.99 are evenly
/// spaced, as in HdrHistogram's own plots), y is latency on a log scale.
public enum LatencyCurve {
    /// Highest x stored: 5 = p99.999.
    public static let maxX = 5.0
    /// Points per decade of x.
    public static let stepsPerDecade = 10

    /// The percentiles stored: x = 0, 0.1, ..., 5 (p0 ... p99.999).
    public static var percentiles: [Double] {
        (0...Int(maxX) * stepsPerDecade).map { percentile(x: Double($0) / Double(stepsPerDecade)) }
    }

    /// x = log10(1/(1-p/100)); p = 100 has no finite x and is clamped to `maxX`.
    public static func x(percentile p: Double) -> Double {
        guard p < 100 else { return maxX }
        return min(maxX, -log10(1 - p / 100))
    }

    public static func percentile(x: Double) -> Double { 100 * (1 - pow10(-x)) }

    /// The stored points of a histogram in nanoseconds, in µs; a percentile finer than the sample count
    /// resolves (count·(1-p) < 1) is left out, so a short run's curve ends where its data does.
    public static func points(_ h: Histogram<UInt64>) -> [PercentilePoint] {
        guard h.totalCount > 0 else { return [] }
        var out: [PercentilePoint] = []
        for p in percentiles where Double(h.totalCount) * (1 - p / 100) >= 1 - 1e-9 {
            out.append(PercentilePoint(percentile: p, micros: Double(h.valueAtPercentile(p)) / 1000))
        }
        return out
    }

    /// Per-percentile median over several runs' curves (the rounds of a comparison); points present in
    /// fewer than all runs are dropped.
    public static func median(_ curves: [[PercentilePoint]]) -> [PercentilePoint] {
        guard let shortest = curves.map(\.count).min(), shortest > 0 else { return [] }
        return (0..<shortest).map { i in
            let values = curves.map { $0[i].micros }.sorted()
            let m =
                values.count % 2 == 1
                ? values[values.count / 2] : (values[values.count / 2 - 1] + values[values.count / 2]) / 2
            return PercentilePoint(percentile: curves[0][i].percentile, micros: m)
        }
    }

    /// Log-scale y ticks (1, 2, 5 × 10^k) covering `low...high` (µs), and the axis bounds they span.
    public static func yTicks(low: Double, high: Double) -> (ticks: [Double], min: Double, max: Double) {
        let lo = max(low, 0.1)
        let hi = max(high, lo * 1.0001)
        var bottom = pow10(floor(log10(lo)))
        var top = pow10(ceil(log10(hi)))
        // Tighten to the 1-2-5 steps that still contain the data.
        for m in [5.0, 2.0] where bottom * m <= lo {
            bottom *= m
            break
        }
        for m in [0.2, 0.5] where top * m >= hi {
            top *= m
            break
        }
        var ticks: [Double] = []
        var decade = pow10(floor(log10(bottom)))
        while decade <= top * 1.0001 {
            for m in [1.0, 2.0, 5.0] {
                let t = decade * m
                if t >= bottom * 0.9999 && t <= top * 1.0001 { ticks.append(t) }
            }
            decade *= 10
        }
        return (ticks, bottom, top)
    }

    static let palette = ["#999999", "#3b7dd8", "#d8563b", "#3bb273", "#9b59b6", "#e0a030", "#2c3e50"]

    /// One inline SVG chart (no scripts): one polyline per series, x ticks at 0/50/90/99/99.9/99.99, a log
    /// latency axis and a legend. Series without points are listed in the legend only.
    public static func svg(title: String, series: [(name: String, points: [PercentilePoint])]) -> String {
        let width = 720.0
        let height = 300.0
        let left = 64.0
        let right = 170.0
        let top = 24.0
        let bottom = 40.0
        let xMax = 4.0  // p99.99
        let plotted = series.map { s in (s.name, s.points.filter { x(percentile: $0.percentile) <= xMax + 1e-9 }) }
        let values = plotted.flatMap { $0.1.map(\.micros) }.filter { $0 > 0 }
        var svg =
            "<svg width=\"\(Int(width))\" height=\"\(Int(height))\" role=\"img\" class=\"curve\""
            + " xmlns=\"http://www.w3.org/2000/svg\" font-size=\"11\">"
        svg += "<text x=\"\(Int(left))\" y=\"14\" font-weight=\"bold\">\(htmlEscape(title))</text>"
        guard let low = values.min(), let high = values.max() else {
            return svg + "<text x=\"\(Int(left))\" y=\"60\">no latency distribution recorded</text></svg>"
        }
        let axis = yTicks(low: low, high: high)
        let plotW = width - left - right
        let plotH = height - top - bottom
        func px(_ xv: Double) -> Double { left + plotW * xv / xMax }
        func py(_ us: Double) -> Double {
            let v = min(max(us, axis.min), axis.max)
            return top + plotH * (1 - (log10(v) - log10(axis.min)) / (log10(axis.max) - log10(axis.min)))
        }
        svg += "<rect x=\"\(f(left))\" y=\"\(f(top))\" width=\"\(f(plotW))\" height=\"\(f(plotH))\" fill=\"none\""
        svg += " stroke=\"#bbb\"/>"
        for (xv, label) in [(0.0, "0"), (x(percentile: 50), "50"), (1, "90"), (2, "99"), (3, "99.9"), (4, "99.99")] {
            svg += "<line x1=\"\(f(px(xv)))\" y1=\"\(f(top))\" x2=\"\(f(px(xv)))\" y2=\"\(f(top + plotH))\""
            svg += " stroke=\"#eee\"/>"
            svg += "<text x=\"\(f(px(xv)))\" y=\"\(f(top + plotH + 14))\" text-anchor=\"middle\">\(label)</text>"
        }
        svg += "<text x=\"\(f(left + plotW / 2))\" y=\"\(f(height - 6))\" text-anchor=\"middle\">percentile</text>"
        for t in axis.ticks {
            svg += "<line x1=\"\(f(left))\" y1=\"\(f(py(t)))\" x2=\"\(f(left + plotW))\" y2=\"\(f(py(t)))\""
            svg += " stroke=\"#eee\"/>"
            svg += "<text x=\"\(f(left - 4))\" y=\"\(f(py(t) + 4))\" text-anchor=\"end\">\(tickLabel(t))</text>"
        }
        svg += "<text x=\"12\" y=\"\(f(top + plotH / 2))\" transform=\"rotate(-90 12 \(f(top + plotH / 2)))\""
        svg += " text-anchor=\"middle\">latency (µs, log)</text>"
        for (i, (name, points)) in plotted.enumerated() {
            let color = palette[i % palette.count]
            if !points.isEmpty {
                let coords = points.map { "\(f(px(x(percentile: $0.percentile)))),\(f(py($0.micros)))" }
                svg += "<polyline fill=\"none\" stroke=\"\(color)\" stroke-width=\"2\""
                svg += " points=\"\(coords.joined(separator: " "))\"/>"
            }
            let ly = top + 6 + Double(i) * 18
            svg += "<line x1=\"\(f(width - right + 12))\" y1=\"\(f(ly))\" x2=\"\(f(width - right + 36))\""
            svg += " y2=\"\(f(ly))\" stroke=\"\(color)\" stroke-width=\"3\"/>"
            svg += "<text x=\"\(f(width - right + 42))\" y=\"\(f(ly + 4))\">\(htmlEscape(name))</text>"
        }
        return svg + "</svg>"
    }

    static func tickLabel(_ us: Double) -> String {
        if us >= 1_000_000 { return fmt(us / 1_000_000, us >= 10_000_000 ? 0 : 1) + " s" }
        if us >= 1000 { return fmt(us / 1000, us >= 10_000 ? 0 : 1) + " ms" }
        return fmt(us, us >= 10 ? 0 : 1) + " µs"
    }

    static func f(_ v: Double) -> String { fmt(v, 1) }

    /// 10^e, exact for whole exponents (so axis ticks are round numbers).
    static func pow10(_ e: Double) -> Double {
        guard e == e.rounded(), abs(e) < 300 else { return exp(e * 2.302_585_092_994_046) }
        var v = 1.0
        for _ in 0..<Int(abs(e)) { v *= 10 }
        return e < 0 ? 1 / v : v
    }
    static func log10(_ v: Double) -> Double { log(v) / 2.302_585_092_994_046 }
}

/// Escapes text for HTML and SVG.
public func htmlEscape(_ s: String) -> String {
    var out = ""
    for ch in s {
        switch ch {
        case "&": out += "&amp;"
        case "<": out += "&lt;"
        case ">": out += "&gt;"
        case "\"": out += "&quot;"
        default: out.append(ch)
        }
    }
    return out
}
