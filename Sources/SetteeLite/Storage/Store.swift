import Foundation
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeSQLite

/// A value bound to a statement parameter.
enum SQLValue {
    case int(Int64)
    case text(String)
    case blob([UInt8])
    case null
}

/// One connection to a Lite database file with its prepared statements. Not thread-safe: `Database`
/// keeps one writer `Store` and one reader `Store`, each inside a `Guarded` lock. Only the writer
/// keeps `lastSeq` in memory (invariant: equals the committed last sequence, `max(meta.last_seq, max(docs.seq))`,
/// outside a transaction).
final class Store {
    let connection: Connection
    private var cache: [String: Statement] = [:]
    /// The collection the statements of the current call read and write (`Database` sets it for each call under
    /// the connection's lock and puts `_default._default` back after it).
    var tables: CollectionTables = .default
    /// The statements of every save, prepared once and found by index (`cache` hashes the whole SQL text).
    private var hot: [Statement?] = Array(repeating: nil, count: Hot.allCases.count)
    /// `PRAGMA data_version` as the last write transaction read it after catching up with other
    /// connections: while it stays the same nobody else committed, and a transaction skips the catch-up.
    private var caughtUpAtDataVersion: Int64?
    let readOnly: Bool
    /// The writer's view of the last assigned sequence.
    var lastSeq: SeqNo = .zero
    /// The last sequence as committed.
    private var persistedSeq: SeqNo = .zero
    /// The open transaction took a sequence that no `docs` row keeps (a purge): `meta.last_seq` must
    /// record it at the commit, or a later open would hand it out again.
    private var seqWithoutRow = false
    /// The database's UUID (replication checkpoint ids and `info()`), made at creation.
    var uuid: String = ""
    /// Sequence ranges (after, through] committed by other connections that transactions found and nobody
    /// has reported yet; `Database` reports them as changes and empties this.
    var external: [(after: SeqNo, through: SeqNo)] = []

    init(path: String, readOnly: Bool) throws {
        var options = Connection.Options()
        options.readOnly = readOnly
        options.create = !readOnly
        // An app database: NORMAL in WAL mode keeps the database consistent after a power loss but
        // may lose the last commits; Lite's replicator re-fetches them. Commits that must be durable
        // (checkpoints) are rare; see docs/adr/0014.
        options.synchronous = .normal
        options.pageSize = 4096
        options.cacheSizeKiB = 4 * 1024
        options.walAutoCheckpointPages = 1000
        self.connection = try Connection(path: path, options: options)
        self.readOnly = readOnly
        if !readOnly {
            try connection.execute("PRAGMA foreign_keys=OFF")
            // Only takes effect on a new file (before the first table): lets compaction return pages.
            try connection.execute("PRAGMA auto_vacuum=INCREMENTAL")
            try connection.execute(Schema.ddl)
            try transaction {
                guard var version = try metaInt("schema_version") else {
                    try setMeta("schema_version", .int(Schema.version))
                    try setMeta("last_seq", .int(0))
                    try setMeta("uuid", .text(UUID().uuidString.lowercased()))
                    try connection.execute(Schema.defaultCollectionRow)
                    return
                }
                // An older file is upgraded in this one transaction: all steps or none.
                while version < Schema.version, let steps = Schema.migration(from: version) {
                    for sql in steps { try connection.execute(sql) }
                    version += 1
                    try setMeta("schema_version", .int(version))
                }
            }
            guard let v = try metaInt("schema_version"), v == Schema.version else {
                throw LiteError.storage("\(path): unknown schema version")
            }
        }
        lastSeq = try committedLastSeq()
        persistedSeq = lastSeq
        uuid = try metaText("uuid") ?? ""
    }

    func close() {
        cache = [:]
        hot = Array(repeating: nil, count: Hot.allCases.count)
        connection.close()
    }

    // MARK: Statements

    func statement(_ sql: String) throws -> Statement {
        if let s = cache[sql] { return s }
        let s = try connection.prepare(sql)
        cache[sql] = s
        return s
    }

    /// Drops the cached statements whose SQL `matches` (their tables were dropped).
    func dropCachedStatements(where matches: (String) -> Bool) {
        cache = cache.filter { !matches($0.key) }
    }

