import Dispatch
import Foundation
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeSQLite
import Synchronization

/// Options of one Lite database.
public struct DatabaseOptions: Sendable {
    /// Revisions kept behind every leaf before pruning (Sync Gateway's `revs_limit` rule, `RevTree.prune`): at least
    /// `Limits.gatewayMinRevsLimitWithConflicts` (20), as Sync Gateway requires while conflicts are allowed, which
    /// they always are in Lite (a replicator brings them); `Database.init` refuses less (ADR 0153).
    public var revsLimit: Int = Limits.liteRevsLimit
    /// The time document expirations are compared with and the timer that purges them is armed on (ADR 0153).
    public var clock: any TimerClock = SystemTimerClock()
    public init() {}
}

/// An embedded Settee Lite database: one SQLite file (WAL) holding documents with revision trees,
/// attachments stored once by digest, `_local` documents and the view and full-text indexes.
///
/// Concurrency (docs/adr/0014): `Sendable` and usable from any number of tasks. All writes run on
/// one writer connection behind a lock, one transaction per call, so they are serialised; reads use a
/// second connection, so a long read never waits for a write (WAL). The synchronous methods block
/// the calling thread for one SQLite transaction: call them from app code or a worker thread, never
/// from a NIO event loop; the `async` ones (and `LocalEndpoint`) run the work on the database's own
/// dispatch queue.
public final class Database: Sendable {
    public let name: String
    public let directory: String
    /// The SQLite file.
    public let path: String
    public let options: DatabaseOptions
    let writer: Guarded<Store>
    let reader: Guarded<Store>
    let hub = ChangeHub()
    let registry = ViewRegistry()
    /// Polls for commits of other processes while anyone follows `changes` (started by the first subscriber).
    private let watcher = Mutex<(any DispatchSourceTimer)?>(nil)
    /// Runs `async` callers' work off the cooperative pool.
    let queue: DispatchQueue
    /// Ids of the collections `deleteCollection` dropped: their handles' calls throw `notFound`.
    let deletedCollections = Mutex<Set<Int64>>([])
    /// The expiry timer's schedule and armed timer (`Database+Expiration.swift`); held while the purge runs.
    let expiry = Mutex<ExpiryState>(ExpiryState())
    /// `_default._default`, which every database has and the `Database` document methods use.
    var defaultCollectionHandle: DatabaseCollection { DatabaseCollection(database: self, row: .defaultCollection) }

