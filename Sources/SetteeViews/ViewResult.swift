import SetteeJSON

/// One row of a view answer. Keys and values stay as JSON text (as the map function emitted them)
/// and carry their sort key, so partial answers from several nodes merge in collation order
/// without re-parsing (`ViewResult.merge`).
public struct ViewRow: Sendable, Equatable {
    /// Document id (map rows only).
    public var id: [UInt8]?
    public var key: [UInt8]
    public var value: [UInt8]
    /// `Collation.encode(key)`.
    public var sortKey: [UInt8]
    /// `include_docs`: `{"meta":{...},"json":...}` (or `"base64"`), JSON text; `null` when gone.
    public var doc: [UInt8]?

    public init(id: [UInt8]?, key: [UInt8], value: [UInt8], sortKey: [UInt8], doc: [UInt8]? = nil) {
        self.id = id
        self.key = key
        self.value = value
        self.sortKey = sortKey
        self.doc = doc
    }
}

/// A view answer: `{"total_rows":N,"rows":[...]}` for map queries, `{"rows":[...]}` for reduce.
public struct ViewResult: Sendable, Equatable {
    /// nil for reduce answers (Couchbase omits `total_rows` there).
    public var totalRows: Int?
    public var rows: [ViewRow]
    /// Per-node failures of a scatter/gather (`on_error`): (from, reason).
    public var errors: [(String, String)] = []

    public init(totalRows: Int?, rows: [ViewRow]) {
        self.totalRows = totalRows
        self.rows = rows
    }

    public static func == (a: ViewResult, b: ViewResult) -> Bool {
        a.totalRows == b.totalRows && a.rows == b.rows
            && a.errors.map { $0.0 + "\u{0}" + $0.1 }
                == b.errors.map { $0.0 + "\u{0}" + $0.1 }
    }

    /// The response body.
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64 + rows.count * 64)
        out.append(UInt8(ascii: "{"))
        if let totalRows {
            out.append(contentsOf: #""total_rows":"#.utf8)
            out.append(contentsOf: String(totalRows).utf8)
            out.append(UInt8(ascii: ","))
        }
        out.append(contentsOf: #""rows":["#.utf8)
        for (i, row) in rows.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "{"))
            if let id = row.id {
                out.append(contentsOf: #""id":"#.utf8)
                JSON.writeString(String(decoding: id, as: UTF8.self), into: &out)
                out.append(UInt8(ascii: ","))
            }
            out.append(contentsOf: #""key":"#.utf8)
            out.append(contentsOf: row.key)
            out.append(contentsOf: #","value":"#.utf8)
            out.append(contentsOf: row.value)
            if let doc = row.doc {
                out.append(contentsOf: #","doc":"#.utf8)
                out.append(contentsOf: doc)
            }
            out.append(UInt8(ascii: "}"))
        }
        out.append(UInt8(ascii: "]"))
        if !errors.isEmpty {
            out.append(contentsOf: #","errors":["#.utf8)
            for (i, (from, reason)) in errors.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                JSON.object([("from", .string(from)), ("reason", .string(reason))]).write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// Merges map answers that are each sorted in view order (local vBuckets + each peer's),
    /// then applies `skip` and `limit` once: the scatter/gather step of a multi-node query (peers
    /// are asked with `skip=0` and `limit=skip+limit`).
    public static func mergeMap(_ parts: [ViewResult], descending: Bool, skip: Int, limit: Int?) -> ViewResult {
        var merged: [ViewRow] = []
        merged.reserveCapacity(parts.reduce(0) { $0 + $1.rows.count })
        var cursors = [Int](repeating: 0, count: parts.count)
        while true {
            var best: Int? = nil
            for (p, part) in parts.enumerated() where cursors[p] < part.rows.count {
                guard let b = best else {
                    best = p
                    continue
                }
                let c = compareRows(part.rows[cursors[p]], parts[b].rows[cursors[b]])
                if descending ? c > 0 : c < 0 { best = p }
            }
            guard let b = best else { break }
            merged.append(parts[b].rows[cursors[b]])
            cursors[b] += 1
        }
        let start = min(skip, merged.count)
        let end = limit.map { min(merged.count, start + $0) } ?? merged.count
        var result = ViewResult(
            totalRows: parts.reduce(0) { $0 + ($1.totalRows ?? 0) }, rows: Array(merged[start..<end]))
        result.errors = parts.flatMap(\.errors)
        return result
    }

    static func compareRows(_ a: ViewRow, _ b: ViewRow) -> Int {
        let c = Collation.compareBytes(a.sortKey, b.sortKey)
        if c != 0 { return c }
        return Collation.compareBytes(a.id ?? [], b.id ?? [])
    }
}
