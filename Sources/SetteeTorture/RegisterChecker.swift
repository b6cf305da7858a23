/// Per-key linearizability of a read/write register, by Wing and Gong's search: repeatedly pick an
/// operation that may take effect next (no other required operation completed before it was invoked),
/// apply it to the model, and backtrack on a contradiction. States already explored (the set of operations
/// taken plus the register's value) are remembered, which keeps short per-key histories cheap.
///
/// Rules:
/// 1. An `ok` operation must take effect between its invocation and its completion.
/// 2. An `info` write may take effect at any time after its invocation, or never; an `info` read says
///    nothing and is dropped.
/// 3. A `fail` operation never took effect and is dropped.
/// 4. The register starts with `initial` (nil: absent).
///
/// The search is bounded (`maxSteps`); past it the verdict is `.unknown`, never a guess.
public enum RegisterChecker {
    public enum Verdict: Hashable, Sendable {
        case linearizable
        /// No order explains the history; `operations` is the key's history (for the report).
        case notLinearizable(key: String, operations: Int)
        /// The search ran out of steps before deciding.
        case unknown(key: String)
    }

    /// Checks every key of `entries` that has register operations (`write` / `read`).
    public static func check(_ entries: [TortureEntry], initial: Int? = nil, maxSteps: Int = 2_000_000) -> [String:
        Verdict]
    {
        var byKey: [String: [TortureEntry]] = [:]
        for e in entries {
            switch e.operation {
            case .write, .read: byKey[e.operation.key, default: []].append(e)
            case .insert, .add: continue
            }
        }
        var verdicts: [String: Verdict] = [:]
        for (key, ops) in byKey {
            verdicts[key] = checkKey(key, ops, initial: initial, maxSteps: maxSteps)
        }
        return verdicts
    }

    private struct Op {
        var invoke: UInt64
        /// `UInt64.max` for an `info` write: it may take effect arbitrarily late.
        var complete: UInt64
        var required: Bool
        var isWrite: Bool
        var value: Int?
    }

    private struct State: Hashable {
        var taken: [UInt64]
        var value: Int?
    }

    static func checkKey(_ key: String, _ entries: [TortureEntry], initial: Int?, maxSteps: Int) -> Verdict {
        var ops: [Op] = []
        for e in entries {
            switch (e.operation, e.outcome) {
            case (_, .fail): continue
            case (.write(_, let v), .ok):
                ops.append(Op(invoke: e.invokeNs, complete: e.completeNs, required: true, isWrite: true, value: v))
            case (.write(_, let v), .info):
                ops.append(Op(invoke: e.invokeNs, complete: .max, required: false, isWrite: true, value: v))
            case (.read, .ok(let seen)):
                ops.append(Op(invoke: e.invokeNs, complete: e.completeNs, required: true, isWrite: false, value: seen))
            default: continue
            }
        }
        ops.sort { ($0.invoke, $0.complete) < ($1.invoke, $1.complete) }
        let words = (ops.count + 63) / 64
        let requiredCount = ops.reduce(0) { $0 + ($1.required ? 1 : 0) }
        var seen = Set<State>()
        var steps = 0
        // Depth-first search with an explicit stack: each frame is a state and the candidates still to try.
        var stack: [(State, Int, [Int])] = []
        let start = State(taken: Array(repeating: 0, count: words), value: initial)

        func isTaken(_ s: State, _ i: Int) -> Bool { s.taken[i / 64] & (1 << UInt64(i % 64)) != 0 }
        func candidates(_ s: State) -> [Int] {
            // The earliest completion among required operations not yet taken bounds what may go next.
            var horizon = UInt64.max
            for (i, op) in ops.enumerated() where op.required && !isTaken(s, i) { horizon = min(horizon, op.complete) }
            var out: [Int] = []
            for (i, op) in ops.enumerated() where !isTaken(s, i) && op.invoke <= horizon {
                if op.isWrite || op.value == s.value { out.append(i) }
            }
            return out
        }

        seen.insert(start)
        stack.append((start, 0, candidates(start)))
        while let (frameState, taken, frameCandidates) = stack.popLast() {
            var state = frameState
            var cands = frameCandidates
            if taken == requiredCount { return .linearizable }
            steps += 1
            if steps > maxSteps { return .unknown(key: key) }
            guard let next = cands.popLast() else { continue }
            stack.append((state, taken, cands))
            state.taken[next / 64] |= 1 << UInt64(next % 64)
            if ops[next].isWrite { state.value = ops[next].value }
            guard seen.insert(state).inserted else { continue }
            let nowTaken = taken + (ops[next].required ? 1 : 0)
            if nowTaken == requiredCount { return .linearizable }
            stack.append((state, nowTaken, candidates(state)))
        }
        return requiredCount == 0 ? .linearizable : .notLinearizable(key: key, operations: ops.count)
    }
}
