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

    @Test func aPeersTotalRowsOutOfRangeIsIgnored() throws {
        // Proves a peer answer's `total_rows` that no Int holds (it trapped in `Int(Double)` before) is
        // read as absent instead.
        let r = try ViewMerge.parse(Array(#"{"total_rows":1e300,"rows":[]}"#.utf8))
        #expect(r.totalRows == nil)
        #expect(try ViewMerge.parse(Array(#"{"total_rows":7,"rows":[]}"#.utf8)).totalRows == 7)
    }
}
