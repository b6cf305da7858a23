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
        let r = try ViewMerge.parse(Array(#"{"total_rows":1e300,"rows":[]}"#.utf8))
        #expect(r.totalRows == nil)
        #expect(try ViewMerge.parse(Array(#"{"total_rows":7,"rows":[]}"#.utf8)).totalRows == 7)
    }
}
