import SetteeCore
import SetteeJS
import SetteeJSON
import SetteeSQLite
import Synchronization

extension DesignIndex {
    /// Answers a query from this node's index (the local part of a scatter/gather). Blocking: call
    /// off event loops. `stale=false` first brings the index up to date; `update_after` starts an
    /// update after answering. The rows read count against `budget` as they are read (`tooLarge` past it).
    public func query(
        view name: String, _ q: ViewQuery, budget: ViewQueryBudget = ViewQueryBudget()
    ) throws(ViewError) -> ViewResult {
        try query(view: name, q, budget: budget, reduceBatching: ReduceBatching())
    }

    /// `query` with the bounds of a custom reduce's calls given (tests: smaller bounds, and a look at every call).
    func query(
        view name: String, _ q: ViewQuery, budget: ViewQueryBudget, reduceBatching: ReduceBatching
    ) throws(ViewError) -> ViewResult {
        guard let viewIndex = design.views.firstIndex(where: { $0.name == name }) else {
            throw .notFound("missing_named_view")
        }
        let view = design.views[viewIndex]
        try q.validate(hasReduce: view.reduce != nil)
        if q.stale == .false { try update(wait: true) }
        defer { if q.stale == .updateAfter { try? update(wait: false) } }
        try waitUntilOpened()
        let db: Connection
        do { db = try IndexStore.openReader(path: path) } catch { throw .storage("\(error)") }
        defer { db.close() }
        do throws(SQLiteError) {
            let excluded = try excludedVBuckets(db)
            if let reduce = view.reduce, q.reduce ?? true {
                return try reduceQuery(
                    db: db, view: viewIndex, reduce: reduce, q, excluding: excluded, budget: budget,
                    batching: reduceBatching)
            }
            return try mapQuery(db: db, view: viewIndex, q, excluding: excluded, budget: budget)
        } catch {
            if error.context == Self.budgetContext { throw budget.exceeded }
            throw error.context == "reduce" ? .reduce(error.message) : .storage("\(error)")
        }
    }

    // MARK: Ranges

    /// The condition that leaves out the rows of vBuckets the index holds that are not active here now ("" when there
    /// is none, as almost always): a vBucket held after an unclean shutdown keeps its rows for its release (ADR 0097),
    /// and one that moved away keeps them until the next pass drops them. A node's answer holds only the vBuckets it
    /// serves, so a scatter/gather never counts a row twice.
    /// Worked out again only when a vBucket's state changed or the index gained or dropped a vBucket since the last
    /// answer (`stateEpoch`, `indexedGeneration`, both read before the index's table): a query costs one comparison
    /// otherwise.
    func excludedVBuckets(_ db: Connection) throws(SQLiteError) -> String {
        let epoch = source.stateEpoch
        let generation = indexedGeneration.load(ordering: .acquiring)
        if let epoch, let last = exclusion.withLock({ $0 }), last.epoch == epoch, last.generation == generation {
            return last.clause
        }
        let s = try db.prepare("SELECT vb FROM vbuckets")
        var out: [Int64] = []
        while try s.step() {
            let vb = s.int64(at: 0)
            guard vb >= 0, vb < Int64(source.vbucketCount) else { continue }
            if !source.isActive(VBucketID(UInt16(vb))) { out.append(vb) }
        }
        let clause = out.isEmpty ? "" : " AND vb NOT IN (\(out.map(String.init).joined(separator: ",")))"
        if let epoch { exclusion.withLock { $0 = (epoch, generation, clause) } }
        return clause
    }

    /// The WHERE clause after `view = ?1` for the key range of `q` and the `excluding` condition, with its blob
    /// bindings.
    private func rangeClause(
        _ q: ViewQuery, exactKey: [UInt8]?, excluding: String
    ) -> (String, [(Int32, [UInt8])]) {
        var clause = excluding
        var binds: [(Int32, [UInt8])] = []
        if let exactKey {
            return (" AND sk = ?2" + excluding, [(2, exactKey)])
        }
        let lowOp = q.descending ? "<=" : ">="
        if let s = q.effectiveStartKey {
            binds.append((2, Collation.encode(s)))
            if let d = q.startKeyDocID {
                clause += " AND (sk, doc) \(lowOp) (?2, ?3)"
                binds.append((3, Array(d.utf8)))
            } else {
                clause += " AND sk \(lowOp) ?2"
            }
        }
        if let e = q.effectiveEndKey {
            binds.append((4, Collation.encode(e)))
            let op = q.descending ? (q.inclusiveEnd ? ">=" : ">") : (q.inclusiveEnd ? "<=" : "<")
            if let d = q.endKeyDocID {
                clause += " AND (sk, doc) \(op) (?4, ?5)"
                binds.append((5, Array(d.utf8)))
            } else {
                clause += " AND sk \(op) ?4"
            }
        }
        return (clause, binds)
    }

