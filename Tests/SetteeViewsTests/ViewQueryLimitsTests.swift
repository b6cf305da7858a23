import SetteeCore
import SetteeJSON
import SetteeStorage
import SetteeViews
import Testing

@Suite struct ViewQueryLimitsTests {
    static let huge = String(Int.max)

    @Test func hugeSkipLimitAndTimeoutAreCutAtTheEdge() throws {
        // Proves `skip`, `limit`, `group_level` and `connection_timeout` of `Int.max` parse to their
        // named bounds, so the coordinator's `skip + limit` (which trapped before) and the peer call's
        // nanosecond timeout cannot overflow; negative values are still 400s.
        let q = try ViewQuery.parse([
            ("skip", Self.huge), ("limit", Self.huge), ("group_level", Self.huge), ("connection_timeout", Self.huge),
        ])
        #expect(q.skip == Limits.maxViewQueryCount && q.limit == Limits.maxViewQueryCount)
        #expect(q.groupLevel == Limits.maxViewQueryCount)
        #expect(q.connectionTimeoutMs == Limits.maxViewConnectionTimeoutMs)
        #expect(q.partial.limit == 2 * Limits.maxViewQueryCount && q.partial.skip == 0)
        #expect(q.partialParameters.contains { $0 == ("limit", String(2 * Limits.maxViewQueryCount)) })
        for bad in ["-1", "1e20", "99999999999999999999", "nan"] {
            #expect(throws: ViewError.self) { try ViewQuery.parse([("skip", bad)]) }
            #expect(throws: ViewError.self) { try ViewQuery.parse([("limit", bad)]) }
        }
    }

