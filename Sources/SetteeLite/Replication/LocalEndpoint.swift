import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeReplication

/// A collection of a Lite database (the default one unless given) as a `ReplicationEndpoint`, so the `Replicator` can push from it and pull into it
/// (and replicate between two local databases) without HTTP. Every operation runs on the database's
/// own queue (`Database.perform`), never on the caller's executor.
///
/// Sequences are the database's `SeqNo` as JSON numbers. A `channels` filter keeps documents whose
/// `channels` property (a string or an array of strings) names one of the channels, which is what a
/// Lite peer can offer without a sync function; `docIDs` keeps the listed ids; other named filters are
/// refused (400).
///
/// Each collection is its own endpoint (docs/adr/0150): its `identity` names the collection (except the default
/// one's, which stays what it was before collections), so a replicator's checkpoint id, and with it the `_local`
/// checkpoint document (in the database's shared `_local` table), is per collection.
public struct LocalEndpoint: ReplicationEndpoint {
    public var database: Database { collection.database }
    /// The collection this endpoint reads and writes.
    public let collection: DatabaseCollection
    /// How long a `longpoll`/`continuous` `changes` call waits for a change when there is none
    /// (it notices one within `Limits.liteFeedPollMs`).
    public var feedTimeoutMs: Int
    /// Revisions this endpoint offers as a replication's source (a push) only when this says true (Couchbase Lite
    /// 3.1's `pushFilter`); it sees the change's current revision, deleted or not. Nil offers every change.
    public var pushFilter: DocumentFilter?
    /// Revisions this endpoint saves as a replication's target (a pull, `bulkDocs` with `new_edits=false`) only when
    /// this says true (`pullFilter`); a refused one is answered as a 403 row (counted in `docWriteFailures`, never
    /// retried), so the checkpoint moves past it. Nil saves every revision.
    public var pullFilter: DocumentFilter?
    /// Asked when a pulled revision makes a conflict (`ConflictResolver`); nil keeps the conflict in the revision
    /// tree, where the winner rule picks the revision reads see.
    public var conflictResolver: ConflictResolver?

    /// The default collection of `database`.
    public init(_ database: Database, feedTimeoutMs: Int = Limits.liteFeedTimeoutMs) {
        self.init(database.defaultCollection(), feedTimeoutMs: feedTimeoutMs)
    }

    /// The collection `collection`.
    public init(_ collection: DatabaseCollection, feedTimeoutMs: Int = Limits.liteFeedTimeoutMs) {
        self.collection = collection
        self.feedTimeoutMs = feedTimeoutMs
    }

    /// `lite:<uuid>` for the default collection, `lite:<uuid>/<scope>.<collection>` for another.
    public var identity: String {
        collection.isDefault ? "lite:\(database.uuid)" : "lite:\(database.uuid)/\(collection.fullName)"
    }

    /// Runs `body` with the endpoint's collection on the database's queue.
    private func inCollection<R: Sendable>(
        _ body: @escaping @Sendable (DatabaseCollection) throws(LiteError) -> R
    ) async throws -> R {
        let collection = collection
        return try await run { _ throws(LiteError) in try body(collection) }
    }

    static func replicationError(_ e: LiteError) -> ReplicationError {
        switch e {
        case .closed: .network("database \(e) closed")
        default: .http(status: e.status, error: e.errorName, reason: e.description)
        }
    }

    private func run<R: Sendable>(_ body: @escaping @Sendable (Database) throws(LiteError) -> R) async throws -> R {
        do { return try await database.perform(body) } catch { throw Self.replicationError(error) }
    }

    public func info() async throws -> JSON {
        let collection = collection
        return try await run { db throws(LiteError) in
            [
                "db_name": .string(db.name), "update_seq": .number(Double(db.lastSequence.rawValue)),
                "doc_count": .number(Double(collection.documentCount)), "uuid": .string(db.uuid),
            ]
        }
    }