    /// `sql` with `view` at ?1 and `binds`, prepared once per query: a `keys` query runs the same text for every listed
    /// key (up to `Limits.viewMaxQueryKeys`), and preparing it anew for each was most of a many-key query's time.
    private func prepare(
        _ db: Connection, _ sql: String, view: Int, _ binds: [(Int32, [UInt8])],
        cache: inout [String: Statement]
    ) throws(SQLiteError) -> Statement {
        let s: Statement
        if let made = cache[sql] {
            made.reset()
            s = made
        } else {
            s = try db.prepare(sql)
            cache[sql] = s
        }
        try s.bind(Int64(view), at: 1)
        for (i, b) in binds { try s.bindBlob(b, at: i) }
        return s
    }

    private func totalRows(_ db: Connection, view: Int, excluding: String) throws(SQLiteError) -> Int {
        Int(
            try db.queryInt64("SELECT CAST(TOTAL(count) AS INTEGER) FROM totals WHERE view = \(view)\(excluding)") ?? 0)
    }

    /// The context of the error `charge` throws past the query's budget (`query` turns it into `tooLarge`).
    static let budgetContext = "view query budget"

    /// The query's budget passed, in the reading code's SQLite error type.
    static let budgetExceeded = SQLiteError(extendedCode: 1, message: "view query budget", context: budgetContext)

    /// Counts `bytes` more held against `budget`, inside the reading code's SQLite error type.
    private func charge(_ budget: ViewQueryBudget, _ bytes: Int) throws(SQLiteError) {
        guard budget.admit(bytes) else { throw Self.budgetExceeded }
    }

    // MARK: Map

    private func mapQuery(
        db: Connection, view: Int, _ q: ViewQuery, excluding: String, budget: ViewQueryBudget
    ) throws(SQLiteError) -> ViewResult {
        let order = q.descending ? "DESC" : "ASC"
        var rows: [ViewRow] = []
        let ranges: [[UInt8]?] = q.keys.map { $0.map { Collation.encode($0) } } ?? [nil]
        // With `keys` the concatenation is skipped/limited as a whole; otherwise SQL does it.
        let sqlLimit = q.keys == nil ? (q.limit.map { Int64($0) } ?? -1) : -1
        let sqlSkip = q.keys == nil ? Int64(q.skip) : 0
        // With `keys` and a limit, nothing past `skip + limit` of the concatenation is answered: stop reading there
        // (every listed key's rows were read and held before the page was cut).
        let wanted = q.keys == nil ? Int.max : q.limit.map { q.skip + $0 } ?? Int.max
        var statements: [String: Statement] = [:]
        keys: for exact in ranges {
            let (clause, binds) = rangeClause(q, exactKey: exact, excluding: excluding)
            let s = try prepare(
                db,
                "SELECT doc, key, value, sk FROM rows WHERE view = ?1\(clause) ORDER BY sk \(order), doc \(order), "
                    + "n \(order) LIMIT \(sqlLimit) OFFSET \(sqlSkip)", view: view, binds, cache: &statements)
            while try s.step() {
                if rows.count >= wanted { break keys }
                let row = ViewRow(id: s.blob(at: 0), key: s.blob(at: 1), value: s.blob(at: 2), sortKey: s.blob(at: 3))
                // Without `limit` a query reads its whole range (every listed key's, each time it is listed).
                try charge(budget, row.heldBytes)
                rows.append(row)
            }
        }
        if q.keys != nil {
            let start = min(q.skip, rows.count)
            let end = q.limit.map { min(rows.count, start + $0) } ?? rows.count
            rows.removeSubrange(end...)
            rows.removeSubrange(..<start)
        }
        if q.includeDocs {
            for i in rows.indices {
                let doc = try includedDoc(rows[i].id ?? [], budget: budget)
                try charge(budget, doc.count)
                rows[i].doc = doc
            }
        }
        return ViewResult(totalRows: try totalRows(db, view: view, excluding: excluding), rows: rows)
    }