    /// Statements on the path of every save (and of every write transaction).
    enum Hot: Int, CaseIterable {
        case begin, commit, dataVersion, loadDoc, insertDocIfAbsent, updateDoc

        func sql(_ t: CollectionTables) -> String {
            switch self {
            case .begin: "BEGIN IMMEDIATE"
            case .commit: "COMMIT"
            case .dataVersion: "PRAGMA data_version"
            case .loadDoc: "SELECT doc_id, seq, type, tree, body, winner, deleted FROM \(t.docs) WHERE id = ?"
            case .insertDocIfAbsent:
                "INSERT INTO \(t.docs) (seq, id, doc_id, winner, deleted, type, tree, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                    + "ON CONFLICT (id) DO NOTHING"
            case .updateDoc:
                "UPDATE \(t.docs) SET seq = ?, winner = ?, deleted = ?, type = ?, tree = ?, body = ? WHERE id = ?"
            }
        }
    }

    func statement(_ h: Hot) throws -> Statement {
        // Another collection's statements are found by their text (a collection is a set of tables).
        if tables.id != 0 { return try statement(h.sql(tables)) }
        if let s = hot[h.rawValue] { return s }
        let s = try connection.prepare(h.sql(tables))
        hot[h.rawValue] = s
        return s
    }

    /// Steps a statement without rows (BEGIN, COMMIT) to its end and resets it.
    private func runToEnd(_ h: Hot) throws {
        let s = try statement(h)
        defer { s.reset() }
        while try s.step() {}
    }

    private func bind(_ s: Statement, _ values: [SQLValue]) throws {
        for (i, v) in values.enumerated() {
            let at = Int32(i + 1)
            switch v {
            case .int(let n): try s.bind(n, at: at)
            case .text(let t): try s.bindText(t, at: at)
            case .blob(let b): try s.bindBlob(b, at: at)
            case .null: try s.bindNull(at: at)
            }
        }
    }

    /// Runs a statement that returns no rows.
    func run(_ sql: String, _ values: [SQLValue] = []) throws {
        let s = try statement(sql)
        defer { s.reset() }
        try bind(s, values)
        while try s.step() {}
    }

    /// Runs a query, mapping each row; the statement is reset afterwards (ending its read).
    func rows<T>(_ sql: String, _ values: [SQLValue] = [], _ row: (Statement) throws -> T) throws -> [T] {
        let s = try statement(sql)
        defer { s.reset() }
        try bind(s, values)
        var out: [T] = []
        while try s.step() { out.append(try row(s)) }
        return out
    }

    /// Iterates a query's rows until `row` returns false.
    func each(_ sql: String, _ values: [SQLValue] = [], _ row: (Statement) throws -> Bool) throws {
        let s = try statement(sql)
        defer { s.reset() }
        try bind(s, values)
        while try s.step() {
            if try !row(s) { break }
        }
    }

    func first<T>(_ sql: String, _ values: [SQLValue] = [], _ row: (Statement) throws -> T) throws -> T? {
        let s = try statement(sql)
        defer { s.reset() }
        try bind(s, values)
        return try s.step() ? try row(s) : nil
    }

    /// `BEGIN IMMEDIATE` ... `COMMIT`; `meta.last_seq` is written just before the commit when a sequence was
    /// taken without a document row (a purge; other sequences are kept by their `docs.seq`). On any
    /// error `ROLLBACK` and forget the sequences the transaction took. The last sequence is read again
    /// under the write lock: another process may have committed since (two apps, or an app and
    /// `settee-lite`, on one file), and reusing its sequences would hide its changes from feeds and views.
    /// `PRAGMA data_version` (read under the write lock) tells whether any other connection committed
    /// since the last catch-up; when none did, the two catch-up queries are skipped (ADR 0050).
    func transaction<R>(_ body: () throws -> R) throws -> R {
        try runToEnd(.begin)
        do {
            let version = try dataVersion()
            if version != caughtUpAtDataVersion {
                if let range = try catchUpWithOtherConnections() { external.append(range) }
                caughtUpAtDataVersion = version
            }
            let r = try body()
            if seqWithoutRow && lastSeq != persistedSeq {
                try setMeta("last_seq", .int(Int64(lastSeq.rawValue)))
            }
            try runToEnd(.commit)
            persistedSeq = lastSeq
            seqWithoutRow = false
            return r
        } catch {
            try? connection.execute("ROLLBACK")
            lastSeq = persistedSeq
            seqWithoutRow = false
            throw error
        }
    }

