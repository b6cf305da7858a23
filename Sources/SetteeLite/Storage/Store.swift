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
/// keeps `lastSeq` in memory (invariant: equals `meta.last_seq` outside a transaction).
final class Store {
    let connection: Connection
    private var cache: [String: Statement] = [:]
    let readOnly: Bool
    /// The writer's view of the last assigned sequence.
    var lastSeq: SeqNo = .zero
    /// `meta.last_seq` as committed.
    private var persistedSeq: SeqNo = .zero
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
                if try metaInt("schema_version") == nil {
                    try setMeta("schema_version", .int(Schema.version))
                    try setMeta("last_seq", .int(0))
                    try setMeta("uuid", .text(UUID().uuidString.lowercased()))
                }
            }
            guard let v = try metaInt("schema_version"), v == Schema.version else {
                throw LiteError.storage("\(path): unknown schema version")
            }
        }
        lastSeq = SeqNo(UInt64(try metaInt("last_seq") ?? 0))
        persistedSeq = lastSeq
        uuid = try metaText("uuid") ?? ""
    }

    func close() {
        cache = [:]
        connection.close()
    }

    // MARK: Statements

    func statement(_ sql: String) throws -> Statement {
        if let s = cache[sql] { return s }
        let s = try connection.prepare(sql)
        cache[sql] = s
        return s
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

    /// `BEGIN IMMEDIATE` ... `COMMIT`; `meta.last_seq` is written once, just before the commit. On any
    /// error `ROLLBACK` and forget the sequences the transaction took. The last sequence is read again
    /// under the write lock: another process may have committed since (two apps, or an app and
    /// `settee-lite`, on one file), and reusing its sequences would hide its changes from feeds and views.
    func transaction<R>(_ body: () throws -> R) throws -> R {
        try connection.execute("BEGIN IMMEDIATE")
        do {
            if let range = try catchUpWithOtherConnections() { external.append(range) }
            let r = try body()
            if lastSeq != persistedSeq { try setMeta("last_seq", .int(Int64(lastSeq.rawValue))) }
            try connection.execute("COMMIT")
            persistedSeq = lastSeq
            return r
        } catch {
            try? connection.execute("ROLLBACK")
            lastSeq = persistedSeq
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

    /// Assigns the next sequence (inside a write transaction; persisted at its commit).
    func nextSeq() throws -> SeqNo {
        lastSeq = lastSeq.next
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

    func committedLastSeq() throws -> SeqNo {
        SeqNo(UInt64(try metaInt("last_seq") ?? 0))
    }

    // MARK: Documents

    /// A document's row: its tree (without bodies), sequence and remembered type.
    struct StoredDoc {
        var docID: Int64
        var id: String
        var seq: SeqNo
        var tree: RevTree
        var type: String?
        var isNew: Bool { docID == 0 }
    }

    func loadDoc(_ id: String) throws -> StoredDoc? {
        let row = try first("SELECT doc_id, seq, type, tree FROM docs WHERE id = ?", [.text(id)]) { s in
            (s.int64(at: 0), s.int64(at: 1), s.isNull(at: 2) ? nil : s.text(at: 2), s.blob(at: 3))
        }
        guard let row else { return nil }
        return StoredDoc(
            docID: row.0, id: id, seq: SeqNo(UInt64(row.1)), tree: try Self.decodeTree(row.3), type: row.2)
    }

    static func decodeTree(_ bytes: [UInt8]) throws -> RevTree {
        do {
            return try RevTree(json: try JSON.parse(bytes))
        } catch {
            throw LiteError.storage("corrupt revision tree: \(error)")
        }
    }

    /// Writes a document's row with the next sequence; sets the row id of a new one.
    func writeDoc(_ doc: inout StoredDoc) throws {
        guard let winner = doc.tree.winner else { preconditionFailure("writing an empty tree for \(doc.id)") }
        let seq = try nextSeq()
        doc.seq = seq
        let tree = doc.tree.json().serialized()
        let typeValue: SQLValue = doc.type.map { .text($0) } ?? .null
        let deleted: Int64 = doc.tree.winnerIsDeleted ? 1 : 0
        if doc.isNew {
            let rowID = try first(
                "INSERT INTO docs (id, seq, winner, deleted, type, tree) VALUES (?, ?, ?, ?, ?, ?) RETURNING doc_id",
                [
                    .text(doc.id), .int(Int64(seq.rawValue)), .text(winner.description), .int(deleted), typeValue,
                    .blob(tree),
                ]
            ) { $0.int64(at: 0) }
            guard let rowID else { throw LiteError.storage("insert of \(doc.id) returned no row") }
            doc.docID = rowID
        } else {
            try run(
                "UPDATE docs SET seq = ?, winner = ?, deleted = ?, type = ?, tree = ? WHERE doc_id = ?",
                [
                    .int(Int64(seq.rawValue)), .text(winner.description), .int(deleted), typeValue, .blob(tree),
                    .int(doc.docID),
                ])
        }
    }

    func revBody(docID: Int64, rev: RevID) throws -> [UInt8]? {
        try first("SELECT body FROM revs WHERE doc_id = ? AND rev = ?", [.int(docID), .text(rev.description)]) {
            $0.blob(at: 0)
        }
    }

    func putRevBody(docID: Int64, rev: RevID, body: [UInt8]) throws {
        try run(
            "INSERT OR REPLACE INTO revs (doc_id, rev, body) VALUES (?, ?, ?)",
            [.int(docID), .text(rev.description), .blob(body)])
    }

    /// Drops `revs` rows of revisions the tree no longer has (after pruning) or, with
    /// `leavesOnly`, of every non-leaf revision (compaction).
    @discardableResult
    func dropBodies(docID: Int64, tree: RevTree, leavesOnly: Bool) throws -> Int {
        let revs = try rows("SELECT rev FROM revs WHERE doc_id = ?", [.int(docID)]) { $0.text(at: 0) }
        var dropped = 0
        for text in revs {
            guard let rev = RevID(text) else { continue }
            let keep = leavesOnly ? tree.isLeaf(rev) : tree.contains(rev)
            if !keep {
                try run("DELETE FROM revs WHERE doc_id = ? AND rev = ?", [.int(docID), .text(text)])
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