    /// Couchbase's `include_docs` shape: `{"meta":{"id","rev","expiration","flags"},"json":doc}`
    /// (`"base64"` instead of `"json"` for non-JSON bodies), `null` when the document is gone.
    ///
    /// Whether the body is JSON is found by parsing it, and the parse's tree (up to `JSON.heldBytesPerValue` bytes a
    /// value, where the text spends 2) may hold at most what is left of the query's `budget`: a 20 MiB document of
    /// `[0,0,…]` made a tree of about 500 MB for every row that listed it, outside the budget. Past it the query
    /// answers 413 `too_large`, as for rows that do not fit.
    func includedDoc(_ id: [UInt8], budget: ViewQueryBudget) throws(SQLiteError) -> [UInt8] {
        guard let (value, meta) = source.document(id) else { return Array("null".utf8) }
        var out: [UInt8] = Array(#"{"meta":"#.utf8)
        let isJSON: Bool
        let affordable = max(1, budget.remaining) / JSON.heldBytesPerValue
        do {
            _ = try JSON.parse(value, maxValues: min(Limits.maxJSONValues, affordable))
            isJSON = true
        } catch {
            // Past the parse's own bound the body is not JSON to a view, as before; past the budget the query fails.
            if error.bound == .values, affordable < Limits.maxJSONValues { throw Self.budgetExceeded }
            isJSON = false
        }
        out.append(
            contentsOf: MapRunner.metaJSON(id: id, meta: meta, vb: VBucketHash.vbucket(forKey: id), isJSON: isJSON))
        if isJSON {
            out.append(contentsOf: #","json":"#.utf8)
            out.append(contentsOf: value)
        } else {
            out.append(contentsOf: #","base64":"#.utf8)
            JSON.writeString(Base64.encode(value), into: &out)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    // MARK: Reduce

    private func reduceQuery(
        db: Connection, view: Int, reduce: ReduceFunction, _ q: ViewQuery, excluding: String, budget: ViewQueryBudget,
        batching: ReduceBatching
    ) throws(SQLiteError) -> ViewResult {
        // nil: one group over the whole range; 0: exact keys; n > 0: array prefixes of length n.
        let level: Int? = q.group ? 0 : (q.groupLevel.flatMap { $0 == 0 ? nil : $0 })
        let order = q.descending ? "DESC" : "ASC"
        let ranges: [[UInt8]?] = q.keys.map { $0.map { Collation.encode($0) } } ?? [nil]
        // An ungrouped reduction over `keys` answers one row per listed key with key null, and `group_level` one
        // row per listed key with the key's prefix (every row of a listed key has that key). A node answering a
        // coordinator (`localOnly`) names the listed key instead: two listed keys can share a prefix, and the
        // coordinator combines the nodes' rows per listed key, then shows null or the prefix.
        let namedKeys: [[UInt8]]? = q.localOnly ? q.keys.map { $0.map { $0.serialized() } } : nil
        var rows: [ViewRow] = []
        // Without `keys` the groups come in the page's order, so the page is cut as they come: the first `skip` are
        // passed over (neither reduced nor held) and the read stops once `limit` are held, as Couchbase's reduce fold
        // stops at its limit. Before, every group of the range was reduced and held, and `group=true&limit=10` over a
        // million keys failed on the query's budget. With `keys`, skip and limit apply to the rows of all listed keys
        // together, after them.
        let paging = q.keys == nil
        var skipLeft = paging ? q.skip : 0
        var room = paging ? q.limit : nil
        // Whether the next group is on the page (false: skipped, and counted as skipped).
        func onPage() -> Bool {
            guard skipLeft > 0 else { return true }
            skipLeft -= 1
            return false
        }
        var full: Bool { room == 0 }
        // Every group (or listed key's reduction) held is counted as it is added.
        func add(_ row: ViewRow) throws(SQLiteError) {
            try charge(budget, row.heldBytes)
            rows.append(row)
            room = room.map { $0 - 1 }
        }
        var reducer = Reducer(function: reduce, batching: batching)
        var statements: [String: Statement] = [:]
        for (rangeIndex, exact) in ranges.enumerated() {
            let ungroupedKey = namedKeys.map { $0[rangeIndex] } ?? Array("null".utf8)
            let (clause, binds) = rangeClause(q, exactKey: exact, excluding: excluding)
            if case .javascript = reduce {
                // Custom reduce: iterate the rows below.
            } else if level == nil {
                if full { break }
                if clause.isEmpty, reduce == .count {
                    // Stored reduction: no row is read.
                    let n = try totalRows(db, view: view, excluding: excluding)
                    if n > 0, onPage() {
                        try add(ViewRow(id: nil, key: Array("null".utf8), value: Array(String(n).utf8), sortKey: []))
                    }
                    continue
                }
                let s = try prepare(
                    db,
                    "SELECT COUNT(*), TOTAL(num), COUNT(num), MIN(num), MAX(num), TOTAL(num * num) FROM rows "
                        + "WHERE view = ?1\(clause)", view: view, binds, cache: &statements)
                guard try s.step(), s.int64(at: 0) > 0, onPage() else { continue }
                let value = try builtin(reduce, Aggregate(statement: s, offset: 0))
                try add(ViewRow(id: nil, key: ungroupedKey, value: value, sortKey: exact ?? []))
                continue
            } else if level == 0 {
                let s = try prepare(
                    db,
                    "SELECT sk, MIN(key), COUNT(*), TOTAL(num), COUNT(num), MIN(num), MAX(num), TOTAL(num * num) "
                        + "FROM rows WHERE view = ?1\(clause) GROUP BY sk ORDER BY sk \(order)", view: view, binds,
                    cache: &statements)
                while !full, try s.step() {
                    guard onPage() else { continue }
                    let value = try builtin(reduce, Aggregate(statement: s, offset: 2))
                    try add(ViewRow(id: nil, key: s.blob(at: 1), value: value, sortKey: s.blob(at: 0)))
                }
                continue
            }
            // Row by row: group levels and custom reduces.
            let s = try prepare(
                db,
                "SELECT sk, key, value, num, doc FROM rows WHERE view = ?1\(clause) ORDER BY sk \(order), doc \(order), "
                    + "n \(order)", view: view, binds, cache: &statements)
            // The group being read, and whether it is on the page (a skipped group is not reduced).
            var current: (sk: [UInt8], key: [UInt8], kept: Bool)? = nil
            while !full, try s.step() {
                let sk = s.blob(at: 0)
                let key = s.blob(at: 1)
                let group: (sk: [UInt8], key: [UInt8])
                switch level {
                case nil: group = (exact ?? [], ungroupedKey)
                case 0: group = (sk, key)
                case _? where namedKeys != nil: group = (exact ?? [], ungroupedKey)
                case let n?:
                    if case .array(let items)? = try? JSON.parse(key), items.count > n {
                        let prefix = JSON.array(Array(items.prefix(n)))
                        group = (Collation.encode(prefix), prefix.serialized())
                    } else {
                        group = (sk, key)
                    }
                }
                if let c = current, c.sk != group.sk {
                    if c.kept { try add(ViewRow(id: nil, key: c.key, value: try reducer.finish(), sortKey: c.sk)) }
                    current = nil
                    if full { break }
                }
                if current == nil { current = (group.sk, group.key, onPage()) }
                if current?.kept == true {
                    try reducer.add(
                        key: key, id: s.blob(at: 4), value: s.blob(at: 2), num: s.isNull(at: 3) ? nil : s.double(at: 3)
                    )
                }
            }
            if let c = current, c.kept, !full {
                try add(ViewRow(id: nil, key: c.key, value: try reducer.finish(), sortKey: c.sk))
            }
        }
        if !paging {
            let start = min(q.skip, rows.count)
            let end = q.limit.map { min(rows.count, start + $0) } ?? rows.count
            rows.removeSubrange(end...)
            rows.removeSubrange(..<start)
        }
        return ViewResult(totalRows: nil, rows: rows)
    }

    private func builtin(_ reduce: ReduceFunction, _ a: Aggregate) throws(SQLiteError) -> [UInt8] {
        do { return try a.render(reduce) } catch {
            throw SQLiteError(extendedCode: 1, message: error.reason, context: "reduce")
        }
    }
}

/// count/sum/min/max/sumsqr of a group, and the rendering of `_count`, `_sum`, `_stats`.
struct Aggregate {
    var count: Int64 = 0
    var sum: Double = 0
    var numbers: Int64 = 0
    var min: Double = .infinity
    var max: Double = -.infinity
    var sumsqr: Double = 0

    init() {}

    init(statement s: Statement, offset o: Int32) {
        count = s.int64(at: o)
        sum = s.double(at: o + 1)
        numbers = s.int64(at: o + 2)
        min = s.double(at: o + 3)
        max = s.double(at: o + 4)
        sumsqr = s.double(at: o + 5)
    }

    mutating func add(_ num: Double?) {
        count += 1
        guard let num else { return }
        numbers += 1
        sum += num
        min = Swift.min(min, num)
        max = Swift.max(max, num)
        sumsqr += num * num
    }

    func render(_ reduce: ReduceFunction) throws(ViewError) -> [UInt8] {
        var out: [UInt8] = []
        switch reduce {
        case .count: out.append(contentsOf: String(count).utf8)
        case .sum:
            guard numbers == count else { throw .reduce("Builtin _sum function requires map values to be numbers") }
            JSON.writeNumber(sum, into: &out)
        case .stats:
            guard numbers == count else { throw .reduce("Builtin _stats function requires map values to be numbers") }
            JSON.object([
                ("sum", .number(sum)), ("count", .number(Double(count))), ("min", .number(min)),
                ("max", .number(max)), ("sumsqr", .number(sumsqr)),
            ]).write(into: &out)
        case .javascript: preconditionFailure("render called for a custom reduce")
        }
        return out
    }
}

/// How much one call into a custom reduce function is handed: at most `maxValues` values and `maxBytes` bytes of JSON
/// (its `keys` and `values` arrays together; `Limits.reduceBatchSize`, `Limits.reduceBatchBytes`). Tests give smaller
/// bounds and `observe` every call.
struct ReduceBatching {
    var maxValues = Limits.reduceBatchSize
    var maxBytes = Limits.reduceBatchBytes
    /// Told of every call before it is made; nil (queries) costs one comparison a call, nothing a row.
    var observe: ((ReduceCall) -> Void)? = nil
}

/// One call into a custom reduce function: the values it was handed, the bytes of its `keys` and `values` JSON
/// together, and whether it was a rereduce.
struct ReduceCall: Equatable {
    var values: Int
    var bytes: Int
    var rereduce: Bool
}

/// Accumulates one group's rows and reduces them: built-ins in Swift; custom JavaScript in batches
/// (`reduce(keys, values, false)`) of at most `batching.maxValues` rows and `batching.maxBytes` bytes of keys and values
/// (a row that would take a batch past the bytes calls the batch without it; a row larger than the bound alone is a
/// batch of its own). When there was more than one batch, the partial results are rereduced (`reduce(null, partials,
/// true)`) in calls of the same bounds, at least two partials each: past them, the partials held are folded into one
/// that starts the next call. A correct reduce (CouchDB's and Couchbase's contract: rereducing any grouping of partial
/// results gives the same answer) answers the same whatever the bounds.
struct Reducer {
    let function: ReduceFunction
    let batching: ReduceBatching
    private var aggregate = Aggregate()
    private var js: ReduceRunner?
    /// The rows not yet reduced, `[[key,"id"],…` and `[value,…` (closing brackets not yet written), and their count.
    private var keys: [UInt8] = []
    private var values: [UInt8] = []
    private var pending = 0
    /// The partial results not yet rereduced, `[p,…` (closing bracket not yet written), and their count.
    private var partials: [UInt8] = []
    private var partialCount = 0
    /// The `keys` argument of a rereduce.
    private static let null = Array("null".utf8)

    init(function: ReduceFunction, batching: ReduceBatching = ReduceBatching()) {
        self.function = function
        self.batching = batching
    }

    /// Bytes the pending batch's call would be handed (with its closing brackets).
    private var batchBytes: Int { keys.count + values.count + 2 }
    /// Bytes the held partials' rereduce would be handed (`null`, the partials, the closing bracket).
    private var rereduceBytes: Int { Self.null.count + partials.count + 1 }

    mutating func add(key: [UInt8], id: [UInt8], value: [UInt8], num: Double?) throws(SQLiteError) {
        guard case .javascript(let source) = function else {
            aggregate.add(num)
            return
        }
        let keysMark = keys.count
        let valuesMark = values.count
        append(key: key, id: id, value: value)
        if pending > 0, batchBytes > batching.maxBytes {
            // This row would take the batch past its bound: the batch is reduced without it.
            keys.removeSubrange(keysMark...)
            values.removeSubrange(valuesMark...)
            try flush(source)
            append(key: key, id: id, value: value)
        }
        pending += 1
        if pending >= batching.maxValues || batchBytes >= batching.maxBytes { try flush(source) }
    }

    /// Writes one row into the pending batch (its count not yet raised).
    private mutating func append(key: [UInt8], id: [UInt8], value: [UInt8]) {
        keys.append(pending == 0 ? UInt8(ascii: "[") : UInt8(ascii: ","))
        keys.append(UInt8(ascii: "["))
        keys.append(contentsOf: key)
        keys.append(UInt8(ascii: ","))
        JSON.writeString(String(decoding: id, as: UTF8.self), into: &keys)
        keys.append(UInt8(ascii: "]"))
        values.append(pending == 0 ? UInt8(ascii: "[") : UInt8(ascii: ","))
        values.append(contentsOf: value)
    }

    private mutating func flush(_ source: String) throws(SQLiteError) {
        guard pending > 0 else { return }
        keys.append(UInt8(ascii: "]"))
        values.append(UInt8(ascii: "]"))
        let partial = try call(source, keys: keys, values: values, count: pending, rereduce: false)
        keys.removeAll(keepingCapacity: true)
        values.removeAll(keepingCapacity: true)
        pending = 0
        try addPartial(partial, source)
    }

    /// Holds one more partial result, folding the held ones first when it would take their call past the bounds.
    private mutating func addPartial(_ partial: [UInt8], _ source: String) throws(SQLiteError) {
        if partialCount >= 2, rereduceBytes + 1 + partial.count > batching.maxBytes { try fold(source) }
        partials.append(partialCount == 0 ? UInt8(ascii: "[") : UInt8(ascii: ","))
        partials.append(contentsOf: partial)
        partialCount += 1
        if partialCount >= 2, partialCount >= batching.maxValues || rereduceBytes >= batching.maxBytes {
            try fold(source)
        }
    }

    /// Rereduces the held partials into one, which becomes the first partial of the next rereduce.
    private mutating func fold(_ source: String) throws(SQLiteError) {
        partials.append(UInt8(ascii: "]"))
        let folded = try call(source, keys: Self.null, values: partials, count: partialCount, rereduce: true)
        partials.removeAll(keepingCapacity: true)
        partials.append(UInt8(ascii: "["))
        partials.append(contentsOf: folded)
        partialCount = 1
    }

    private mutating func call(
        _ source: String, keys: [UInt8], values: [UInt8], count: Int, rereduce: Bool
    ) throws(SQLiteError) -> [UInt8] {
        let runner: ReduceRunner
        if let js {
            runner = js
        } else {
            runner = try ReduceRunner(source: source)
            js = runner
        }
        batching.observe?(ReduceCall(values: count, bytes: keys.count + values.count, rereduce: rereduce))
        return try runner.run(keys: keys, values: values, rereduce: rereduce)
    }

    mutating func finish() throws(SQLiteError) -> [UInt8] {
        guard case .javascript(let source) = function else {
            defer { aggregate = Aggregate() }
            do { return try aggregate.render(function) } catch {
                throw SQLiteError(extendedCode: 1, message: error.reason, context: "reduce")
            }
        }
        try flush(source)
        defer {
            partials.removeAll(keepingCapacity: true)
            partialCount = 0
        }
        if partialCount > 1 { try fold(source) }
        // One partial: the only batch's reduction, or the last rereduce's (`[` before it).
        return partialCount == 1 ? Array(partials.dropFirst()) : Self.null
    }
}

/// A custom reduce function compiled on the querying thread (one `JSEngine` per query that needs
/// one; queries run on a blocking pool, so no context is shared between threads).
final class ReduceRunner {
    let engine: JSEngine
    let function: JSFunction

    init(source: String) throws(SQLiteError) {
        engine = JSEngine()
        do {
            // Couchbase's JS runtime offers `sum(values)` to reduce functions.
            try engine.evaluate(
                "function sum(v){ var s = 0; for (var i = 0; i < v.length; i++) s += v[i]; return s; }")
            function = try engine.compileFunction(source)
        } catch {
            throw SQLiteError(extendedCode: 1, message: "reduce function: \(error)", context: "reduce")
        }
    }

    func run(keys: [UInt8], values: [UInt8], rereduce: Bool) throws(SQLiteError) -> [UInt8] {
        do {
            let out = try engine.call(function, [.json(keys), .json(values), .bool(rereduce)]) ?? Array("null".utf8)
            guard out.count <= Limits.maxReductionSize else {
                throw SQLiteError(
                    extendedCode: 1, message: "Reduction too large (\(out.count) bytes)", context: "reduce")
            }
            return out
        } catch let e as SQLiteError {
            throw e
        } catch {
            throw SQLiteError(extendedCode: 1, message: "\(error)", context: "reduce")
        }
    }
}