    /// Opens (creating if absent) the database `name` in `directory` (created if absent).
    public init(name: String, directory: String, options: DatabaseOptions = DatabaseOptions()) throws(LiteError) {
        guard Self.validName(name) else {
            throw .badRequest("database names are lowercase letters, digits and _$()+-/ starting with a letter")
        }
        guard options.revsLimit >= Limits.gatewayMinRevsLimitWithConflicts else {
            throw .badRequest(
                "revsLimit (\(options.revsLimit)) cannot be lower than \(Limits.gatewayMinRevsLimitWithConflicts): "
                    + "conflicts always replicate into a Lite database")
        }
        self.name = name
        self.directory = directory
        self.options = options
        self.path = Self.path(name: name, directory: directory)
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let w = try Store(path: path, readOnly: false)
            writer = Guarded(w)
            reader = Guarded(try Store(path: path, readOnly: true))
        } catch {
            throw LiteError.wrap(error)
        }
        queue = DispatchQueue(label: "settee.lite.\(name)")
        // Documents that expired while the file was closed go now; the next expiration arms the timer.
        rescheduleExpiry()
    }

    static func path(name: String, directory: String) -> String {
        (directory as NSString).appendingPathComponent(name.replacingOccurrences(of: "/", with: ":") + ".sqlite3")
    }

    /// CouchDB's database-name rule (so a Lite database can be named like the gateway one it mirrors).
    static func validName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, ("a"..."z").contains(first) else { return false }
        return name.unicodeScalars.allSatisfy { c in
            ("a"..."z").contains(c) || ("0"..."9").contains(c) || "_$()+-/".unicodeScalars.contains(c)
        }
    }

    deinit {
        watcher.withLock { $0?.cancel() }
        expiry.withLock { $0.close() }
        hub.finishAll()
    }

    /// Makes every transaction committed so far durable: fsyncs the database file, its WAL and their directory.
    /// Commits run with `synchronous=NORMAL` (docs/adr/0014), which keeps the file consistent after a power loss but
    /// may lose the last ones; a replicator must not checkpoint past writes that can still be lost, so
    /// `_ensure_full_commit` (`LocalEndpoint.ensureFullCommit`) calls this first. Blocking: one fsync per file.
    public func makeDurable() throws(LiteError) {
        let files = [path, path + "-wal", directory]
        try writer.with { _ in
            for file in files {
                let fd = open(file, O_RDONLY)
                if fd < 0 {
                    if errno == ENOENT { continue }  // no WAL yet: nothing was written to one
                    throw LiteError.storage("cannot open \(file) to sync it (errno \(errno))")
                }
                defer { _ = Glibc.close(fd) }
                guard fsync(fd) == 0 else { throw LiteError.storage("fsync of \(file) failed (errno \(errno))") }
            }
        }
    }

    /// Closes both connections; later calls throw `LiteError.closed` and change streams finish.
    public func close() {
        watcher.withLock {
            $0?.cancel()
            $0 = nil
        }
        expiry.withLock { $0.close() }
        writer.close()
        reader.close()
        hub.finishAll()
    }

    /// Closes the database and removes its files.
    public func delete() throws(LiteError) {
        close()
        try Self.delete(name: name, directory: directory)
    }

    /// Removes the files of a (closed) database.
    public static func delete(name: String, directory: String) throws(LiteError) {
        let p = path(name: name, directory: directory)
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: p + suffix) {
            do { try FileManager.default.removeItem(atPath: p + suffix) } catch {
                throw .storage("cannot remove \(p + suffix): \(error)")
            }
        }
    }

    // MARK: Running work

    /// A write transaction on the writer connection in `collection`'s tables; posts `changes` after the commit.
    func write<R>(
        in collection: Store.CollectionRow = .defaultCollection, external: Bool = false,
        _ body: (Store) throws -> (R, [ChangedDocument])
    ) throws(LiteError) -> R {
        try checkLive(collection)
        return try writer.with { store in
            store.tables = collection.tables
            defer { store.tables = .default }
            let (r, changed) = try store.transaction { try body(store) }
            // Posted under the writer lock, so subscribers see transactions in commit order, other
            // processes' ones (found by this transaction or the watcher) included.
            try postOtherConnections(store)
            if !changed.isEmpty {
                hub.post(
                    DatabaseChange(
                        documents: changed, lastSequence: store.lastSeq, isExternal: external,
                        scope: collection.scope, collection: collection.name, collectionID: collection.tables.id))
            }
            return r
        }
    }

    /// The writer connection in `collection`'s tables, outside a transaction (index updates open their own).
    func withWriter<R>(in collection: Store.CollectionRow, _ body: (Store) throws -> R) throws(LiteError) -> R {
        try checkLive(collection)
        return try writer.with { store in
            store.tables = collection.tables
            defer { store.tables = .default }
            return try body(store)
        }
    }

    /// Throws `notFound` for a collection this database deleted (its handles outlive it).
    private func checkLive(_ collection: Store.CollectionRow) throws(LiteError) {
        let id = collection.tables.id
        if id != 0, deletedCollections.withLock({ $0.contains(id) }) {
            throw .notFound("collection \(collection.scope).\(collection.name)")
        }
    }

    /// Reports what other connections committed that this process has not reported yet, per collection.
    private func postOtherConnections(_ store: Store) throws {
        let ranges = store.external
        store.external = []
        guard !ranges.isEmpty else { return }
        let current = store.tables
        defer { store.tables = current }
        for collection in try store.collectionRows() {
            store.tables = collection.tables
            for range in ranges {
                var after = range.after
                while after < range.through {
                    let rows = try store.changedDocuments(
                        after: after, through: range.through, limit: Limits.liteMaxChangesBatch)
                    guard let last = rows.last else { break }
                    hub.post(
                        DatabaseChange(
                            documents: rows.map(\.1), lastSequence: last.0, isExternal: false,
                            scope: collection.scope, collection: collection.name,
                            collectionID: collection.tables.id))
                    after = last.0
                }
            }
        }
    }

    /// Starts polling for other processes' commits (once): every `Limits.liteExternalChangePollMilliseconds`,
    /// when the reader's `data_version` moved, the writer catches up and posts what it finds.
    private func startWatching() {
        watcher.withLock { timer in
            guard timer == nil else { return }
            let t = DispatchSource.makeTimerSource(queue: queue)
            let interval = DispatchTimeInterval.milliseconds(Limits.liteExternalChangePollMilliseconds)
            t.schedule(deadline: .now() + interval, repeating: interval)
            let version = Mutex<Int64?>(nil)
            t.setEventHandler { [weak self] in
                guard let self else { return }
                guard let v = try? self.read({ try $0.dataVersion() }),
                    version.withLock({ old in
                        defer { old = v }
                        return old != v
                    })
                else { return }
                _ = try? self.writer.with { store in
                    if let range = try store.catchUpWithOtherConnections() { store.external.append(range) }
                    try self.postOtherConnections(store)
                }
                // Another process may have set an expiration earlier than the armed timer's.
                self.rescheduleExpiry()
            }
            t.resume()
            timer = t
        }
    }

    func read<R>(
        in collection: Store.CollectionRow = .defaultCollection, _ body: (Store) throws -> R
    ) throws(LiteError) -> R {
        try checkLive(collection)
        return try reader.with { store in
            store.tables = collection.tables
            defer { store.tables = .default }
            return try body(store)
        }
    }

    /// A new stream of the committed changes of the collection `id` (nil: every collection).
    func subscribe(collection id: Int64?) -> AsyncStream<DatabaseChange> {
        let stream = hub.subscribe(collection: id)
        startWatching()
        return stream
    }

    /// Runs `body` on the database's queue and resumes the caller with its result.
    public func perform<R: Sendable>(_ body: @escaping @Sendable (Database) throws(LiteError) -> R)
        async throws(LiteError)
        -> R
    {
        let result: Result<R, LiteError> = await withCheckedContinuation { c in
            queue.async {
                do throws(LiteError) { c.resume(returning: .success(try body(self))) } catch {
                    c.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }

    // MARK: Information

    /// The database's UUID, made at creation (part of replication checkpoint ids).
    public var uuid: String {
        (try? writer.with { $0.uuid }) ?? ""
    }

    /// The sequence of the last committed change.
    public var lastSequence: SeqNo {
        (try? read { try $0.committedLastSeq() }) ?? .zero
    }

    // MARK: Documents (of the default collection: `DatabaseCollection`)

    /// Live (non-deleted) documents of the default collection.
    public var documentCount: Int { defaultCollectionHandle.documentCount }

    /// Saves `document` in the default collection (`DatabaseCollection.save`); returns the document id.
    @discardableResult
    public func save(_ document: Document) throws(LiteError) -> String {
        try defaultCollectionHandle.save(document)
    }

    /// Saves `document` in the default collection (`DatabaseCollection.put`); returns it as saved.
    public func put(_ document: Document) throws(LiteError) -> Document {
        try defaultCollectionHandle.put(document)
    }

    /// Saves many documents in the default collection in one transaction (`DatabaseCollection.saveAll`).
    public func saveAll(_ documents: [Document]) throws(LiteError) -> [Document] {
        try defaultCollectionHandle.saveAll(documents)
    }

    /// The winning revision of `id` in the default collection, or nil when absent or deleted.
    public func document(_ id: String) throws(LiteError) -> Document? {
        try defaultCollectionHandle.document(id)
    }

    /// A specific revision in the default collection (deleted ones included), or nil when unknown or compacted.
    public func document(_ id: String, revision: RevID) throws(LiteError) -> Document? {
        try defaultCollectionHandle.document(id, revision: revision)
    }

    /// Deletes `id` from the default collection (`DatabaseCollection.delete`); returns the tombstone's revision.
    @discardableResult
    public func delete(_ id: String, revision: RevID? = nil) throws(LiteError) -> RevID {
        try defaultCollectionHandle.delete(id, revision: revision)
    }

    /// The revision tree of `id` in the default collection (without bodies), or nil when absent.
    public func revisionTree(of id: String) throws(LiteError) -> RevTree? {
        try defaultCollectionHandle.revisionTree(of: id)
    }

    /// Every live leaf revision of `id` in the default collection, the winner first.
    public func conflicts(of id: String) throws(LiteError) -> [Document] {
        try defaultCollectionHandle.conflicts(of: id)
    }

    /// Resolves a conflict in the default collection (`DatabaseCollection.resolve`).
    public func resolve(_ merged: Document) throws(LiteError) -> Document {
        try defaultCollectionHandle.resolve(merged)
    }

    /// Removes `id` and its history from the default collection (`DatabaseCollection.purge`).
    @discardableResult
    public func purge(_ id: String) throws(LiteError) -> Bool {
        try defaultCollectionHandle.purge(id)
    }

    /// Inserts replicated revisions into the default collection (`DatabaseCollection.insertRevisions`).
    public func insertRevisions(_ revisions: [(body: JSON, attachments: [String: [UInt8]])]) throws(LiteError)
        -> [Bool]
    {
        try defaultCollectionHandle.insertRevisions(revisions)
    }

    /// The default collection's committed changes from now on (`DatabaseCollection.changes`).
    public var changes: AsyncStream<DatabaseChange> { defaultCollectionHandle.changes }

    /// Documents of the default collection changed after `since`, oldest first (`DatabaseCollection.changes(since:)`).
    public func changes(since: SeqNo, limit: Int = Limits.liteMaxChangesBatch) throws(LiteError) -> [ChangeEntry] {
        try defaultCollectionHandle.changes(since: since, limit: limit)
    }

    /// Prunes every revision tree to `options.revsLimit`, drops bodies of non-leaf revisions and attachment bytes no
    /// kept revision names (one transaction), then returns the free pages to the file system and truncates the WAL
    /// (Couchbase Lite's `performMaintenance(.compact)`). A file made before incremental vacuum was on (it can only be
    /// turned on for a new file or by a `VACUUM`) is rewritten once by `VACUUM`, which holds the writer for a copy of
    /// the file; later compactions only release free pages. Returns what went and the page counts (ADR 0153).
    @discardableResult
    public func compact() throws(LiteError) -> CompactionResult {
        let limit = options.revsLimit
        let before = try writer.with { store in try Self.pages(store) }
        var r = try write { store in (try store.compact(revsLimit: limit), [ChangedDocument]()) }
        let after = try writer.with { store in
            let c = store.connection
            if try c.queryInt64("PRAGMA auto_vacuum") != 2 {
                try c.execute("PRAGMA auto_vacuum=INCREMENTAL")
                try c.execute("VACUUM")
            } else {
                try c.execute("PRAGMA incremental_vacuum")
            }
            try c.checkpoint(.truncate)
            return try Self.pages(store)
        }
        (r.pageCountBefore, r.freePagesBefore, r.pageSize) = before
        (r.pageCountAfter, r.freePagesAfter, _) = after
        return r
    }

    /// `PRAGMA page_count`, `freelist_count` and `page_size`.
    private static func pages(_ store: Store) throws -> (Int, Int, Int) {
        let c = store.connection
        return (
            Int(try c.queryInt64("PRAGMA page_count") ?? 0), Int(try c.queryInt64("PRAGMA freelist_count") ?? 0),
            Int(try c.queryInt64("PRAGMA page_size") ?? 0)
        )
    }

    /// The bytes of an attachment.
    public func content(of blob: Blob) throws(LiteError) -> [UInt8] {
        if let d = blob.pendingData { return d }
        guard let data = try read({ try $0.attachmentData(blob.digest) }) else {
            throw .notFound("attachment \(blob.digest)")
        }
        return data
    }

    /// Attachment bytes by digest, nil when not stored.
    public func attachmentData(digest: String) throws(LiteError) -> [UInt8]? {
        try read { try $0.attachmentData(digest) }
    }

    // MARK: Local documents

    /// A `_local` document (never replicated; `id` without the `_local/` prefix), with `_id`/`_rev`.
    public func localDocument(_ id: String) throws(LiteError) -> JSON? {
        try read { try $0.localDocument(Self.localID(id)) }
    }

    /// Stores a `_local` document; returns its new revision (`0-N`).
    @discardableResult
    public func putLocalDocument(_ id: String, _ body: JSON) throws(LiteError) -> String {
        try write { store in (try store.putLocal(Self.localID(id), body), []) }
    }

    /// Deletes a `_local` document; false when absent.
    @discardableResult
    public func deleteLocalDocument(_ id: String) throws(LiteError) -> Bool {
        try write { store in (try store.deleteLocal(Self.localID(id)), []) }
    }

    static func localID(_ id: String) -> String {
        id.hasPrefix("_local/") ? String(id.dropFirst(7)) : id
    }
}