    // MARK: Meta

    func metaInt(_ key: String) throws -> Int64? {
        try first("SELECT value FROM meta WHERE key = ?", [.text(key)]) { $0.int64(at: 0) }
    }

    func metaText(_ key: String) throws -> String? {
        try first("SELECT value FROM meta WHERE key = ?", [.text(key)]) { $0.text(at: 0) }
    }

    func setMeta(_ key: String, _ value: SQLValue) throws {
        try run("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", [.text(key), value])
    }

    /// Assigns the next sequence (inside a write transaction; persisted at its commit by the `docs` row
    /// that takes it, or, `withoutRow`, by `meta.last_seq`).
    func nextSeq(withoutRow: Bool = false) throws -> SeqNo {
        lastSeq = lastSeq.next
        if withoutRow { seqWithoutRow = true }
        return lastSeq
    }

    /// The committed last sequence as any connection sees it.
    /// Adopts the last sequence other connections committed since this one last looked; the range they
    /// added, or nil when there was none. Inside a write transaction or with the writer to itself.
    func catchUpWithOtherConnections() throws -> (after: SeqNo, through: SeqNo)? {
        let committed = try committedLastSeq()
        guard committed > lastSeq else { return nil }
        let range = (after: lastSeq, through: committed)
        lastSeq = committed
        persistedSeq = committed
        return range
    }

    /// `max(meta.last_seq, max(docs.seq))` (invariant 1 of `Schema`) over every collection's `docs` (invariant 6);
    /// each `max(seq)` is its table's last row id.
    func committedLastSeq() throws -> SeqNo {
        let meta = try metaInt("last_seq") ?? 0
        var last = max(0, meta)
        for t in try collectionTables() {
            let rows = try first("SELECT max(seq) FROM \(t.docs)") { $0.isNull(at: 0) ? 0 : $0.int64(at: 0) } ?? 0
            last = max(last, rows)
        }
        // Sequences are stored as Int64: one at the top would make the next save's conversion trap. A file naming
        // one was not written by this database (tampered, or another program's).
        guard last < Int64.max / 2 else {
            throw LiteError.storage("the database's last sequence \(last) is past what a sequence may be")
        }
        return SeqNo(UInt64(last))
    }

    // MARK: Documents

    /// A document's row: its tree (without bodies), sequence, remembered type, and the winner's body as
    /// the row holds it (invariant 2 of `Schema`).
    struct StoredDoc {
        var docID: Int64
        var id: String
        var seq: SeqNo
        var tree: RevTree
        var type: String?
        /// The winner when the row was read (nil for a new document) and its body from `docs.body`.
        var winner: RevID?
        var winnerBody: [UInt8]?
        var isNew: Bool { docID == 0 }

        init(docID: Int64, id: String, seq: SeqNo, tree: RevTree, type: String?, winnerBody: [UInt8]? = nil) {
            self.docID = docID
            self.id = id
            self.seq = seq
            self.tree = tree
            self.type = type
            self.winner = tree.winner
            self.winnerBody = winnerBody
        }
    }

    func loadDoc(_ id: String) throws -> StoredDoc? {
        let s = try statement(.loadDoc)
        defer { s.reset() }
        try s.bindText(id, at: 1)
        guard try s.step() else { return nil }
        let row = (
            s.int64(at: 0), s.int64(at: 1), s.isNull(at: 2) ? nil : s.text(at: 2), s.blob(at: 3),
            s.isNull(at: 4) ? nil : s.blob(at: 4)
        )
        let tree = try Self.decodeTree(row.3, winner: s.text(at: 5), deleted: s.int64(at: 6) != 0)
        guard let seq = UInt64(exactly: row.1) else { throw LiteError.storage("\(id): stored sequence \(row.1)") }
        return StoredDoc(docID: row.0, id: id, seq: SeqNo(seq), tree: tree, type: row.2, winnerBody: row.4)
    }

