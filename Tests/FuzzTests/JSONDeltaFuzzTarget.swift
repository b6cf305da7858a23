import SetteeCore
import SetteeJSON
import SetteeTestSupport
import Testing

/// `JSONDelta` (ADR 0125) as a peer's `rev` with `deltaSrc` reaches it: any JSON pair, any delta document.
extension FuzzTargets {
    /// Bounds `apply` is run with besides its defaults, small enough for short inputs to reach them.
    static let deltaSmallDepth = 6
    static let deltaSmallBytes = 200

    /// Input: three lines, `a`, `b` and a delta `d`. Findings: `apply(create(a, b), a)` that is not `b` byte for byte
    /// (or throws); `create(a, a)` that is not `{}`; an `apply` of `d` to `a` or `b` that throws anything but a
    /// `JSONDeltaError`, or returns a value deeper or longer than the bounds it was given, or longer than its old
    /// value and the delta together (every old value and delta value is used at most once).
    static let jsonDelta = FuzzTarget(
        name: "json-delta",
        dictionary: tokens([
            "{}", "[]", "[0]", "[1,2]", ",0,0]", ",0,2]", "\"patch\"", "=", "-", "+", "|", "\"0\":", "\"1-\":",
            "\"10-\":[", "999999999=", "1000000000=", "\\u0000", "\\ud800", "é", "{\"a\":", "null", "1e308", "-0",
        ])
    ) { input in
        let lines = input.split(separator: 0x0A, maxSplits: 2, omittingEmptySubsequences: false)
        let values = lines.map { try? JSON.parse(Array($0)) }
        let a = values.count > 0 ? values[0] : nil
        let b = values.count > 1 ? values[1] : nil
        let d = values.count > 2 ? values[2] : nil
        if let a, let b {
            let delta = JSONDelta.create(from: a, to: b)
            let rebuilt: JSON
            do { rebuilt = try JSONDelta.apply(delta, to: a) } catch {
                throw FuzzFinding("apply(create(a, b), a) threw \(error) for delta \(delta)")
            }
            guard rebuilt.serialized() == b.serialized() else {
                throw FuzzFinding("apply(create(a, b), a) is \(rebuilt), not \(b) (delta \(delta))")
            }
            guard JSONDelta.create(from: a, to: a) == .object([]) else {
                throw FuzzFinding("create(a, a) is not {} for \(a)")
            }
        }
        guard let d else { return }
        for old in [a, b].compactMap({ $0 }) {
            try checkApply(d, to: old, maxDepth: deltaSmallDepth, maxBytes: deltaSmallBytes)
            try checkApply(d, to: old, maxDepth: Limits.maxDocumentDepth, maxBytes: Limits.maxValueSize)
        }
    }

    /// Applies `delta` to `old`: a `JSONDeltaError` or a result within the bounds.
    static func checkApply(_ delta: JSON, to old: JSON, maxDepth: Int, maxBytes: Int) throws {
        let result: JSON
        do { result = try JSONDelta.apply(delta, to: old, maxDepth: maxDepth, maxBytes: maxBytes) } catch {
            return  // `apply` throws only `JSONDeltaError` (typed throws): a refusal is the expected answer.
        }
        let size = result.serialized().count
        guard result.nestingDepth <= maxDepth, size <= maxBytes else {
            throw FuzzFinding("apply gave \(size) bytes, depth \(result.nestingDepth) past \(maxBytes), \(maxDepth)")
        }
        guard size <= old.serialized().count + delta.serialized().count else {
            throw FuzzFinding("apply of \(delta) to \(old) gave \(size) bytes, more than its inputs")
        }
    }
}

extension FuzzTests {
    @Test func jsonDeltas() async {
        // Proves JSONDelta's create and apply on arbitrary JSON pairs round-trip byte for byte, and that applying an
        // arbitrary delta document refuses with a JSONDeltaError or gives a result within the depth and size bounds
        // it was given and no longer than its inputs, never a trap.
        guard Fuzz.selected("json-delta") else { return }
        Self.check(await Fuzz.run(FuzzTargets.jsonDelta))
    }
}
