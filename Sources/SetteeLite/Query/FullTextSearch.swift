import SetteeCore
import SetteeJSON
import SetteeSQLite

/// One full-text match.
public struct SearchHit: Sendable, Equatable {
    public var documentID: String
    /// SQLite FTS5's bm25 rank: lower is better (hits come best first).
    public var rank: Double
    /// The matching text with the matched terms in `[` `]`.
    public var snippet: String
}

extension DatabaseCollection {
    /// Creates (or redefines) the full-text index `name` of this collection over the string properties
    /// `properties` (arrays of strings count; others are ignored). SQLite FTS5 with the `unicode61` tokenizer;
    /// the index is persistent and updated from the document sequence before each search.
    public func createFullTextIndex(_ name: String, properties: [String]) throws(LiteError) {
        guard !properties.isEmpty else { throw .badRequest("a full-text index needs at least one property") }
        try database.withWriter(in: row) { store in try store.defineFullTextIndex(name, properties: properties) }
    }

    /// Documents of this collection matching the FTS5 query `match` (words, `"phrases"`, `AND`/`OR`/`NOT`,
    /// `prefix*`) in index `name`, best first.
    public func search(_ name: String, _ match: String, limit: Int = 100) throws(LiteError) -> [SearchHit] {
        let idx = try database.withWriter(in: row) { store in try store.updateFullTextIndex(name) }
        return try read { store in try store.searchFullText(idx, match, limit: limit) }
    }
}

extension Database {
    /// A full-text index of the default collection (`DatabaseCollection.createFullTextIndex`).
    public func createFullTextIndex(_ name: String, properties: [String]) throws(LiteError) {
        try defaultCollectionHandle.createFullTextIndex(name, properties: properties)
    }

    /// A full-text search of the default collection (`DatabaseCollection.search`).
    public func search(_ name: String, _ match: String, limit: Int = 100) throws(LiteError) -> [SearchHit] {
        try defaultCollectionHandle.search(name, match, limit: limit)
    }
}

/// FTS rows have rowid `doc_id << 8 | idx_id`, so a document's rows are found without a scan, and carry
/// the document id (`doc`, unindexed), so a hit needs no look-up in `docs` (which has no `doc_id` index).
extension Store {
    static let maxFullTextIndexes: Int64 = 255

    func defineFullTextIndex(_ name: String, properties: [String]) throws {
        let props = JSON.array(properties.map { .string($0) }).text
        try transaction {
            if let row = try first(
                "SELECT idx_id, properties FROM \(tables.ftsIndexes) WHERE name = ?", [.text(name)],
                { ($0.int64(at: 0), $0.text(at: 1)) })
            {
                if row.1 == props { return }
                try run("DELETE FROM \(tables.fts) WHERE (rowid & 255) = ?", [.int(row.0)])
                try run(
                    "UPDATE \(tables.ftsIndexes) SET properties = ?, last_seq = 0 WHERE idx_id = ?",
                    [.text(props), .int(row.0)])
                return
            }
            let used = try first("SELECT count(*) FROM \(tables.ftsIndexes)") { $0.int64(at: 0) } ?? 0
            guard used < Self.maxFullTextIndexes else { throw LiteError.badRequest("too many full-text indexes") }
            try run(
                "INSERT INTO \(tables.ftsIndexes) (idx_id, name, properties, last_seq) VALUES ((SELECT coalesce(max(idx_id), 0) + 1 FROM \(tables.ftsIndexes)), ?, ?, 0)",
                [.text(name), .text(props)])
        }
    }

    func updateFullTextIndex(_ name: String) throws -> Int64 {
        guard
            let row = try first(
                "SELECT idx_id, properties, last_seq FROM \(tables.ftsIndexes) WHERE name = ?", [.text(name)],
                { ($0.int64(at: 0), $0.text(at: 1), $0.int64(at: 2)) })
        else { throw LiteError.notFound("full-text index \(name)") }
        let idx = row.0
        let properties =
            (try JSON.parse(row.1, maxValues: Limits.liteMaxJSONValues)).arrayValue?.compactMap(\.stringValue) ?? []
        var lastIndexed = row.2
        let target = Int64(lastSeq.rawValue)
        while lastIndexed < target {
            lastIndexed = try transaction { () throws -> Int64 in
                let batch = try rows(
                    """
                    SELECT d.seq, d.doc_id, d.deleted, d.body, d.id FROM \(tables.docs) d
                    WHERE d.seq > ? ORDER BY d.seq LIMIT ?
                    """, [.int(lastIndexed), .int(Int64(Limits.liteIndexBatch))]
                ) { s in (s.int64(at: 0), s.int64(at: 1), s.int64(at: 2) != 0, s.blob(at: 3), s.text(at: 4)) }
                let reached = batch.count < Limits.liteIndexBatch ? target : (batch.last?.0 ?? target)
                for (_, docID, deleted, body, id) in batch {
                    let rowid = docID << 8 | idx
                    try run("DELETE FROM \(tables.fts) WHERE rowid = ?", [.int(rowid)])
                    guard !deleted, let json = try? JSON.parse(body, maxValues: Limits.liteMaxJSONValues) else {
                        continue
                    }
                    var parts: [String] = []
                    for p in properties {
                        switch json[p] {
                        case .string(let s): parts.append(s)
                        case .array(let items): parts += items.compactMap(\.stringValue)
                        default: break
                        }
                    }
                    if parts.isEmpty { continue }
                    try run(
                        "INSERT INTO \(tables.fts) (rowid, body, doc) VALUES (?, ?, ?)",
                        [.int(rowid), .text(parts.joined(separator: "\n")), .text(id)])
                }
                try run("UPDATE \(tables.ftsIndexes) SET last_seq = ? WHERE idx_id = ?", [.int(reached), .int(idx)])
                return reached
            }
        }
        return idx
    }

    func searchFullText(_ idx: Int64, _ match: String, limit: Int) throws -> [SearchHit] {
        do {
            return try rows(
                """
                SELECT doc, bm25(\(tables.fts)), snippet(\(tables.fts), 0, '[', ']', '...', 12) FROM \(tables.fts)
                WHERE \(tables.fts) MATCH ? AND (rowid & 255) = ? ORDER BY bm25(\(tables.fts)) LIMIT ?
                """, [.text(match), .int(idx), .int(Int64(max(0, limit)))]
            ) { s in SearchHit(documentID: s.text(at: 0), rank: s.double(at: 1), snippet: s.text(at: 2)) }
        } catch let e as SQLiteError where e.message.contains("fts5") || e.message.contains("syntax") {
            throw LiteError.badRequest("full-text query: \(e.message)")
        }
    }
}