    /// The tree column of a document of one revision without a stored body (`treeColumn`): the row's `winner`
    /// and `deleted` columns say all of it (ADR 0052).
    static let oneRevisionTreeColumn: [UInt8] = []

    /// `docs.tree` of `tree` (schema version 4, ADR 0052): empty for a tree of one revision without a
    /// body, which the row's `winner` and `deleted` describe whole; otherwise the tree's storage form.
    static func treeColumn(_ tree: RevTree) -> [UInt8] {
        if tree.count == 1, let only = tree.winner, tree.body(of: only) == nil { return oneRevisionTreeColumn }
        return tree.storageBytes()
    }

    /// The tree of a row from its `tree`, `winner` and `deleted` columns (see `treeColumn`).
    static func decodeTree(_ bytes: [UInt8], winner: String, deleted: Bool) throws -> RevTree {
        guard bytes.isEmpty else { return try decodeTree(bytes) }
        guard let rev = RevID(winner) else { throw LiteError.storage("corrupt winner revision: \(winner)") }
        var tree = RevTree()
        // As a root of any generation (a pruned or replicated revision need not be generation 1).
        do { _ = try tree.addHistory([rev], deleted: deleted, body: nil) } catch {
            throw LiteError.storage("corrupt revision tree: \(error)")
        }
        return tree
    }

    private static func decodeTree(_ bytes: [UInt8]) throws -> RevTree {
        do {
            return try RevTree(json: try JSON.parse(bytes, maxValues: Limits.liteMaxJSONValues))
        } catch {
            throw LiteError.storage("corrupt revision tree: \(error)")
        }
    }

