import SetteeJSON
import SetteeSQLite

/// Scatter/gather: merges the partial answers of several nodes (each answering for its own active
/// vBuckets) into one, in collation order, as Couchbase's `couch_index_merger` does.
///
/// Each part must come from `ViewQuery.partial` (skip 0, limit skip+limit): the first skip+limit
/// merged rows (or groups) are then among the first skip+limit of every part, because a part's
/// rows are a subset of the merged sequence in the same order.
public enum ViewMerge {
    /// Merges `parts` for query `q` over a view with reduce `reduce` (nil: map view). The merged rows count against
    /// `budget` (the coordinator's, which already holds the parts): a key listed many times repeats its rows.
    public static func merge(
        _ parts: [ViewResult], _ q: ViewQuery, reduce: ReduceFunction?, budget: ViewQueryBudget = ViewQueryBudget()
    ) throws(ViewError) -> ViewResult {
        // One combiner for the whole merge: a custom reduce compiles its JavaScript once, not once per group.
        let combiner = (q.reduce ?? true) ? reduce.map(PartialCombiner.init) : nil
        let reducing = combiner != nil
        let grouped = q.group || (q.groupLevel ?? 0) > 0
        var rows: [ViewRow] = []
        if let combiner, !grouped, q.keys == nil {
            // One row per part at most: combine them all.
            let values = parts.compactMap { $0.rows.first?.value }
            if !values.isEmpty {
                rows = [ViewRow(id: nil, key: Array("null".utf8), value: try combiner.combine(values), sortKey: [])]
            }
        } else if let keys = q.keys {
            // Also the ungrouped reduce over `keys`: each part's row per key carries that key as its sort key.
            // Rows come back in the order of `keys`. Parts answered the de-duplicated keys
            // (`partial`), so each part holds one run per distinct key: merge runs key by key, and
            // repeat a key's merged run for every time it is listed.
            var merged: [[UInt8]: [ViewRow]] = [:]
            var cursors = [Int](repeating: 0, count: parts.count)
            for key in ViewQuery.distinct(keys) {
                let sk = Collation.encode(key)
                var runs: [[ViewRow]] = []
                for (p, part) in parts.enumerated() {
                    var run: [ViewRow] = []
                    while cursors[p] < part.rows.count, part.rows[cursors[p]].sortKey == sk {
                        run.append(part.rows[cursors[p]])
                        cursors[p] += 1
                    }
                    runs.append(run)
                }
                merged[sk] = try mergeSorted(runs, descending: q.descending, combiner: combiner)
            }
            // Parts named each row by its listed key (`partial` sets `localOnly`): show the key the
            // query asked for, null when ungrouped, the key's array prefix at `group_level`.
            let level: Int? = q.group ? nil : q.groupLevel.flatMap { $0 == 0 ? nil : $0 }
            for key in keys {
                var run = merged[Collation.encode(key)] ?? []
                if reducing && !grouped {
                    for i in run.indices { run[i].key = Array("null".utf8) }
                } else if reducing, let level, case .array(let items) = key, items.count > level {
                    let prefix = JSON.array(Array(items.prefix(level)))
                    for i in run.indices {
                        run[i].key = prefix.serialized()
                        run[i].sortKey = Collation.encode(prefix)
                    }
                }
                try budget.take(run)
                rows += run
            }
        } else {
            rows = try mergeSorted(parts.map(\.rows), descending: q.descending, combiner: combiner)
            try budget.take(rows)
        }
        let start = min(q.skip, rows.count)
        let end = q.limit.map { min(rows.count, start + $0) } ?? rows.count
        rows.removeSubrange(end...)
        rows.removeSubrange(..<start)
        var result = ViewResult(totalRows: reducing ? nil : parts.reduce(0) { $0 + ($1.totalRows ?? 0) }, rows: rows)
        result.errors = parts.flatMap(\.errors)
        return result
    }

