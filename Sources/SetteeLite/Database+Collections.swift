import SetteeCore
import Synchronization

/// Scopes and collections of a Lite database, as Couchbase Lite 3.1's `Database` names them (docs/adr/0150).
extension Database {
    /// The default scope's name.
    public static let defaultScope = "_default"
    /// The default collection's name.
    public static let defaultCollectionName = "_default"

    /// Couchbase's name rule for scopes and collections (Couchbase Lite 3.1 and Server 7): 1...251 bytes of
    /// `A-Z a-z 0-9 _ - %`, not starting with `_` or `%`; `_default` is the one reserved name allowed.
    public static func validCollectionName(_ name: String) -> Bool {
        if name == "_default" { return true }
        guard let first = name.unicodeScalars.first, first != "_", first != "%",
            name.utf8.count <= Limits.liteMaxCollectionNameBytes
        else { return false }
        return name.unicodeScalars.allSatisfy { c in
            ("a"..."z").contains(c) || ("A"..."Z").contains(c) || ("0"..."9").contains(c)
                || "_-%".unicodeScalars.contains(c)
        }
    }

    private static func validate(_ name: String, scope: String) throws(LiteError) {
        guard validCollectionName(scope), validCollectionName(name) else {
            throw .badRequest(
                "scope and collection names are 1...\(Limits.liteMaxCollectionNameBytes) of A-Z a-z 0-9 _ - %, "
                    + "not starting with _ or % (except _default): \(scope).\(name)")
        }
        if name == "_default" && scope != "_default" {
            throw .badRequest("only the default scope has a _default collection")
        }
    }

    /// `_default._default`: the collection the `Database` document methods read and write.
    public func defaultCollection() -> DatabaseCollection { defaultCollectionHandle }

    /// Creates `scope.name` (the scope exists while it has a collection), or returns it when it exists. 400 for a
    /// name outside the rule or past `Limits.liteMaxCollections`.
    @discardableResult
    public func createCollection(_ name: String, scope: String = Database.defaultScope) throws(LiteError)
        -> DatabaseCollection
    {
        try Self.validate(name, scope: scope)
        let row = try write { store in (try store.createCollection(scope: scope, name: name), []) }
        return DatabaseCollection(database: self, row: row)
    }

    /// The collection `scope.name`, or nil when there is none.
    public func collection(_ name: String, scope: String = Database.defaultScope) throws(LiteError)
        -> DatabaseCollection?
    {
        guard Self.validCollectionName(scope), Self.validCollectionName(name) else { return nil }
        return try read { store in try store.collectionRow(scope: scope, name: name) }
            .map { DatabaseCollection(database: self, row: $0) }
    }

    /// The collections of `scope`, by name (the default scope's list starts with `_default`).
    public func collections(scope: String = Database.defaultScope) throws(LiteError) -> [DatabaseCollection] {
        try read { store in try store.collectionRows() }.filter { $0.scope == scope }
            .map { DatabaseCollection(database: self, row: $0) }
    }

    /// The names of the scopes that have a collection, `_default` first.
    public func scopes() throws(LiteError) -> [String] {
        var seen: [String] = []
        for row in try read({ store in try store.collectionRows() }) where !seen.contains(row.scope) {
            seen.append(row.scope)
        }
        return seen
    }

    /// Deletes `scope.name` with its documents, revisions, views and full-text indexes (its tables are dropped);
    /// attachment bytes no other collection names go at the next `compact()`. Handles of it throw `notFound`
    /// afterwards. False when absent; 400 for the default collection, which cannot be deleted.
    @discardableResult
    public func deleteCollection(_ name: String, scope: String = Database.defaultScope) throws(LiteError) -> Bool {
        guard Self.validCollectionName(scope), Self.validCollectionName(name) else { return false }
        guard let row = try read({ store in try store.collectionRow(scope: scope, name: name) }) else { return false }
        let dropped = try write { store in (try store.dropCollection(scope: scope, name: name), []) }
        if dropped {
            deletedCollections.withLock { _ = $0.insert(row.tables.id) }
            try reader.with { store in store.forgetStatements(of: row.tables) }
        }
        return dropped
    }
}
