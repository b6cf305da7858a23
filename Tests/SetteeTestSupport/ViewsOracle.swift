import SetteeCore
import SetteeJS
// The views oracle shared by SetteeViewsTests and ProcessTests: random documents and queries, and a
// brute-force map/reduce to compare the engine's answers with.
import SetteeJSON
import SetteeViews

/// The design document every engine test uses: map-only, `_sum`, `_count`, `_stats` and a custom
/// reduce with rereduce, over keys of every JSON type.
package enum TestDesign {
    package static let views: [(name: String, map: String, reduce: String?)] = [
        ("by_k", "function(doc, meta){ emit(doc.k, typeof doc.n == 'number' ? doc.n : 0); }", "_sum"),
        ("by_type_k", "function(doc){ if (doc.type) emit([doc.type, doc.k, doc.n], 1); }", "_count"),
        ("stats", "function(doc){ if (typeof doc.n == 'number') emit(doc.s, doc.n); }", "_stats"),
        (
            "custom", "function(doc){ emit([doc.type, doc.s], doc.n); }",
            "function(keys, values, rereduce){ return rereduce ? sum(values) : values.length; }"
        ),
        // Throws for documents without `s` (logged and skipped, like Couchbase).
        ("plain", "function(doc, meta){ if (doc.s.length > 1) emit(doc.s, meta.id); }", nil),
    ]

    package static var body: [UInt8] {
        JSON.object([
            (
                "views",
                .object(
                    views.map { v in
                        var members: [(String, JSON)] = [("map", .string(v.map))]
                        if let r = v.reduce { members.append(("reduce", .string(r))) }
                        return (v.name, .object(members))
                    })
            )
        ]).serialized()
    }

    package static let keyDomain = [
        "null", "true", "false", "0", "1", "2.5", "-3", "7", #""a""#, #""A""#, #""ab""#, #""b""#, #""_x""#,
        #""é""#, "[1]", #"["a",1]"#, "[]", #"{"a":1}"#,
    ]

    package static func randomDoc(_ rng: inout SplitMix64) -> String {
        var members: [String] = []
        if Int.random(in: 0..<10, using: &rng) > 0 {
            members.append(#""type":"\#(["a", "b", "c"].randomElement(using: &rng)!)""#)
        }
        members.append(#""k":\#(keyDomain.randomElement(using: &rng)!)"#)
        if Int.random(in: 0..<10, using: &rng) > 0 { members.append(#""n":\#(Int.random(in: -20...20, using: &rng))"#) }
        if Int.random(in: 0..<10, using: &rng) > 0 {
            let alphabet = ["a", "A", "b", "B", "_", "1", "é"]
            let s = (0..<Int.random(in: 0...3, using: &rng)).map { _ in alphabet.randomElement(using: &rng)! }.joined()
            members.append(#""s":"\#(s)""#)
        }
        return "{" + members.joined(separator: ",") + "}"
    }

    /// A random valid query for view `view` (every parameter of the issue).
    package static func randomQuery(view: Int, docIDs: [String], _ rng: inout SplitMix64) throws -> (ViewQuery, String)
    {
        let hasReduce = views[view].reduce != nil
        var params: [(String, String)] = [("stale", "false")]
        func key() -> String {
            if views[view].name == "by_type_k" {
                let t = ["\"a\"", "\"b\"", "\"c\""].randomElement(using: &rng)!
                switch Int.random(in: 0..<3, using: &rng) {
                case 0: return "[\(t)]"
                case 1: return "[\(t),\(keyDomain.randomElement(using: &rng)!)]"
                default:
                    return "[\(t),\(keyDomain.randomElement(using: &rng)!),\(Int.random(in: -20...20, using: &rng))]"
                }
            }
            if views[view].name == "stats" || views[view].name == "plain" {
                return "\"" + ["", "a", "A", "b", "_", "1", "aB", "é"].randomElement(using: &rng)! + "\""
            }
            return keyDomain.randomElement(using: &rng)!
        }
        let descending = Bool.random(using: &rng)
        if descending { params.append(("descending", "true")) }
        let reducing = hasReduce && Int.random(in: 0..<3, using: &rng) > 0
        if hasReduce && !reducing { params.append(("reduce", "false")) }
        var grouped = false
        if reducing {
            switch Int.random(in: 0..<4, using: &rng) {
            case 0: break
            case 1:
                params.append(("group", "true"))
                grouped = true
            case 2:
                params.append(("group_level", String(Int.random(in: 0...3, using: &rng))))
                grouped = true
            default: params.append(("group", "false"))
            }
        }
        switch Int.random(in: 0..<5, using: &rng) {
        case 0: params.append(("key", key()))
        case 1 where !reducing || grouped:
            let ks = (0..<Int.random(in: 1...3, using: &rng)).map { _ in key() }
            params.append(("keys", "[" + ks.joined(separator: ",") + "]"))
        case 2, 3:
            var a = key()
            var b = key()
            let c = Collation.compare(try JSON.parse(a), try JSON.parse(b))
            if descending ? c < 0 : c > 0 { swap(&a, &b) }
            if Bool.random(using: &rng) { params.append(("startkey", a)) }
            if Bool.random(using: &rng) { params.append(("endkey", b)) }
            if !reducing && !docIDs.isEmpty && Bool.random(using: &rng) {
                params.append(("startkey_docid", docIDs.randomElement(using: &rng)!))
                params.append(("endkey_docid", docIDs.randomElement(using: &rng)!))
            }
            if Bool.random(using: &rng) { params.append(("inclusive_end", "false")) }
        default: break
        }
        // startkey_docid/endkey_docid only apply with their keys; drop the ones without.
        if !params.contains(where: { $0.0 == "startkey" }) { params.removeAll { $0.0 == "startkey_docid" } }
        if !params.contains(where: { $0.0 == "endkey" }) { params.removeAll { $0.0 == "endkey_docid" } }
        if Bool.random(using: &rng) { params.append(("limit", String(Int.random(in: 0...30, using: &rng)))) }
        if Bool.random(using: &rng) { params.append(("skip", String(Int.random(in: 0...10, using: &rng)))) }
        let description = params.map { "\($0.0)=\($0.1)" }.joined(separator: "&")
        return (try ViewQuery.parse(params), description)
    }
}

/// The oracle: evaluates a view query by running the map function over every live document, sorting
/// all rows and applying the parameters one by one, with no index, no SQL, no stored reductions and
/// no batching (a custom reduce gets all values in one call).
package struct BruteForce {
    package struct Row {
        package var id: String
        package var key: JSON
        package var keyText: [UInt8]
        package var sk: [UInt8]
        package var n: Int
        package var value: [UInt8]
    }

    /// Runs `map` over `docs` (id → JSON text) and sorts the rows in view order.
    package static func rows(map: String, docs: [String: String]) throws -> [Row] {
        let js = JSEngine()
        nonisolated(unsafe) var emitted: [([UInt8], [UInt8])] = []
        js.register(name: "emit") { args throws(JSError) in
            emitted.append((try args.json(0) ?? Array("null".utf8), try args.json(1) ?? Array("null".utf8)))
        }
        let f = try js.compileFunction(map)
        var out: [Row] = []
        for (id, body) in docs {
            emitted = []
            let meta = #"{"id":"\#(id)","type":"json"}"#
            do { try js.call(f, [.json(Array(body.utf8)), .json(Array(meta.utf8))]) } catch { continue }
            for (n, (k, v)) in emitted.enumerated() {
                let key = try JSON.parse(k)
                out.append(Row(id: id, key: key, keyText: k, sk: Collation.encode(key), n: n, value: v))
            }
        }
        out.sort { a, b in
            let c = Collation.compareBytes(a.sk, b.sk)
            if c != 0 { return c < 0 }
            let d = Collation.compareBytes(Array(a.id.utf8), Array(b.id.utf8))
            if d != 0 { return d < 0 }
            return a.n < b.n
        }
        return out
    }

    /// Whether `row` is inside the query's range (ascending or descending), as CouchDB defines it.
    package static func inRange(_ r: Row, _ q: ViewQuery) -> Bool {
        func cmp(_ key: JSON, _ docid: String?) -> Int {
            let c = Collation.compareBytes(r.sk, Collation.encode(key))
            if c != 0 || docid == nil { return c }
            return Collation.compareBytes(Array(r.id.utf8), Array(docid!.utf8))
        }
        let start = q.key ?? q.startKey
        let end = q.key ?? q.endKey
        if let s = start {
            let c = cmp(s, q.startKeyDocID)
            if q.descending ? c > 0 : c < 0 { return false }
        }
        if let e = end {
            let c = cmp(e, q.endKeyDocID)
            if q.descending {
                if q.inclusiveEnd ? c < 0 : c <= 0 { return false }
            } else {
                if q.inclusiveEnd ? c > 0 : c >= 0 { return false }
            }
        }
        return true
    }

    /// The expected response body for `q` over `all` (sorted rows) with reduce `reduce` (nil = map view).
    package static func answer(_ all: [Row], _ q: ViewQuery, reduce: String?) throws -> [UInt8] {
        var selected: [[Row]] = []
        if let keys = q.keys {
            for k in keys {
                let sk = Collation.encode(k)
                var part = all.filter { $0.sk == sk }
                if q.descending { part.reverse() }
                selected.append(part)
            }
        } else {
            var part = all.filter { inRange($0, q) }
            if q.descending { part.reverse() }
            selected.append(part)
        }
        let reducing = reduce != nil && (q.reduce ?? true)
        var out: [UInt8] = []
        if !reducing {
            let flat = selected.flatMap { $0 }
            let page = Array(flat.dropFirst(q.skip).prefix(q.limit ?? Int.max))
            out.append(contentsOf: #"{"total_rows":\#(all.count),"rows":["#.utf8)
            for (i, r) in page.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                out.append(contentsOf: #"{"id":"#.utf8)
                out.append(contentsOf: JSON.string(r.id).serialized())
                out.append(contentsOf: #","key":"#.utf8)
                out.append(contentsOf: r.keyText)
                out.append(contentsOf: #","value":"#.utf8)
                out.append(contentsOf: r.value)
                out.append(UInt8(ascii: "}"))
            }
            out.append(contentsOf: "]}".utf8)
            return out
        }
        let level: Int? = q.group ? 0 : (q.groupLevel.flatMap { $0 == 0 ? nil : $0 })
        var groups: [(key: [UInt8], rows: [Row])] = []
        for part in selected {
            var current: (sk: [UInt8], key: [UInt8], rows: [Row])? = nil
            for r in part {
                let g: ([UInt8], [UInt8])
                switch level {
                case nil: g = ([], Array("null".utf8))
                case 0: g = (r.sk, r.keyText)
                case let n?:
                    if case .array(let items) = r.key, items.count > n {
                        let p = JSON.array(Array(items.prefix(n)))
                        g = (Collation.encode(p), p.serialized())
                    } else {
                        g = (r.sk, r.keyText)
                    }
                }
                if let c = current, c.sk != g.0 {
                    groups.append((c.key, c.rows))
                    current = nil
                }
                if current == nil { current = (g.0, g.1, []) }
                current!.rows.append(r)
            }
            if let c = current { groups.append((c.key, c.rows)) }
        }
        let page = Array(groups.dropFirst(q.skip).prefix(q.limit ?? Int.max))
        out.append(contentsOf: #"{"rows":["#.utf8)
        for (i, g) in page.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: #"{"key":"#.utf8)
            out.append(contentsOf: g.key)
            out.append(contentsOf: #","value":"#.utf8)
            out.append(contentsOf: try reduceValue(reduce!, g.rows))
            out.append(UInt8(ascii: "}"))
        }
        out.append(contentsOf: "]}".utf8)
        return out
    }

    package static func reduceValue(_ reduce: String, _ rows: [Row]) throws -> [UInt8] {
        let nums = rows.compactMap { (try? JSON.parse($0.value))?.numberValue }
        switch reduce {
        case "_count": return Array(String(rows.count).utf8)
        case "_sum": return JSON.number(nums.reduce(0, +)).serialized()
        case "_stats":
            return JSON.object([
                ("sum", .number(nums.reduce(0, +))), ("count", .number(Double(nums.count))),
                ("min", .number(nums.min()!)), ("max", .number(nums.max()!)),
                ("sumsqr", .number(nums.reduce(0) { $0 + $1 * $1 })),
            ]).serialized()
        default:
            let js = JSEngine()
            try js.evaluate("function sum(v){ var s = 0; for (var i = 0; i < v.length; i++) s += v[i]; return s; }")
            let f = try js.compileFunction(reduce)
            var keys: [UInt8] = [UInt8(ascii: "[")]
            var values: [UInt8] = [UInt8(ascii: "[")]
            for (i, r) in rows.enumerated() {
                if i > 0 {
                    keys.append(UInt8(ascii: ","))
                    values.append(UInt8(ascii: ","))
                }
                keys.append(contentsOf: Array("[".utf8) + r.keyText + Array(",".utf8))
                keys.append(contentsOf: JSON.string(r.id).serialized())
                keys.append(UInt8(ascii: "]"))
                values.append(contentsOf: r.value)
            }
            keys.append(UInt8(ascii: "]"))
            values.append(UInt8(ascii: "]"))
            return try js.call(f, [.json(keys), .json(values), .bool(false)]) ?? Array("null".utf8)
        }
    }
}
