import SetteeCore
import SetteeJSON
import SetteeStorage
import Synchronization
import Testing

@testable import SetteeViews

@Suite struct ReduceBatchTests {
    /// A correct custom reduce (rereducing any grouping of partials gives the same answer) that reads its keys too:
    /// rows, characters of the values, and the sum of the `n` each key names.
    static let design = #"""
        {"views":{"r":{"map":"function(d){ emit([d.g, d.n], d.pad); }",
          "reduce":"function(k, v, re){ var c = 0, l = 0, n = 0; for (var i = 0; i < v.length; i++) { if (re) { c += v[i].c; l += v[i].l; n += v[i].n; } else { c += 1; l += v[i].length; n += k[i][0][1]; } } return {c: c, l: l, n: n}; }"}}}
        """#

    /// Documents 0..<40 in 2 groups, each emitting a value of 900 to 960 bytes.
    static let documents = (0..<40).map { n in (n: n, g: n % 2, length: 900 + (n % 7) * 10) }

    static func expected(_ docs: [(n: Int, g: Int, length: Int)]) -> String {
        #"{"c":\#(docs.count),"l":\#(docs.reduce(0) { $0 + $1.length }),"n":\#(docs.reduce(0) { $0 + $1.n })}"#
    }

    @Test(arguments: [
        // Bound by bytes: about 4 rows a call, every call within 4 KiB; the partials rereduced in one call.
        (1000, 4096, false),
        // Bound by values: 3 a call; the 14 partials of the whole range are folded 3 at a time.
        (3, 1 << 20, true),
        // Every row alone past the bytes (a row larger than the bound is a batch of its own); rereduces of 2
        // partials (about 60 bytes).
        (1000, 64, true),
    ])
    func aCustomReduceIsCalledWithinItsBoundsAndAnswersAsUnbatched(maxValues: Int, maxBytes: Int, folds: Bool) throws {
        // Proves a custom reduce's calls hold at most `maxValues` values and `maxBytes` bytes of keys and values (a
        // single row larger than the bytes alone; a rereduce at least two partials), including the rereduce of the
        // partials, which are folded past the bounds; and that the answer is the same as one call over all rows
        // (the default bounds here) and as the reduction worked out in Swift. Before, a batch was bounded by count
        // only (1,000 values of up to 16 MiB each) and one rereduce held every partial of a group.
        let f = try EngineFixture()
        defer {
            f.views.stop()
            f.engine.shutdown()
        }
        try f.views.put(try DesignDocument(name: "d", body: Array(Self.design.utf8)))
        for d in Self.documents {
            let pad = String(repeating: "v", count: d.length)
            try f.set("doc\(d.n)", #"{"g":\#(d.g),"n":\#(d.n),"pad":"\#(pad)"}"#)
        }
        let index = try #require(f.views.index(named: "d"))
        let calls = Mutex<[ReduceCall]>([])
        let batching = ReduceBatching(
            maxValues: maxValues, maxBytes: maxBytes, observe: { call in calls.withLock { $0.append(call) } })
        let wanted: [([(String, String)], [(key: String, value: String)])] = [
            ([], [("null", Self.expected(Self.documents))]),
            (
                [("group_level", "1")],
                [0, 1].map { g in ("[\(g)]", Self.expected(Self.documents.filter { $0.g == g })) }
            ),
            (
                [("group", "true")],
                Self.documents.sorted { ($0.g, $0.n) < ($1.g, $1.n) }.map { ("[\($0.g),\($0.n)]", Self.expected([$0])) }
            ),
        ]
        for (params, rows) in wanted {
            calls.withLock { $0 = [] }
            let q = try ViewQuery.parse([("stale", "false")] + params)
            let batched = try index.query(view: "r", q, budget: ViewQueryBudget(), reduceBatching: batching)
            let got = batched.rows.map {
                (String(decoding: $0.key, as: UTF8.self), String(decoding: $0.value, as: UTF8.self))
            }
            #expect(got.map(\.0) == rows.map(\.key), "\(params)")
            #expect(got.map(\.1) == rows.map(\.value), "\(params)")
            #expect(batched == (try index.query(view: "r", q)), "\(params): as the default bounds answer")
            let seen = calls.withLock { $0 }
            #expect(!seen.isEmpty)
            for call in seen {
                if call.rereduce {
                    #expect(call.values >= 2 && call.values <= max(2, maxValues), "\(params) \(call)")
                    #expect(call.bytes <= maxBytes || call.values == 2, "\(params) \(call)")
                } else {
                    #expect(call.values >= 1 && call.values <= maxValues, "\(params) \(call)")
                    #expect(call.bytes <= maxBytes || call.values == 1, "\(params) \(call)")
                }
            }
            if maxBytes >= 4096 {
                #expect(seen.allSatisfy { $0.bytes <= maxBytes }, "\(params): every call within the bytes")
            }
            if params.isEmpty {
                // The whole range: many batches, their partials rereduced in more than one call when the bounds
                // are small, and the rows handed once each.
                #expect(seen.filter { !$0.rereduce }.reduce(0) { $0 + $1.values } == Self.documents.count)
                #expect(seen.filter { !$0.rereduce }.count > 1)
                let rereduces = seen.filter(\.rereduce).count
                #expect(folds ? rereduces > 1 : rereduces == 1, "partials folded past the bounds only: \(seen)")
            }
        }
    }
}
