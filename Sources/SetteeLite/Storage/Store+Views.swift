import SetteeCore
import SetteeJSON
import SetteeSQLite

/// View indexes: `view_rows` keyed by the collation sort key, updated from the document sequence.
extension Store {
    /// Brings the index of `def` up to the committed last sequence (rebuilding it when its version
    /// changed), in batches of `Limits.liteIndexBatch` documents per transaction. Returns the view id.
    @discardableResult
    func updateView(_ def: ViewDefinition) throws -> Int64 {
        let (viewID, firstIndexed) = try transaction { () throws -> (Int64, Int64) in
            if let row = try first(
                "SELECT view_id, version, last_seq FROM \(tables.views) WHERE name = ?", [.text(def.name)],
                { s in (s.int64(at: 0), s.text(at: 1), s.int64(at: 2)) })
            {
                if row.1 == def.version { return (row.0, row.2) }
                try run("DELETE FROM \(tables.viewRows) WHERE view_id = ?", [.int(row.0)])
                try run(
                    "UPDATE \(tables.views) SET version = ?, last_seq = 0 WHERE view_id = ?",
                    [.text(def.version), .int(row.0)])
                return (row.0, 0)
            }
            let id = try first(
                "INSERT INTO \(tables.views) (name, version, last_seq) VALUES (?, ?, 0) RETURNING view_id",
                [.text(def.name), .text(def.version)]
            ) { $0.int64(at: 0) }
            return (id ?? 0, 0)
        }
        let target = Int64(lastSeq.rawValue)
        var lastIndexed = firstIndexed
        while lastIndexed < target {
            lastIndexed = try transaction { () throws -> Int64 in
                let batch = try rows(
                    """
                    SELECT d.seq, d.id, d.winner, d.deleted, d.body FROM \(tables.docs) d
                    WHERE d.seq > ? ORDER BY d.seq LIMIT ?
                    """, [.int(lastIndexed), .int(Int64(Limits.liteIndexBatch))]
                ) { s in (s.int64(at: 0), s.text(at: 1), s.text(at: 2), s.int64(at: 3) != 0, s.blob(at: 4)) }
                var reached = batch.last?.0 ?? target
                if batch.count < Limits.liteIndexBatch { reached = target }  // purges leave gaps
                for (_, id, winner, deleted, body) in batch {
                    try run("DELETE FROM \(tables.viewRows) WHERE view_id = ? AND doc = ?", [.int(viewID), .text(id)])
                    guard !deleted, let doc = Store.document(id: id, winner: winner, deleted: false, body: body) else {
                        continue
                    }
                    var emitted: [(JSON, JSON)] = []
                    def.map(doc) { key, value in emitted.append((key ?? .null, value ?? .null)) }
                    for (n, (key, value)) in emitted.enumerated() {
                        try run(
                            "INSERT INTO \(tables.viewRows) (view_id, sk, doc, n, key, value) VALUES (?, ?, ?, ?, ?, ?)",
                            [
                                .int(viewID), .blob(Collation.encode(key)), .text(id), .int(Int64(n)),
                                .blob(key.serialized()), .blob(value.serialized()),
                            ])
                    }
                }
                try run("UPDATE \(tables.views) SET last_seq = ? WHERE view_id = ?", [.int(reached), .int(viewID)])
                return reached
            }
        }
        return viewID
    }

    private struct ScannedRow {
        var sk: [UInt8]
        var doc: String
        var key: JSON
        var value: JSON
    }

    /// Answers a query from the (already updated) index.
    func queryView(viewID: Int64, reduce: Reduce?, options q: QueryOptions) throws -> [QueryRow] {
        let reducing = reduce != nil && q.reduce
        if q.includeDocs && reducing { throw LiteError.badRequest("include_docs is invalid for reduce queries") }
        var scanned: [ScannedRow] = []
        let order = q.descending ? "DESC" : "ASC"
        let decode = { (s: Statement) throws -> ScannedRow in
            ScannedRow(
                sk: s.blob(at: 0), doc: s.text(at: 1),
                key: try JSON.parse(s.blob(at: 2), maxValues: Limits.liteMaxJSONValues),
                value: try JSON.parse(s.blob(at: 3), maxValues: Limits.liteMaxJSONValues))
        }
        if let keys = q.keys {
            for key in keys {
                scanned += try rows(
                    "SELECT sk, doc, key, value FROM \(tables.viewRows) WHERE view_id = ? AND sk = ? ORDER BY doc \(order), n \(order)",
                    [.int(viewID), .blob(Collation.encode(key))], decode)
            }
        } else {
            var sql = "SELECT sk, doc, key, value FROM \(tables.viewRows) WHERE view_id = ?"
            var binds: [SQLValue] = [.int(viewID)]
            let low = q.descending ? q.endKey : q.startKey
            let high = q.descending ? q.startKey : q.endKey
            if let low {
                sql += q.descending && !q.inclusiveEnd ? " AND sk > ?" : " AND sk >= ?"
                binds.append(.blob(Collation.encode(low)))
            }
            if let high {
                sql += !q.descending && !q.inclusiveEnd ? " AND sk < ?" : " AND sk <= ?"
                binds.append(.blob(Collation.encode(high)))
            }
            sql += " ORDER BY sk \(order), doc \(order), n \(order)"
            if !reducing {
                sql += " LIMIT ? OFFSET ?"
                binds.append(.int(Int64(q.limit ?? -1)))
                binds.append(.int(Int64(max(0, q.skip))))
            }
            scanned = try rows(sql, binds, decode)
            if !reducing {
                return try scanned.map { r in
                    QueryRow(
                        key: r.key, value: r.value, documentID: r.doc,
                        document: q.includeDocs ? try document(r.doc) : nil)
                }
            }
        }
        var out: [QueryRow]
        if reducing, let reduce {
            out = Self.group(scanned, options: q, reduce: reduce)
        } else {
            out = try scanned.map { r in
                QueryRow(
                    key: r.key, value: r.value, documentID: r.doc, document: q.includeDocs ? try document(r.doc) : nil)
            }
        }
        out = Array(out.dropFirst(max(0, q.skip)))
        if let limit = q.limit { out = Array(out.prefix(max(0, limit))) }
        return out
    }

    private static func group(_ rows: [ScannedRow], options q: QueryOptions, reduce: Reduce) -> [QueryRow] {
        if !q.group && q.groupLevel == 0 {
            return [QueryRow(key: .null, value: reduce.apply(keys: rows.map(\.key), values: rows.map(\.value)))]
        }
        var out: [QueryRow] = []
        var currentSK: [UInt8]?
        var currentKey: JSON = .null
        var keys: [JSON] = []
        var values: [JSON] = []
        func flush() {
            if currentSK != nil {
                out.append(QueryRow(key: currentKey, value: reduce.apply(keys: keys, values: values)))
            }
        }
        for r in rows {
            var gk = r.key
            if q.groupLevel > 0, case .array(let items) = r.key { gk = .array(Array(items.prefix(q.groupLevel))) }
            let sk = q.groupLevel > 0 ? Collation.encode(gk) : r.sk
            if sk != currentSK {
                flush()
                currentSK = sk
                currentKey = gk
                keys = []
                values = []
            }
            keys.append(r.key)
            values.append(r.value)
        }
        flush()
        return out
    }
}
