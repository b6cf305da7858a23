import Foundation
import SetteeJSON
import SetteeViews
import Testing

/// How a scatter/gather merge rereduces a group's partial reductions (`ViewMerge.mergeSorted`, `PartialCombiner`).
@Suite struct ViewMergeRereduceTests {
    /// One part's grouped answer: a row per key in `keys` (integers, ascending), each with value `value(key)`.
    private func part(_ keys: [Int], _ value: (Int) -> String) -> ViewResult {
        ViewResult(
            totalRows: nil,
            rows: keys.map { k in
                let key = JSON.number(Double(k))
                return ViewRow(
                    id: nil, key: key.serialized(), value: Array(value(k).utf8), sortKey: Collation.encode(key))
            })
    }

    /// Proves a group's partials from every part reach one rereduce call together, as Couchbase's merger rereduces a
    /// key's rows from all nodes at once: a reduce answering `values.length` on rereduce gives, for each key, the
    /// number of parts that had it (pairwise combining gave 2 for any key on three parts; a key only one part has
    /// keeps that part's value, which is already a reduction). The sums of a plain
    /// rereduce over the same parts match the brute-force sums, ascending and descending, with groups at the first
    /// and last rows and keys only one part has.
    @Test func aGroupsPartialsAreRereducedInOneCall() throws {
        let parts = [
            part(Array(0..<30), { "\($0)" }),
            part(Array(stride(from: 0, to: 30, by: 2)), { "\($0 * 10)" }),
            part(Array(stride(from: 0, to: 30, by: 3)), { "\($0 * 100)" }),
        ]
        func expected(_ k: Int) -> (count: Int, sum: Int) {
            var count = 1
            var sum = k
            if k % 2 == 0 {
                count += 1
                sum += k * 10
            }
            if k % 3 == 0 {
                count += 1
                sum += k * 100
            }
            return (count, sum)
        }
        for descending in [false, true] {
            var params = [("group", "true")]
            if descending { params.append(("descending", "true")) }
            let q = try ViewQuery.parse(params)
            let ordered = descending ? Array((0..<30).reversed()) : Array(0..<30)
            let counting = try ReduceFunction(source: "function(k, v, re) { return re ? v.length : v.length; }")
            let counted = try ViewMerge.merge(descending ? parts.map(reversed) : parts, q, reduce: counting)
            #expect(counted.rows.map { String(decoding: $0.key, as: UTF8.self) } == ordered.map { "\($0)" })
            #expect(
                counted.rows.map { String(decoding: $0.value, as: UTF8.self) }
                    == ordered.map { expected($0).count == 1 ? "\($0)" : "\(expected($0).count)" },
                "descending \(descending)")
            let summing = try ReduceFunction(source: "function(k, v, re) { return sum(v); }")
            let summed = try ViewMerge.merge(descending ? parts.map(reversed) : parts, q, reduce: summing)
            #expect(
                summed.rows.map { String(decoding: $0.value, as: UTF8.self) } == ordered.map { "\(expected($0).sum)" })
            let builtIn = try ViewMerge.merge(descending ? parts.map(reversed) : parts, q, reduce: .sum)
            #expect(
                builtIn.rows.map { String(decoding: $0.value, as: UTF8.self) } == ordered.map { "\(expected($0).sum)" })
        }
    }

    /// A part's rows in descending key order, as a part answers a descending query.
    private func reversed(_ r: ViewResult) -> ViewResult { ViewResult(totalRows: r.totalRows, rows: r.rows.reversed()) }
}