    /// k-way merge of sorted row lists; with a `combiner`, rows of equal keys (groups) are combined, all of a group's
    /// partial reductions in one call, as Couchbase's merger rereduces a key's rows from every node together.
    static func mergeSorted(_ lists: [[ViewRow]], descending: Bool, combiner: PartialCombiner?) throws(ViewError)
        -> [ViewRow]
    {
        var out: [ViewRow] = []
        var cursors = [Int](repeating: 0, count: lists.count)
        // The values of the rows with `out.last`'s key, while there are two or more.
        var group: [[UInt8]] = []
        while true {
            var best: Int? = nil
            for (p, list) in lists.enumerated() where cursors[p] < list.count {
                guard let b = best else {
                    best = p
                    continue
                }
                let c = ViewResult.compareRows(list[cursors[p]], lists[b][cursors[b]])
                if descending ? c > 0 : c < 0 { best = p }
            }
            guard let b = best else { break }
            let row = lists[b][cursors[b]]
            cursors[b] += 1
            if combiner != nil, let last = out.last, last.sortKey == row.sortKey {
                if group.isEmpty { group.append(last.value) }
                group.append(row.value)
            } else {
                if let combiner, !group.isEmpty {
                    out[out.count - 1].value = try combiner.combine(group)
                    group.removeAll(keepingCapacity: true)
                }
                out.append(row)
            }
        }
        if let combiner, !group.isEmpty { out[out.count - 1].value = try combiner.combine(group) }
        return out
    }

    /// Combines partial reductions (`PartialCombiner`).
    public static func combine(_ values: [[UInt8]], _ reduce: ReduceFunction) throws(ViewError) -> [UInt8] {
        try PartialCombiner(reduce).combine(values)
    }
}

/// Combines the partial reductions of one merge: `_count`/`_sum` add, `_stats` add sums and counts and take min/max,
/// a custom reduce rereduces. A custom reduce's function is compiled on first use and kept for the merge (one
/// JavaScript engine per merge; merges run on one thread each, as queries do).
final class PartialCombiner {
    let reduce: ReduceFunction
    private var runner: ReduceRunner?

    init(_ reduce: ReduceFunction) { self.reduce = reduce }

    /// Combines partial reductions: `_count`/`_sum` add, `_stats` add sums and counts and take min/max,
    /// a custom reduce rereduces.
    func combine(_ values: [[UInt8]]) throws(ViewError) -> [UInt8] {
        if values.count == 1 { return values[0] }
        switch reduce {
        case .count, .sum:
            var total = 0.0
            for v in values {
                guard let d = (try? JSON.parse(v))?.numberValue else {
                    throw .reduce("partial reduction is not a number")
                }
                total += d
            }
            var out: [UInt8] = []
            JSON.writeNumber(total, into: &out)
            return out
        case .stats:
            var a = Aggregate()
            a.min = .infinity
            a.max = -.infinity
            for v in values {
                guard let o = try? JSON.parse(v), let sum = o["sum"]?.numberValue,
                    let count = o["count"]?.numberValue, let min = o["min"]?.numberValue,
                    let max = o["max"]?.numberValue, let sumsqr = o["sumsqr"]?.numberValue
                else { throw .reduce("partial _stats reduction is malformed") }
                // A peer's count: a whole number a 64-bit count holds, else the partial is malformed (`Int64(_:)` of
                // 1e300 or 2.5 trapped).
                guard let n = Int64(exactly: count), n >= 0 else {
                    throw .reduce("partial _stats reduction is malformed")
                }
                let (total, overflow) = a.count.addingReportingOverflow(n)
                guard !overflow else { throw .reduce("partial _stats reduction is malformed") }
                a.sum += sum
                a.count = total
                a.numbers = total
                a.min = Swift.min(a.min, min)
                a.max = Swift.max(a.max, max)
                a.sumsqr += sumsqr
            }
            return try a.render(.stats)
        case .javascript(let source):
            var all: [UInt8] = [UInt8(ascii: "[")]
            for (i, v) in values.enumerated() {
                if i > 0 { all.append(UInt8(ascii: ",")) }
                all.append(contentsOf: v)
            }
            all.append(UInt8(ascii: "]"))
            do {
                let runner: ReduceRunner
                if let made = self.runner {
                    runner = made
                } else {
                    runner = try ReduceRunner(source: source)
                    self.runner = runner
                }
                return try runner.run(keys: Array("null".utf8), values: all, rereduce: true)
            } catch {
                throw .reduce(error.message)
            }
        }
    }
}

extension ViewMerge {

