import Dispatch
import Foundation
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeSQLite
import Synchronization

/// Options of one Lite database.
public struct DatabaseOptions: Sendable {
    /// Revisions kept behind every leaf before pruning.
    public var revsLimit: Int = Limits.liteRevsLimit
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

    /// Opens (creating if absent) the database `name` in `directory` (created if absent).
    public init(name: String, directory: String, options: DatabaseOptions = DatabaseOptions()) throws(LiteError) {
        guard Self.validName(name) else {
            throw .badRequest("database names are lowercase letters, digits and _$()+-/ starting with a letter")
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

    /// A write transaction on the writer connection; posts `changes` after the commit.
    func write<R>(
        external: Bool = false, _ body: (Store) throws -> (R, [ChangedDocument])
    ) throws(LiteError) -> R {
        try writer.with { store in
            let (r, changed) = try store.transaction { try body(store) }
            // Posted under the writer lock, so subscribers see transactions in commit order, other
            // processes' ones (found by this transaction or the watcher) included.
            try postOtherConnections(store)
            if !changed.isEmpty {
                hub.post(DatabaseChange(documents: changed, lastSequence: store.lastSeq, isExternal: external))
            }
            return r
        }
    }

    /// Reports what other connections committed that this process has not reported yet.
    private func postOtherConnections(_ store: Store) throws {
        let ranges = store.external
        store.external = []
        for range in ranges {
            var after = range.after
            while after < range.through {
                let rows = try store.changedDocuments(
                    after: after, through: range.through, limit: Limits.liteMaxChangesBatch)
                guard let last = rows.last else { break }
                hub.post(DatabaseChange(documents: rows.map(\.1), lastSequence: last.0, isExternal: false))
                after = last.0
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
            }
            t.resume()
            timer = t
        }
    }

    func read<R>(_ body: (Store) throws -> R) throws(LiteError) -> R {
        try reader.with(body)
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

    /// Live (non-deleted) documents.
    public var documentCount: Int {
        (try? read { try $0.first("SELECT count(*) FROM docs WHERE deleted = 0") { Int($0.int64(at: 0)) } ?? 0 })
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
        let limit = options.revsLimit
        return try write { store in
            let (saved, change) = try store.save(document, deleting: false, revsLimit: limit)
            return (saved, [change])
        }
    }

    /// Saves many documents in one transaction (all or nothing). From 256 documents on, a helper thread
    /// validates, serializes and digests the new ones ahead of the writer (ADR 0080).
    public func saveAll(_ documents: [Document]) throws(LiteError) -> [Document] {
        let limit = options.revsLimit
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
        let limit = options.revsLimit
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
        let limit = options.revsLimit
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

    /// Drops bodies of non-leaf revisions and unreferenced attachment bytes, then checkpoints the WAL.
    @discardableResult
    public func compact() throws(LiteError) -> CompactionResult {
        let r = try write { store in (try store.compact(), [ChangedDocument]()) }
        try writer.with { store in
            try store.connection.execute("PRAGMA incremental_vacuum")
            try store.connection.checkpoint(truncate: true)
        }
        return r
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

    // MARK: Replicated revisions

    /// Inserts revisions with their histories (`_bulk_docs` with `new_edits=false`), one transaction;
    /// returns per revision whether it was new. Posts one external change.
    public func insertRevisions(_ revisions: [(body: JSON, attachments: [String: [UInt8]])]) throws(LiteError)
        -> [Bool]
    {
        let limit = options.revsLimit
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
        let stream = hub.subscribe()
        startWatching()
        return stream
    }

    /// Documents changed after `since`, oldest first, each at its latest sequence.
    public func changes(since: SeqNo, limit: Int = Limits.liteMaxChangesBatch) throws(LiteError) -> [ChangeEntry] {
        let n = max(1, min(limit, Limits.liteMaxChangesBatch))
        return try read { try $0.changes(since: since, limit: n) }
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
