import Foundation
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeSQLite

/// One collection of a Lite database (Couchbase Lite 3.1's `Collection`, docs/adr/0150): documents with their
/// revision trees, views, full-text indexes and a changes feed of its own, named `scope.name`. Every database has
/// `_default._default` (`Database.defaultCollection()`), which the `Database` document methods use; others are
/// made with `Database.createCollection(_:scope:)`. Sequences are the database's, shared by its collections, so one
/// collection's sequences have gaps where another's changes took theirs.
///
/// A value: cheap to copy, safe to use from any task (it names its tables; the work runs on the database's
/// connections as `Database` describes). After `Database.deleteCollection` its calls throw `notFound`.
/// Named `DatabaseCollection` rather than Couchbase Lite's `Collection`, which would hide Swift's protocol.
public struct DatabaseCollection: Sendable, Hashable {
    public let database: Database
    let row: Store.CollectionRow

    /// The scope's name (`_default` for the default scope).
    public var scope: String { row.scope }
    /// The collection's name within its scope.
    public var name: String { row.name }
    /// `scope.name`, as keyspaces and `FROM` clauses name a collection.
    public var fullName: String { "\(row.scope).\(row.name)" }
    /// True for `_default._default`.
    public var isDefault: Bool { row.tables.id == 0 }

    init(database: Database, row: Store.CollectionRow) {
        self.database = database
        self.row = row
    }

    public static func == (a: DatabaseCollection, b: DatabaseCollection) -> Bool {
        a.database === b.database && a.row == b.row
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(ObjectIdentifier(database))
        hasher.combine(row.tables.id)
    }

    func write<R>(external: Bool = false, _ body: (Store) throws -> (R, [ChangedDocument])) throws(LiteError) -> R {
        try database.write(in: row, external: external, body)
    }

    func read<R>(_ body: (Store) throws -> R) throws(LiteError) -> R {
        try database.read(in: row, body)
    }

    /// Live (non-deleted) documents.
    public var documentCount: Int {
        (try? read { store in
            try store.first("SELECT count(*) FROM \(store.tables.docs) WHERE deleted = 0") { Int($0.int64(at: 0)) } ?? 0
        })
            ?? 0
    }

    // MARK: Documents

    /// Saves `document` as a new revision (a child of `document.revision`, or a new document when
    /// that is nil) in its own transaction; returns the document id. 409 `conflict` when the revision
    /// is not a current leaf or a new document's id is taken.
    @discardableResult
    public func save(_ document: Document) throws(LiteError) -> String {
        try put(document).id!
    }

    /// Like `save`, returning the saved document (id and new revision set, blobs stored).
    public func put(_ document: Document) throws(LiteError) -> Document {
        let limit = database.options.revsLimit
        return try write { store in
            let (saved, change) = try store.save(document, deleting: false, revsLimit: limit)
            return (saved, [change])
        }
    }

    /// Saves many documents in one transaction (all or nothing). From 256 documents on, a helper thread
    /// validates, serializes and digests the new ones ahead of the writer (ADR 0080).
    public func saveAll(_ documents: [Document]) throws(LiteError) -> [Document] {
        let limit = database.options.revsLimit
        // New documents' rows are computed on a second thread while this one inserts (ADR 0080).
        let pipeline = SavePipeline.start(documents)
        defer { pipeline?.stop() }
        return try write { store in
            var saved: [Document] = []
            var changes: [ChangedDocument] = []
            saved.reserveCapacity(documents.count)
            changes.reserveCapacity(documents.count)
            for (i, d) in documents.enumerated() {
                let (s, c) =
                    try pipeline?.row(i).flatMap { try store.insertIfNew(d, row: $0) }
                    ?? store.save(d, deleting: false, revsLimit: limit)
                saved.append(s)
                changes.append(c)
            }
            return (saved, changes)
        }
    }

    /// The winning revision of `id`, or nil when absent or deleted.
    public func document(_ id: String) throws(LiteError) -> Document? {
        let d = try read { try $0.document(id) }
        return d?.isDeleted == true ? nil : d
    }

