import SetteeCore
import SetteeJSON
import SetteeStorage
import SetteeViews
import Testing

@Suite struct ViewQueryBudgetTests {
    static let design = #"""
        {"views":{
          "v":{"map":"function(d){ emit([d.g, d.n], d.pad); }"},
          "c":{"map":"function(d){ emit([d.g, d.n], d.n); }","reduce":"_count"},
          "j":{"map":"function(d){ emit([d.g, d.n], d.pad); }","reduce":"function(k, v, re){ return v.length; }"}
        }}
        """#

    /// 60 documents in 3 groups, each emitting a 200-byte value: a few tens of kilobytes of rows.
    static func fixture() throws -> (EngineFixture, DesignIndex) {
        let f = try EngineFixture()
        try f.views.put(try DesignDocument(name: "d", body: Array(design.utf8)))
        let pad = String(repeating: "p", count: 200)
        for n in 0..<60 { try f.set("doc\(n)", #"{"g":\#(n % 3),"n":\#(n),"pad":"\#(pad)"}"#) }
        return (f, try #require(f.views.index(named: "d")))
    }

    @Test func aQueryPastItsBoundFailsAndOneWithinItAnswersAsBefore() throws {
        // Proves every way a node's read holds rows counts them against the query's budget: a map query without
        // `limit`, a `keys` list repeating a key, `include_docs`, grouped built-in and custom reductions. Each query
        // answers with the default bound, answers the same with a bound of exactly what it held, and fails with 413
        // `too_large` (Couchbase's `{"error","reason"}`, naming limit and startkey) one byte under it. Before, a query
        // without `limit` held every row of its range whatever its size.
        let (f, index) = try Self.fixture()
        defer {
            f.views.stop()
            f.engine.shutdown()
        }
        let repeated = "[" + Array(repeating: "[1,1]", count: 500).joined(separator: ",") + "]"
        let cases: [(String, [(String, String)])] = [
            ("v", []),
            ("v", [("descending", "true"), ("startkey", "[2]")]),
            ("v", [("keys", repeated)]),
            ("v", [("include_docs", "true"), ("limit", "30")]),
            ("c", [("group", "true")]),
            ("c", [("group_level", "1")]),
            ("c", [("reduce", "false")]),
            ("j", [("group", "true")]),
        ]
        for (view, params) in cases {
            let q = try ViewQuery.parse([("stale", "false")] + params)
            let unbounded = ViewQueryBudget()
            let answer = try index.query(view: view, q, budget: unbounded)
            #expect(!answer.rows.isEmpty, "\(view) \(params)")
            let held = unbounded.heldBytes
            // What is counted covers the rows and documents the answer holds (its body is a little smaller).
            try #require(held >= answer.serialized().count, "\(view) \(params): \(held) bytes counted")
            #expect(try index.query(view: view, q, budget: ViewQueryBudget(limit: held)) == answer)
            let error = #expect(throws: ViewError.self, "\(view) \(params)") {
                try index.query(view: view, q, budget: ViewQueryBudget(limit: held - 1))
            }
            #expect(error == ViewQueryBudget(limit: held - 1).exceeded)
            #expect(error?.status == 413 && error?.error == "too_large")
            #expect(error?.reason.contains("limit") == true && error?.reason.contains("startkey") == true)
        }
        // A page is what is held: with `limit` the same range fits a budget the whole range does not.
        let whole = ViewQueryBudget()
        _ = try index.query(view: "v", try ViewQuery.parse([("stale", "false")]), budget: whole)
        let page = try index.query(
            view: "v", try ViewQuery.parse([("stale", "false"), ("limit", "5")]),
            budget: ViewQueryBudget(limit: whole.heldBytes / 4))
        #expect(page.rows.count == 5)
    }

    @Test func includeDocsParsesWithinTheBudget() throws {
        // Proves `include_docs` tells a JSON body from another within the query's budget: a document of 100,000
        // zeros (about 200 KB of text, a tree of about 4.8 MB) answers within the default budget as `json`, and with
        // a budget that holds its text and row but not its tree the query answers 413 `too_large` (before, the tree
        // was built outside the budget, whatever its size).
        let (f, index) = try Self.fixture()
        defer {
            f.views.stop()
            f.engine.shutdown()
        }
        let zeros = "[" + Array(repeating: "0", count: 100_000).joined(separator: ",") + "]"
        try f.set("dense", #"{"g":9,"n":1000,"pad":\#(zeros)}"#)
        let q = try ViewQuery.parse([("stale", "false"), ("include_docs", "true"), ("startkey", "[9]")])
        let answer = try index.query(view: "v", q)
        #expect(answer.rows.count == 1)
        let doc = try #require(answer.rows.first?.doc.flatMap { try? JSON.parse($0) })
        #expect(doc["json"]?["pad"]?.arrayValue?.count == 100_000)
        let error = #expect(throws: ViewError.self) {
            try index.query(view: "v", q, budget: ViewQueryBudget(limit: 1_000_000))
        }
        #expect(error?.status == 413 && error?.error == "too_large")
    }

    @Test func aReducePageHoldsOnlyItsGroups() throws {
        // Proves a grouped reduction without `keys` cuts its page as the groups come: for every view (built-in
        // `_count` by SQL, custom by rows), grouping (exact, level 1, level 2) and direction, each skip/limit page
        // equals that slice of the whole grouped answer, and it fits a budget of what the page's rows hold, which
        // the whole answer does not (before, every group of the range was reduced and held first, so a small page
        // of many groups failed on the budget).
        let (f, index) = try Self.fixture()
        defer {
            f.views.stop()
            f.engine.shutdown()
        }
        for view in ["c", "j"] {
            for grouping in [("group", "true"), ("group_level", "1"), ("group_level", "2")] {
                for descending in ["false", "true"] {
                    let base = [("stale", "false"), grouping, ("descending", descending)]
                    let wholeBudget = ViewQueryBudget()
                    let whole = try index.query(view: view, try ViewQuery.parse(base), budget: wholeBudget).rows
                    #expect(whole.count == (grouping.0 == "group_level" && grouping.1 == "1" ? 3 : 60))
                    for (skip, limit) in [(0, 1), (0, 2), (1, 1), (2, 5), (58, 5), (59, 1), (60, 3), (0, 0), (0, 100)] {
                        let q = try ViewQuery.parse(base + [("skip", String(skip)), ("limit", String(limit))])
                        let want = Array(whole.dropFirst(skip).prefix(limit))
                        let pageBytes = want.reduce(0) { $0 + $1.heldBytes }
                        let got = try index.query(view: view, q, budget: ViewQueryBudget(limit: max(1, pageBytes)))
                        #expect(
                            got.rows == want, "\(view) \(grouping) descending \(descending) skip \(skip) limit \(limit)"
                        )
                    }
                    if whole.count == 60 {
                        #expect(wholeBudget.heldBytes > 10 * whole[0].heldBytes, "the whole answer holds every group")
                    }
                }
            }
        }
    }

    @Test func aCoordinatorsMergeCountsTheRowsItRepeats() throws {
        // Proves the merged page counts against the coordinator's budget: a key listed 500 times repeats its merged
        // run 500 times, so two small parts merge into a page 500 times their size. Within the bound the merge
        // answers as before (the default budget); past it, `too_large`.
        let (f, index) = try Self.fixture()
        defer {
            f.views.stop()
            f.engine.shutdown()
        }
        let repeated = "[" + Array(repeating: "[1,1]", count: 500).joined(separator: ",") + "]"
        let q = try ViewQuery.parse([("stale", "false"), ("keys", repeated)])
        let part = try index.query(view: "v", q.partial)
        #expect(part.rows.count == 1)
        let empty = ViewResult(totalRows: 0, rows: [])
        let merged = try ViewMerge.merge([part, empty], q, reduce: nil)
        #expect(merged.rows.count == 500 && merged.rows.allSatisfy { $0 == part.rows[0] })
        let budget = ViewQueryBudget()
        #expect(try ViewMerge.merge([part, empty], q, reduce: nil, budget: budget) == merged)
        #expect(budget.heldBytes == 500 * part.rows[0].heldBytes)
        let error = #expect(throws: ViewError.self) {
            try ViewMerge.merge([part, empty], q, reduce: nil, budget: ViewQueryBudget(limit: budget.heldBytes - 1))
        }
        #expect(error?.status == 413)
        // Sorted merges (no `keys`) count their page too.
        let all = try ViewQuery.parse([("stale", "false")])
        let whole = try index.query(view: "v", all.partial)
        let sorted = ViewQueryBudget(limit: 10 * whole.rows.reduce(0) { $0 + $1.heldBytes })
        #expect(try ViewMerge.merge([whole, empty], all, reduce: nil, budget: sorted).rows == whole.rows)
        #expect(throws: ViewError.self) {
            try ViewMerge.merge([whole, empty], all, reduce: nil, budget: ViewQueryBudget(limit: 1000))
        }
    }

    @Test func peersAnswersCountAsTheirBytesArrive() async throws {
        // Proves a coordinator reading peers' answers stops once the bytes held by the query (its own part, then
        // every answer so far, read concurrently) pass the bound: the body is refused after the chunk that passes it,
        // not read whole first, and its bytes are released. Within the bound the body is gathered unchanged and stays
        // counted until the caller releases it.
        func body(_ chunks: Int, of size: Int) -> AsyncStream<[UInt8]> {
            AsyncStream { c in
                for i in 0..<chunks { c.yield([UInt8](repeating: UInt8(i), count: size)) }
                c.finish()
            }
        }
        let budget = ViewQueryBudget(limit: 1000)
        try budget.take(300)  // the coordinator's own part
        let first = try await budget.collect(body(2, of: 200))
        #expect(first == [UInt8](repeating: 0, count: 200) + [UInt8](repeating: 1, count: 200))
        #expect(budget.heldBytes == 700)
        let read = ChunkCount()
        let counted = AsyncStream<[UInt8]> { c in
            for _ in 0..<100 {
                c.yield([UInt8](repeating: 7, count: 100))
            }
            c.finish()
        }.map { (chunk: [UInt8]) -> [UInt8] in
            read.value += 1
            return chunk
        }
        let error = await #expect(throws: ViewError.self) { try await budget.collect(counted) }
        #expect(error == budget.exceeded)
        #expect(read.value == 4, "the body was read past the bound: \(read.value) chunks")
        #expect(budget.heldBytes == 700)
        budget.release(first.count)
        #expect(budget.heldBytes == 300)
    }
}

/// Chunks a test body gave out (read on the collecting task only).
private final class ChunkCount: @unchecked Sendable {
    var value = 0
}
