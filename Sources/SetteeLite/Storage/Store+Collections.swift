import SetteeCore
import SetteeSQLite

/// The `collections` table (schema version 5, ADR 0150): one row per collection, its tables named from its id.
extension Store {
    /// One `collections` row.
    struct CollectionRow: Sendable, Hashable {
        var tables: CollectionTables
        var scope: String
        var name: String

        static let defaultCollection = CollectionRow(tables: .default, scope: "_default", name: "_default")
    }

    /// Every collection's row, `_default._default` first (it is there even in a file whose row was never written).
    func collectionRows() throws -> [CollectionRow] {
        let rows = try rows("SELECT id, scope, name FROM collections WHERE id != 0 ORDER BY scope, name") { s in
            CollectionRow(tables: CollectionTables(id: s.int64(at: 0)), scope: s.text(at: 1), name: s.text(at: 2))
        }
        return [CollectionRow(tables: .default, scope: "_default", name: "_default")] + rows
    }

    /// The tables of every collection (invariant 6 of `Schema`).
    func collectionTables() throws -> [CollectionTables] {
        try collectionRows().map(\.tables)
    }

    /// The row of `scope.name`, or nil.
    func collectionRow(scope: String, name: String) throws -> CollectionRow? {
        if scope == "_default" && name == "_default" {
            return CollectionRow(tables: .default, scope: scope, name: name)
        }
        return try first("SELECT id FROM collections WHERE scope = ? AND name = ?", [.text(scope), .text(name)]) {
            CollectionRow(tables: CollectionTables(id: $0.int64(at: 0)), scope: scope, name: name)
        }
    }

    /// Creates `scope.name` with its tables (inside a write transaction), or returns the existing one. Ids are
    /// never reused while a table of the old collection could still be named by a cached statement: the new id is
    /// one past the largest ever given (`meta.last_collection_id`).
    func createCollection(scope: String, name: String) throws -> CollectionRow {
        if let row = try collectionRow(scope: scope, name: name) { return row }
        let count = try first("SELECT count(*) FROM collections") { $0.int64(at: 0) } ?? 0
        guard count < Int64(Limits.liteMaxCollections) else {
            throw LiteError.badRequest("a database holds at most \(Limits.liteMaxCollections) collections")
        }
        let used = max(
            try metaInt("last_collection_id") ?? 0,
            try first("SELECT max(id) FROM collections") {
                $0.isNull(at: 0) ? 0 : $0.int64(at: 0)
            } ?? 0)
        let tables = CollectionTables(id: used + 1)
        try run(
            "INSERT INTO collections (id, scope, name) VALUES (?, ?, ?)", [.int(tables.id), .text(scope), .text(name)])
        try setMeta("last_collection_id", .int(tables.id))
        for sql in tables.ddl { try connection.execute(sql) }
        return CollectionRow(tables: tables, scope: scope, name: name)
    }

    /// Drops `scope.name` (inside a write transaction): its row and its tables, so its documents, revisions and
    /// index rows go at once; attachment bytes no other collection names are dropped by the next compaction
    /// (invariant 4). The last sequence is first recorded in `meta` (invariant 6): the dropped `docs` may have
    /// held it. False when absent.
    func dropCollection(scope: String, name: String) throws -> Bool {
        guard let row = try collectionRow(scope: scope, name: name) else { return false }
        guard row.tables.id != 0 else { throw LiteError.badRequest("the default collection cannot be deleted") }
        _ = try nextSeq(withoutRow: true)
        try run("DELETE FROM collections WHERE id = ?", [.int(row.tables.id)])
        try run("DELETE FROM expirations WHERE collection = ?", [.int(row.tables.id)])
        for sql in row.tables.drop { try connection.execute(sql) }
        forgetStatements(of: row.tables)
        return true
    }

    /// Finalizes the cached statements that name `tables` (dropped).
    func forgetStatements(of tables: CollectionTables) {
        let prefix = "c\(tables.id)_"
        dropCachedStatements { $0.contains(" " + prefix) || $0.contains("(" + prefix) }
    }
}