    /// Parses a peer's answer (the JSON `serialized()` produces) back into rows with sort keys, each row counted in
    /// the query's `budget` as it is made.
    ///
    /// The answer's bytes are counted in the budget while they are held (the caller releases them after) and its
    /// rows may be as dense as emitted keys and values are (`[0,0,…]`), each value of a parsed tree holding up to
    /// `JSON.heldBytesPerValue` (48) bytes where the text spent 2. So the answer is read a row at a time
    /// (`JSON.parse(_:streaming:)`): the whole tree is never built, and one row's tree may hold at most what is left
    /// of the budget. Before, the whole answer was parsed at once, bounded only by its bytes: a 256 MiB answer
    /// within the budget could become about 6 GiB of tree.
    public static func parse(_ body: [UInt8], budget: ViewQueryBudget) throws(ViewError) -> ViewResult {
        var rows: [ViewRow] = []
        // Whether a row was being read when the parse stopped: its values bound is the budget's.
        var inRow = false
        let top: JSON
        do {
            top = try JSON.parse(
                body, streaming: "rows", maxValues: Self.answerValuesBesideRows,
                maxElementValues: {
                    inRow = true
                    return budget.remaining / JSON.heldBytesPerValue
                }
            ) { item in
                inRow = false
                let key = item["key"] ?? .null
                let row = ViewRow(
                    id: item["id"]?.stringValue.map { Array($0.utf8) }, key: key.serialized(),
                    value: (item["value"] ?? .null).serialized(), sortKey: Collation.encode(key),
                    doc: item["doc"].map { $0.serialized() })
                // Kept before it is counted, so a failure below releases it with the others.
                rows.append(row)
                try budget.take(row.heldBytes)
            }
        } catch {
            // The rows made so far go with the failure.
            budget.release(rows)
            throw Self.failure(error, inRow: inRow, budget)
        }
        guard case .array? = top["rows"] else {
            budget.release(rows)
            throw .storage("peer answer has no rows")
        }
        return ViewResult(totalRows: top["total_rows"]?.intValue, rows: rows)
    }

    /// What reading a peer's answer failed with, as the query's error.
    private static func failure(_ error: any Error, inRow: Bool, _ budget: ViewQueryBudget) -> ViewError {
        switch error {
        case let error as ViewError:
            return error
        case let error as JSONError where error.bound == .values && inRow:
            return budget.exceeded
        case let error as JSONError:
            return .storage("peer answer is not JSON: \(error.reason)")
        default:
            return .storage("peer answer: \(error)")
        }
    }

    /// Values a peer's answer may hold outside its rows: `serialized()` writes `total_rows` and `rows` only.
    static let answerValuesBesideRows = 64
}

extension ViewQuery {
    /// The query a coordinator sends to every node (and runs locally) before merging: no skip, limit
    /// `skip + limit`, this node's vBuckets only.
    public var partial: ViewQuery {
        var q = self
        q.keys = keys.map(Self.distinct)
        q.skip = 0
        q.limit = limit.map { $0 + skip }
        q.localOnly = true
        return q
    }

    /// `keys` without repetitions (equal under collation), first occurrences in order.
    static func distinct(_ keys: [JSON]) -> [JSON] {
        var seen = Set<[UInt8]>()
        return keys.filter { seen.insert(Collation.encode($0)).inserted }
    }

    /// `partial` as query-string parameters (for a peer's views port), without `keys` (sent as a
    /// POST body by the caller).
    public var partialParameters: [(String, String)] {
        var p: [(String, String)] = [("_local", "true"), ("stale", stale.rawValue)]
        if let key { p.append(("key", key.text)) }
        if let startKey { p.append(("startkey", startKey.text)) }
        if let endKey { p.append(("endkey", endKey.text)) }
        if let startKeyDocID { p.append(("startkey_docid", startKeyDocID)) }
        if let endKeyDocID { p.append(("endkey_docid", endKeyDocID)) }
        if !inclusiveEnd { p.append(("inclusive_end", "false")) }
        if descending { p.append(("descending", "true")) }
        if let limit { p.append(("limit", String(limit + skip))) }
        if let reduce { p.append(("reduce", reduce ? "true" : "false")) }
        if group { p.append(("group", "true")) }
        if let groupLevel { p.append(("group_level", String(groupLevel))) }
        if includeDocs { p.append(("include_docs", "true")) }
        return p
    }
}