    /// A specific revision (deleted ones included), or nil when unknown or compacted.
    public func document(_ id: String, revision: RevID) throws(LiteError) -> Document? {
        try read { try $0.document(id, rev: revision) }
    }

    /// Deletes `id` by adding a tombstone child of `revision` (default: the winner); returns it.
    @discardableResult
    public func delete(_ id: String, revision: RevID? = nil) throws(LiteError) -> RevID {
        let limit = database.options.revsLimit
        return try write { store in
            var doc = Document(id: id)
            let current = try store.loadDoc(id)?.tree.winner
            doc.revision = revision ?? current
            let (saved, change) = try store.save(doc, deleting: true, revsLimit: limit)
            return (saved.revision!, [change])
        }
    }

    /// The revision tree of `id` (without bodies), or nil when absent.
    public func revisionTree(of id: String) throws(LiteError) -> RevTree? {
        try read { try $0.loadDoc(id)?.tree }
    }

    /// Every live leaf revision of `id`, the winner first: more than one means a conflict.
    public func conflicts(of id: String) throws(LiteError) -> [Document] {
        try read { store in
            guard let stored = try store.loadDoc(id), let winner = stored.tree.winner else { return [] }
            var revs = stored.tree.winnerIsDeleted ? [] : [winner]
            revs += stored.tree.conflicts.sorted(by: >)
            return try revs.compactMap { try store.document(id, rev: $0) }
        }
    }

    /// Resolves a conflict: saves `merged` as a child of `merged.revision` (one of the leaves) and
    /// deletes every other live leaf, in one transaction. Returns the saved merge.
    public func resolve(_ merged: Document) throws(LiteError) -> Document {
        guard let id = merged.id, let base = merged.revision else {
            throw .badRequest("resolve needs the id and the leaf revision the merge is based on")
        }
        let limit = database.options.revsLimit
        return try write { store in
            guard let stored = try store.loadDoc(id) else { throw LiteError.notFound(id) }
            var changes: [ChangedDocument] = []
            for leaf in stored.tree.leaves where leaf != base && !stored.tree.isDeleted(leaf) {
                var tomb = Document(id: id)
                tomb.revision = leaf
                changes.append(try store.save(tomb, deleting: true, revsLimit: limit).1)
            }
            let (saved, change) = try store.save(merged, deleting: false, revsLimit: limit)
            changes.append(change)
            return (saved, changes)
        }
    }

    /// Removes `id` and all its history as if it never existed (not replicated). False when absent.
    @discardableResult
    public func purge(_ id: String) throws(LiteError) -> Bool {
        try write { store in
            guard let change = try store.purge(id) else { return (false, []) }
            return (true, [change])
        }
    }

    // MARK: Replicated revisions

    /// Inserts revisions with their histories (`_bulk_docs` with `new_edits=false`), one transaction;
    /// returns per revision whether it was new. Posts one external change.
    public func insertRevisions(_ revisions: [(body: JSON, attachments: [String: [UInt8]])]) throws(LiteError)
        -> [Bool]
    {
        let limit = database.options.revsLimit
        return try write(external: true) { store in
            var added: [Bool] = []
            var changes: [ChangedDocument] = []
            for r in revisions {
                let c = try store.insertReplicated(body: r.body, attachmentData: r.attachments, revsLimit: limit)
                added.append(c != nil)
                if let c { changes.append(c) }
            }
            return (added, changes)
        }
    }

    // MARK: Changes

    /// A new stream of committed changes from now on (each transaction once, in commit order).
    /// Ends when the database closes or the iterating task is cancelled.
    /// Commits of other connections to the same file (another process) are reported too, within
    /// `Limits.liteExternalChangePollMilliseconds`, as changes with `isExternal == false`.
    public var changes: AsyncStream<DatabaseChange> {
        database.subscribe(collection: row.tables.id)
    }

    /// Documents changed after `since`, oldest first, each at its latest sequence.
    public func changes(since: SeqNo, limit: Int = Limits.liteMaxChangesBatch) throws(LiteError) -> [ChangeEntry] {
        let n = max(1, min(limit, Limits.liteMaxChangesBatch))
        return try read { try $0.changes(since: since, limit: n) }
    }
}