    public func changes(
        since: String?, limit: Int, feed: ChangesFeedKind, filter: ReplicationFilter?, heartbeatMs: Int?
    ) async throws -> ChangesBatch {
        if case .named(let name, _)? = filter {
            throw ReplicationError.http(status: 400, error: "bad_request", reason: "unknown filter \(name)")
        }
        guard let after = Self.parseSince(since) else {
            throw ReplicationError.http(status: 400, error: "bad_request", reason: "bad since \(since ?? "")")
        }
        let first = try await scan(after: after, limit: limit, filter: filter)
        guard feed != .normal, first.rows.isEmpty else { return first }
        // Wait for the database's sequence to move (a cheap read every poll interval), then rescan.
        let deadline = ContinuousClock.now + .milliseconds(feedTimeoutMs)
        var seen = database.lastSequence
        var last = first
        while ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(Limits.liteFeedPollMs))
            let now = database.lastSequence
            if now == seen { continue }
            seen = now
            last = try await scan(after: after, limit: limit, filter: filter)
            if !last.rows.isEmpty { return last }
        }
        return last
    }

    /// A `since` a peer sent: a sequence 0...Int.max (sequences travel as `Int` JSON numbers), as
    /// decimal digits or an integral number such as `5.0`; nil (400) for anything else, `1e20` and `nan`
    /// included. Absent means 0.
    static func parseSince(_ since: String?) -> SeqNo? {
        guard let since else { return .zero }
        if let n = Int(since) { return n >= 0 ? SeqNo(UInt64(n)) : nil }
        guard let d = Double(since), let n = Int(exactly: d), n >= 0 else { return nil }
        return SeqNo(UInt64(n))
    }

    /// Rows after `after`; scans on past filtered-out changes until a row matches or the end.
    private func scan(after: SeqNo, limit: Int, filter: ReplicationFilter?) async throws -> ChangesBatch {
        let batch = max(1, min(limit, Limits.liteMaxChangesBatch))
        // Sets: a scan tests every change of the database against the filter's lists, which may be long.
        let wanted = WantedChanges(filter)
        let pushFilter = pushFilter
        return try await inCollection { db throws(LiteError) in
            var cursor = after
            var rows: [ChangeRow] = []
            while rows.isEmpty {
                let entries = try db.changes(since: cursor, limit: batch)
                for e in entries where try Self.passes(e, wanted, db) {
                    if let pushFilter, !(try Self.pushFilterPasses(e, pushFilter, db)) { continue }
                    rows.append(
                        ChangeRow(
                            seq: SequenceID(Int(e.sequence.rawValue)), id: e.id, revs: e.leaves.map(\.description),
                            deleted: e.isDeleted))
                }
                if let last = entries.last { cursor = last.sequence }
                if entries.count < batch { break }
            }
            let lastSeq = rows.isEmpty ? max(cursor, after) : SeqNo(UInt64(rows.last!.seq.json.intValue ?? 0))
            return ChangesBatch(rows: rows, lastSeq: SequenceID(Int(lastSeq.rawValue)))
        }
    }

    /// A changes filter as the scan tests it: the listed ids and channels as sets (one lookup per change).
    private enum WantedChanges: Sendable {
        case all
        case docIDs(Set<String>)
        case channels(Set<String>)

        init(_ filter: ReplicationFilter?) {
            switch filter {
            case nil, .named?: self = .all
            case .docIDs(let ids)?: self = .docIDs(Set(ids))
            case .channels(let names)?: self = .channels(Set(names))
            }
        }
    }

    private static func passes(
        _ e: ChangeEntry, _ wanted: WantedChanges, _ db: DatabaseCollection
    ) throws(LiteError) -> Bool {
        switch wanted {
        case .all: return true
        case .docIDs(let ids): return ids.contains(e.id)
        case .channels(let wanted):
            if e.isDeleted { return true }  // tombstones carry no properties; let removals through
            guard let doc = try db.document(e.id, revision: e.revision) else { return false }
            switch doc["channels"] {
            case .string(let c): return wanted.contains(c)
            case .array(let items): return items.contains { $0.stringValue.map(wanted.contains) ?? false }
            default: return false
            }
        }
    }

    /// Whether the collection's push filter takes change `e`: its current revision (a tombstone with `.deleted`);
    /// a revision no longer readable (compacted) is left out.
    private static func pushFilterPasses(
        _ e: ChangeEntry, _ filter: DocumentFilter, _ db: DatabaseCollection
    ) throws(LiteError) -> Bool {
        guard let doc = try db.document(e.id, revision: e.revision) else { return false }
        return filter(doc, e.isDeleted ? .deleted : [])
    }

    public func revsDiff(_ request: [String: [String]]) async throws -> JSON {
        try await inCollection { db throws(LiteError) in try db.revsDiff(request) }
    }

    public func bulkGet(_ requests: [BulkGetRequest]) async throws -> [FetchedRevision] {
        try await inCollection { db throws(LiteError) in
            try requests.map { r throws(LiteError) in
                guard let rev = RevID(r.rev),
                    let found = try db.replicatedRevision(
                        r.id, revision: rev, attsSince: r.attsSince.compactMap(RevID.init), follows: true)
                else {
                    return FetchedRevision(
                        id: r.id, rev: r.rev, error: RevisionError(status: 404, error: "not_found", reason: "missing"))
                }
                return FetchedRevision(id: r.id, rev: r.rev, body: found.body, attachments: found.attachments)
            }
        }
    }

    public func bulkDocs(_ docs: [FetchedRevision], newEdits: Bool) async throws -> [JSON] {
        let pullFilter = pullFilter
        let resolver = conflictResolver
        return try await inCollection { db throws(LiteError) in
            if !newEdits {
                guard pullFilter != nil || resolver != nil else {
                    return try db.bulkInsert(
                        docs.map { ReplicatedRevision(body: $0.body, attachments: $0.attachments) })
                }
                return try Self.pulled(docs, into: db, filter: pullFilter, resolver: resolver)
            }
            return docs.map { d in
                do throws(LiteError) {
                    let doc = try Document(couchBody: d.body, attachments: d.attachments)
                    let rev =
                        doc.isDeleted
                        ? try db.delete(doc.id ?? d.id, revision: doc.revision) : try db.put(doc).revision!
                    return ["id": .string(doc.id ?? d.id), "rev": .string(rev.description), "ok": true]
                } catch {
                    return .errorBody(error.errorName, reason: error.description, id: d.id)
                }
            }
        }
    }

    /// A pull's revisions through the collection's pull filter and conflict resolver: the refused ones answered
    /// 403 (in the batch's order), the rest inserted as `bulkInsert` does; then each inserted revision that made a
    /// conflict is resolved (`DatabaseCollection.resolvePulledConflict`).
    private static func pulled(
        _ docs: [FetchedRevision], into db: DatabaseCollection, filter: DocumentFilter?, resolver: ConflictResolver?
    ) throws(LiteError) -> [JSON] {
        var rows: [JSON?] = Array(repeating: nil, count: docs.count)
        var taken: [(index: Int, doc: FetchedRevision)] = []
        for (i, d) in docs.enumerated() {
            guard let filter else {
                taken.append((i, d))
                continue
            }
            var flags: DocumentFlags = []
            if d.body["_deleted"]?.boolValue == true { flags.insert(.deleted) }
            if d.body["_removed"]?.boolValue == true { flags.insert(.accessRemoved) }
            // A body the filter cannot be shown (not a document) goes on to the insert, which refuses it.
            guard let doc = try? Document(couchBody: d.body, attachments: d.attachments), !filter(doc, flags) else {
                taken.append((i, d))
                continue
            }
            rows[i] = .errorBody(
                "forbidden", reason: "refused by the collection's pull filter", status: 403, id: d.id, rev: d.rev)
        }
        let inserted =
            taken.isEmpty
            ? []
            : try db.bulkInsert(taken.map { ReplicatedRevision(body: $0.doc.body, attachments: $0.doc.attachments) })
        for (n, t) in taken.enumerated() where n < inserted.count {
            rows[t.index] = inserted[n]
            guard let resolver, inserted[n]["error"] == nil, let rev = RevID(t.doc.rev) else { continue }
            _ = try db.resolvePulledConflict(t.doc.id, remote: rev, resolver: resolver)
        }
        return rows.enumerated().map { i, row in
            row ?? .errorBody("internal_error", reason: "no answer for this revision", status: 500, id: docs[i].id)
        }
    }

    public func getLocal(_ id: String) async throws -> JSON? {
        try await run { db throws(LiteError) in try db.localDocument(id) }
    }

    public func putLocal(_ id: String, _ body: JSON) async throws {
        _ = try await run { db throws(LiteError) in try db.putLocalDocument(id, body) }
    }

    /// Every save is a committed SQLite transaction (WAL) but not yet fsynced (`synchronous=NORMAL`): a power loss
    /// may take the last ones. So the files are synced before a replicator may checkpoint past them; before, this
    /// answered at once, and a pull checkpointed on the source could skip documents the target then lost.
    public func ensureFullCommit() async throws -> String? {
        try await run { db throws(LiteError) in try db.makeDurable() }
        return "lite:\(database.uuid)"
    }
}