    /// Writes a document's row with the next sequence and `winnerBody` (the body of `doc.tree.winner`);
    /// sets the row id of a new one.
    func writeDoc(_ doc: inout StoredDoc, winnerBody: [UInt8]?) throws {
        guard let winner = doc.tree.winner else { throw LiteError.storage("writing an empty tree for \(doc.id)") }
        let seq = try nextSeq()
        doc.seq = seq
        if doc.isNew {
            // A new row's stable number is the sequence that creates it (invariant 1a of `Schema`).
            // Without a conflict clause the id's uniqueness surfaces as an error, as before.
            try run(
                "INSERT INTO \(tables.docs) (seq, id, doc_id, winner, deleted, type, tree, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    .int(Int64(seq.rawValue)), .text(doc.id), .int(Int64(seq.rawValue)), .text(winner.description),
                    .int(doc.tree.winnerIsDeleted ? 1 : 0), doc.type.map { .text($0) } ?? .null,
                    .blob(Self.treeColumn(doc.tree)), winnerBody.map { .blob($0) } ?? .null,
                ])
            doc.docID = Int64(seq.rawValue)
        } else {
            // The new sequence is the new row id: the row moves to the end of the table.
            let s = try statement(.updateDoc)
            defer { s.reset() }
            try s.bind(Int64(seq.rawValue), at: 1)
            try winner.withText { try s.bindText(utf8: $0, at: 2) }
            try s.bind(doc.tree.winnerIsDeleted ? 1 : 0, at: 3)
            try bindOptionalText(s, doc.type, at: 4)
            try s.bindText(doc.id, at: 7)
            try Self.stepWithBlobs(s, Self.treeColumn(doc.tree), at: 5, winnerBody, at: 6)
            guard connection.changes == 1 else { throw LiteError.storage("\(doc.id): document row not found") }
        }
        doc.winner = winner
        doc.winnerBody = winnerBody
    }

    /// Inserts the row of a new document of one revision `rev` (live, no tree: ADR 0052) unless `id` is taken
    /// (then nothing is written, no sequence is used and the result is nil); returns the row's sequence. A new
    /// document needs no look-up before its insert, and no `RevTree` is built for it.
    func insertDocIfAbsent(id: String, rev: RevID, type: String?, winnerBody: [UInt8]) throws -> SeqNo? {
        let seq = lastSeq.next
        let s = try statement(.insertDocIfAbsent)
        defer { s.reset() }
        try s.bind(Int64(seq.rawValue), at: 1)
        try s.bindText(id, at: 2)
        try s.bind(Int64(seq.rawValue), at: 3)
        try rev.withText { try s.bindText(utf8: $0, at: 4) }
        try s.bind(0, at: 5)
        try bindOptionalText(s, type, at: 6)
        try Self.stepWithBlobs(s, Self.oneRevisionTreeColumn, at: 7, winnerBody, at: 8)
        guard connection.changes == 1 else { return nil }
        lastSeq = seq
        return seq
    }

    private func bindOptionalText(_ s: Statement, _ text: String?, at index: Int32) throws {
        if let text { try s.bindText(text, at: index) } else { try s.bindNull(at: index) }
    }

    /// Binds two blobs (nil: NULL) without copying them and steps `s` to its end while they are in scope;
    /// the caller resets `s` (which drops the bindings).
    private static func stepWithBlobs(
        _ s: Statement, _ a: [UInt8], at ai: Int32, _ b: [UInt8]?, at bi: Int32
    ) throws {
        try a.withUnsafeBytes { ab in
            try s.bindBlobNoCopy(ab, at: ai)
            guard let b else {
                try s.bindNull(at: bi)
                while try s.step() {}
                s.reset()
                return
            }
            try b.withUnsafeBytes { bb in
                try s.bindBlobNoCopy(bb, at: bi)
                while try s.step() {}
            }
            s.reset()
        }
    }

    /// The stored body of `rev` of a loaded document: the row's own for the winner, else its `revs` row.
    func body(of doc: StoredDoc, rev: RevID) throws -> [UInt8]? {
        if rev == doc.winner { return doc.winnerBody }
        return try revBody(docID: doc.docID, rev: rev)
    }

    func revBody(docID: Int64, rev: RevID) throws -> [UInt8]? {
        try first(
            "SELECT body FROM \(tables.revs) WHERE doc_id = ? AND rev = ?", [.int(docID), .text(rev.description)]
        ) {
            $0.blob(at: 0)
        }
    }

    func putRevBody(docID: Int64, rev: RevID, body: [UInt8]) throws {
        try run(
            "INSERT OR REPLACE INTO \(tables.revs) (doc_id, rev, body) VALUES (?, ?, ?)",
            [.int(docID), .text(rev.description), .blob(body)])
    }

    func deleteRevBody(docID: Int64, rev: RevID) throws {
        try run("DELETE FROM \(tables.revs) WHERE doc_id = ? AND rev = ?", [.int(docID), .text(rev.description)])
    }

    /// Drops `revs` rows of revisions the tree no longer has (after pruning) or, with
    /// `leavesOnly`, of every non-leaf revision (compaction). The winner's body (in `docs`) is never here.
    @discardableResult
    func dropBodies(docID: Int64, tree: RevTree, leavesOnly: Bool) throws -> Int {
        let revs = try rows("SELECT rev FROM \(tables.revs) WHERE doc_id = ?", [.int(docID)]) { $0.text(at: 0) }
        var dropped = 0
        for text in revs {
            guard let rev = RevID(text) else { continue }
            let keep = leavesOnly ? tree.isLeaf(rev) : tree.contains(rev)
            if !keep {
                try run("DELETE FROM \(tables.revs) WHERE doc_id = ? AND rev = ?", [.int(docID), .text(text)])
                dropped += 1
            }
        }
        return dropped
    }

    // MARK: Attachments

    func hasAttachment(_ digest: String) throws -> Bool {
        try first("SELECT 1 FROM attachments WHERE digest = ?", [.text(digest)]) { _ in true } ?? false
    }

    func putAttachment(digest: String, data: [UInt8]) throws {
        try run(
            "INSERT OR IGNORE INTO attachments (digest, length, data) VALUES (?, ?, ?)",
            [.text(digest), .int(Int64(data.count)), .blob(data)])
    }

    func attachmentData(_ digest: String) throws -> [UInt8]? {
        try first("SELECT data FROM attachments WHERE digest = ?", [.text(digest)]) { $0.blob(at: 0) }
    }
}
