import SetteeCore
import SetteeSQLite

/// The `expirations` table (schema version 6, invariant 7 of `Schema`, ADR 0153).
extension Store {
    /// Sets (or, nil, clears) the expiration of document `id` of the current collection, in milliseconds since 1970.
    /// Inside a write transaction. 404 when the collection has no row for `id` (a tombstone has one).
    func setExpiration(id: String, milliseconds: Int64?) throws {
        let exists = try first("SELECT 1 FROM \(tables.docs) WHERE id = ?", [.text(id)]) { _ in true } ?? false
        guard exists else { throw LiteError.notFound(id) }
        if let milliseconds {
            try run(
                "INSERT OR REPLACE INTO expirations (collection, id, expires) VALUES (?, ?, ?)",
                [.int(tables.id), .text(id), .int(milliseconds)])
        } else {
            try run("DELETE FROM expirations WHERE collection = ? AND id = ?", [.int(tables.id), .text(id)])
        }
    }

    /// The expiration of document `id` of the current collection (ms since 1970), nil when it has none.
    func expiration(id: String) throws -> Int64? {
        try first("SELECT expires FROM expirations WHERE collection = ? AND id = ?", [.int(tables.id), .text(id)]) {
            $0.int64(at: 0)
        }
    }

    /// The earliest expiration of any collection (ms since 1970), nil when no document expires. One index probe.
    func earliestExpiration() throws -> Int64? {
        try first("SELECT min(expires) FROM expirations") { $0.isNull(at: 0) ? nil : $0.int64(at: 0) } ?? nil
    }

    /// The collections (ids) holding a document whose expiration is at or before `now` (ms since 1970).
    func collectionsWithDueExpirations(now: Int64) throws -> [Int64] {
        try rows("SELECT DISTINCT collection FROM expirations WHERE expires <= ?", [.int(now)]) { $0.int64(at: 0) }
    }

    /// Purges (`purge`) at most `limit` documents of the current collection whose expiration is at or before `now`;
    /// their changes, one per document. Inside a write transaction.
    func purgeExpired(now: Int64, limit: Int) throws -> [ChangedDocument] {
        let due = try rows(
            "SELECT id FROM expirations WHERE collection = ? AND expires <= ? ORDER BY expires LIMIT ?",
            [.int(tables.id), .int(now), .int(Int64(limit))]
        ) { $0.text(at: 0) }
        var changes: [ChangedDocument] = []
        for id in due {
            if let change = try purge(id) {
                changes.append(change)
            } else {
                // No document row (invariant 7 says there is one; a file another program wrote may differ).
                try run("DELETE FROM expirations WHERE collection = ? AND id = ?", [.int(tables.id), .text(id)])
            }
        }
        return changes
    }

    /// Documents of the current collection with an expiration.
    func expiringDocumentCount() throws -> Int {
        try first("SELECT count(*) FROM expirations WHERE collection = ?", [.int(tables.id)]) { Int($0.int64(at: 0)) }
            ?? 0
    }
}