    @Test func hugeSkipAndLimitRunAgainstARealIndex() throws {
        // Proves a query with the largest skip/limit, with and without `keys` (the path that adds
        // skip + limit itself), answers instead of trapping: all rows, or none past the end.
        let f = try EngineFixture()
        try f.views.put(
            try DesignDocument(name: "d", body: Array(#"{"views":{"v":{"map":"function(d){ emit(d.x, 1); }"}}}"#.utf8)))
        try f.set("one", #"{"x":1}"#)
        try f.set("two", #"{"x":2}"#)
        let index = try #require(f.views.index(named: "d"))
        var q = try ViewQuery.parse([("stale", "false"), ("limit", Self.huge)])
        #expect(try index.query(view: "v", q).rows.count == 2)
        q = try ViewQuery.parse([("stale", "false"), ("limit", Self.huge), ("skip", Self.huge)])
        #expect(try index.query(view: "v", q).rows.isEmpty)
        q = try ViewQuery.parse([("stale", "false"), ("limit", Self.huge), ("skip", "1"), ("keys", "[1,2]")])
        #expect(try index.query(view: "v", q).rows.count == 1)
        f.views.stop()
        f.engine.shutdown()
    }

    @Test func aKeysListIsBoundedAndAPageStopsReadingAtItsEnd() throws {
        // Proves a `keys` list longer than `Limits.viewMaxQueryKeys` is a 400 (query string or body), one at the
        // bound parses; and that a page over `keys` (1,000 copies of a key with 20 rows, limit 5) answers its 5 rows.
        // Before, any count was accepted (a 4 MiB body: ~2,000,000 index lookups) and every listed key's rows were
        // held before the page was cut.
        let over = "[" + Array(repeating: "1", count: Limits.viewMaxQueryKeys + 1).joined(separator: ",") + "]"
        #expect(throws: ViewError.self) { try ViewQuery.parse([("keys", over)]) }
        #expect(throws: ViewError.self) {
            try ViewQuery.parse([], body: try JSON.parse(Array(#"{"keys":\#(over)}"#.utf8)))
        }
        let at = "[" + Array(repeating: "1", count: Limits.viewMaxQueryKeys).joined(separator: ",") + "]"
        #expect(try ViewQuery.parse([("keys", at)]).keys?.count == Limits.viewMaxQueryKeys)

        let f = try EngineFixture()
        try f.views.put(
            try DesignDocument(name: "d", body: Array(#"{"views":{"v":{"map":"function(d){ emit(d.x, 1); }"}}}"#.utf8)))
        for i in 0..<20 { try f.set("doc\(i)", #"{"x":1}"#) }
        let index = try #require(f.views.index(named: "d"))
        let keys = "[" + Array(repeating: "1", count: 1000).joined(separator: ",") + "]"
        let q = try ViewQuery.parse([("stale", "false"), ("limit", "5"), ("skip", "3"), ("keys", keys)])
        let rows = try index.query(view: "v", q).rows
        #expect(rows.count == 5)
        let ids = (0..<20).map { "doc\($0)" }.sorted()
        #expect(rows.map { String(decoding: $0.id ?? [], as: UTF8.self) } == Array(ids[3..<8]))
        f.views.stop()
        f.engine.shutdown()
    }

    @Test func aPeersStatsCountOutOfRangeIsMalformedNotATrap() throws {
        // Proves a peer's partial `_stats` whose `count` no Int64 holds, or is not whole, is a malformed partial
        // (`Int64(_:)` trapped on it), and good partials still combine.
        let good = Array(#"{"sum":3,"count":2,"min":1,"max":2,"sumsqr":5}"#.utf8)
        for count in ["1e300", "2.5", "-1"] {
            let bad = Array(#"{"sum":1,"count":\#(count),"min":1,"max":1,"sumsqr":1}"#.utf8)
            #expect(throws: ViewError.self) { try ViewMerge.combine([good, bad], .stats) }
        }
        let combined = try JSON.parse(try ViewMerge.combine([good, good], .stats))
        #expect(combined["count"]?.intValue == 4)
    }

    @Test func aPeersTotalRowsOutOfRangeIsIgnored() throws {
        // Proves a peer answer's `total_rows` that no Int holds (it trapped in `Int(Double)` before) is
        // read as absent instead.
        let r = try ViewMerge.parse(Array(#"{"total_rows":1e300,"rows":[]}"#.utf8), budget: ViewQueryBudget())
        #expect(r.totalRows == nil)
        #expect(
            try ViewMerge.parse(Array(#"{"total_rows":7,"rows":[]}"#.utf8), budget: ViewQueryBudget()).totalRows == 7)
    }

    @Test func aPeersAnswerIsReadARowAtATimeWithinTheBudget() throws {
        // Proves a peer's answer of a dense row (a key of 20,000 zeros: 40 KB of text, a parsed tree of about
        // 20,000 × `JSON.heldBytesPerValue` bytes) fails with 413 `too_large` under a budget that holds the row once
        // made but not its tree, since one row's tree may hold only what is left of the budget; and that the rows
        // counted before the failure are released. Before, the whole answer was parsed at once, bounded by its bytes
        // only, and its rows were counted after: it was read, having held the uncounted tree.
        let dense = "[" + Array(repeating: "0", count: 20_000).joined(separator: ",") + "]"
        let body = Array(#"{"total_rows":2,"rows":[{"id":"a","key":1,"value":null},{"id":"b","key":\#(dense)}]}"#.utf8)

        // With room for the tree the answer is read, each row counted as it is made.
        let roomy = ViewQueryBudget(limit: 1 << 30)
        let result = try ViewMerge.parse(body, budget: roomy)
        #expect(result.rows.count == 2 && result.rows.last?.key.count == dense.utf8.count)
        let rowBytes = result.rows.reduce(0) { $0 + $1.heldBytes }
        #expect(roomy.heldBytes == rowBytes)

        let treeBytes = 20_001 * JSON.heldBytesPerValue
        #expect(rowBytes < treeBytes)
        let budget = ViewQueryBudget(limit: (rowBytes + treeBytes) / 2)
        do {
            _ = try ViewMerge.parse(body, budget: budget)
            Issue.record("a row whose tree passes the budget was read")
        } catch {
            #expect(error.status == 413, "\(error)")
        }
        #expect(budget.heldBytes == 0)

        // A row past the budget once made fails the same way, and holds nothing after.
        let small = ViewQueryBudget(limit: rowBytes / 2)
        #expect(throws: ViewError.self) { try ViewMerge.parse(body, budget: small) }
        #expect(small.heldBytes == 0)
    }

    @Test func aPeersAnswerReadsAsItsRowsAndABadOneHoldsNothing() throws {
        // Proves the row-at-a-time read gives the rows the answer holds, in order, with sort keys; an answer that
        // breaks after some rows fails as a storage error (a peer failure), releasing the rows it had counted; and
        // values beside the rows are bounded apart from them, a peer failure too, not a budget one.
        let rows = (0..<50).map { #"{"id":"d\#($0)","key":[\#($0),"k"],"value":{"n":\#($0)}}"# }
        let body = Array(#"{"total_rows":50,"rows":[\#(rows.joined(separator: ","))]}"#.utf8)
        let budget = ViewQueryBudget()
        let result = try ViewMerge.parse(body, budget: budget)
        #expect(result.totalRows == 50)
        #expect(result.rows.map { String(decoding: $0.id ?? [], as: UTF8.self) } == (0..<50).map { "d\($0)" })
        #expect(result.rows[7].key == Array(#"[7,"k"]"#.utf8) && result.rows[7].value == Array(#"{"n":7}"#.utf8))
        #expect(result.rows[7].sortKey == Collation.encode(try JSON.parse(#"[7,"k"]"#)))

        let broken = ViewQueryBudget()
        let cut = Array(#"{"rows":[\#(rows.prefix(10).joined(separator: ",")),{"key":"#.utf8)
        do {
            _ = try ViewMerge.parse(cut, budget: broken)
            Issue.record("a cut answer was read")
        } catch {
            #expect(error.status != 413, "\(error)")
        }
        #expect(broken.heldBytes == 0)

        let padded = Array(#"{"rows":[],"extra":[\#(Array(repeating: "1", count: 100).joined(separator: ","))]}"#.utf8)
        do {
            _ = try ViewMerge.parse(padded, budget: ViewQueryBudget())
            Issue.record("an answer of 100 values beside its rows was read")
        } catch {
            #expect(error.status != 413, "\(error)")
        }
        #expect(throws: ViewError.self) {
            try ViewMerge.parse(Array(#"{"total_rows":1}"#.utf8), budget: ViewQueryBudget())
        }
        #expect(throws: ViewError.self) { try ViewMerge.parse(Array(#"[]"#.utf8), budget: ViewQueryBudget()) }
    }
}
