import SetteeJSON
import SetteeReplication
import Synchronization

/// A small in-memory database that speaks the replication protocol, with revision trees reduced to
/// parent links: enough to run the real `Replicator` without sockets, and to inject failures.
final class MemoryEndpoint: ReplicationEndpoint {
    struct Rev {
        var parent: String?
        var body: JSON
        var attachments: [String: [UInt8]]
    }
    struct Doc {
        var revs: [String: Rev] = [:]
        var seq = 0
        var leaves: [String] {
            let parents = Set(revs.values.compactMap(\.parent))
            return revs.keys.filter { !parents.contains($0) }.sorted()
        }
    }
    struct Store {
        var docs: [String: Doc] = [:]
        var seq = 0
        var locals: [String: JSON] = [:]
        /// Transient failures to inject: operation name → how many calls still fail.
        var failures: [String: Int] = [:]
        var rejected: Set<String> = []
        var docsUploaded = 0
        var changesCalls: [String?] = []
        /// What `ensureFullCommit` last made durable, and the process instance (bumped by a crash).
        var flushed: [String: Doc] = [:]
        var flushedSeq = 0
        var instance = 1
        /// `bulkDocs` calls to let through before the endpoint "crashes" right after acknowledging one:
        /// everything not yet made durable by `ensureFullCommit` is lost and the instance changes.
        var crashAfterBulkDocs: Int?
    }
    let identity: String
    let store = Mutex(Store())

    init(_ name: String) { identity = "memory:" + name }

    // MARK: Test helpers

    /// Writes a revision locally (`rev` "g-digest" child of `parent`).
    func put(
        _ id: String, rev: String, parent: String? = nil, body: [(String, JSON)] = [],
        attachments: [String: [UInt8]] = [:]
    ) {
        store.withLock { s in
            s.seq += 1
            var doc = s.docs[id] ?? Doc()
            var b: [(String, JSON)] = body
            if !attachments.isEmpty {
                b.append(
                    (
                        "_attachments",
                        .object(
                            attachments.keys.sorted().map {
                                ($0, .object([("length", .number(Double(attachments[$0]!.count)))]))
                            })
                    ))
            }
            doc.revs[rev] = Rev(parent: parent, body: .object(b), attachments: attachments)
            doc.seq = s.seq
            s.docs[id] = doc
        }
    }

    func fail(_ op: String, times: Int) { store.withLock { $0.failures[op] = times } }

    var docs: [String: Doc] { store.withLock { $0.docs } }

    private func injected(_ op: String) throws {
        try store.withLock { s in
            if let n = s.failures[op], n > 0 {
                s.failures[op] = n - 1
                throw ReplicationError.network("injected \(op) failure")
            }
        }
    }

    // MARK: ReplicationEndpoint

    func info() async throws -> JSON { .object([("update_seq", .number(Double(store.withLock { $0.seq })))]) }

    func changes(since: String?, limit: Int, feed: ChangesFeedKind, filter: ReplicationFilter?, heartbeatMs: Int?)
        async throws -> ChangesBatch
    {
        try injected("changes")
        store.withLock { $0.changesCalls.append(since) }
        let after = Int(since ?? "0") ?? 0
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(feed == .normal ? 0 : 2)
        while true {
            let rows = store.withLock { s -> [ChangeRow] in
                s.docs.filter { $0.value.seq > after }.sorted { $0.value.seq < $1.value.seq }.filter { id, _ in
                    if case .docIDs(let ids)? = filter { return ids.contains(id) }
                    return true
                }.prefix(limit).map { ChangeRow(seq: SequenceID($0.value.seq), id: $0.key, revs: $0.value.leaves) }
            }
            if !rows.isEmpty || clock.now >= deadline {
                return ChangesBatch(rows: rows, lastSeq: rows.last?.seq ?? SequenceID(after))
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    func revsDiff(_ request: [String: [String]]) async throws -> JSON {
        try injected("revsDiff")
        let answer = store.withLock { s -> [String: RevsDiffEntry] in
            var out: [String: RevsDiffEntry] = [:]
            for (id, revs) in request {
                let doc = s.docs[id]
                let missing = revs.filter { doc?.revs[$0] == nil }
                if !missing.isEmpty { out[id] = RevsDiffEntry(missing: missing, possibleAncestors: doc?.leaves ?? []) }
            }
            return out
        }
        return RevsDiff.answerJSON(answer)
    }

    func bulkGet(_ requests: [BulkGetRequest]) async throws -> [FetchedRevision] {
        try injected("bulkGet")
        return store.withLock { s in
            requests.map { r in
                guard let doc = s.docs[r.id], let rev = doc.revs[r.rev] else {
                    return FetchedRevision(
                        id: r.id, rev: r.rev, error: RevisionError(status: 404, error: "not_found", reason: "missing"))
                }
                var history: [String] = []
                var cursor: String? = r.rev
                while let c = cursor {
                    history.append(c)
                    cursor = doc.revs[c]?.parent
                }
                var body = rev.body
                body.set("_id", .string(r.id))
                body.set("_rev", .string(r.rev))
                body.set(
                    "_revisions",
                    .object([
                        ("start", .number(Double(Int(r.rev.split(separator: "-")[0])!))),
                        ("ids", .array(history.map { .string(String($0.split(separator: "-", maxSplits: 1)[1])) })),
                    ]))
                if var atts = body["_attachments"] {
                    for name in rev.attachments.keys { atts.set(name, .object([("follows", .bool(true))])) }
                    body.set("_attachments", atts)
                }
                return FetchedRevision(id: r.id, rev: r.rev, body: body, attachments: rev.attachments)
            }
        }
    }

    func bulkDocs(_ docs: [FetchedRevision], newEdits: Bool) async throws -> [JSON] {
        try injected("bulkDocs")
        precondition(!newEdits, "the replicator always uploads with new_edits=false")
        let rows = store.withLock { s in
            docs.map { d -> JSON in
                if s.rejected.contains(d.id) {
                    return .object([
                        ("id", .string(d.id)), ("error", .string("forbidden")), ("reason", .string("rejected")),
                    ])
                }
                let start = d.body["_revisions"]?["start"]?.intValue ?? 1
                let ids = (d.body["_revisions"]?["ids"]?.arrayValue ?? []).compactMap(\.stringValue)
                let chain = ids.enumerated().map { "\(start - $0.offset)-\($0.element)" }
                var doc = s.docs[d.id] ?? Doc()
                for (i, rev) in chain.enumerated() where doc.revs[rev] == nil {
                    var body = i == 0 ? d.body : .object([])
                    for k in ["_id", "_rev", "_revisions"] { body.set(k, nil) }
                    doc.revs[rev] = Rev(
                        parent: i + 1 < chain.count ? chain[i + 1] : nil, body: body,
                        attachments: i == 0 ? d.attachments : [:])
                }
                s.seq += 1
                doc.seq = s.seq
                s.docs[d.id] = doc
                s.docsUploaded += 1
                return .object([("id", .string(d.id)), ("rev", .string(d.rev)), ("ok", .bool(true))])
            }
        }
        store.withLock { s in
            guard let n = s.crashAfterBulkDocs else { return }
            if n > 0 {
                s.crashAfterBulkDocs = n - 1
                return
            }
            s.crashAfterBulkDocs = nil
            s.docs = s.flushed
            s.seq = s.flushedSeq
            s.instance += 1
        }
        return rows
    }

    func ensureFullCommit() async throws -> String? {
        try injected("ensureFullCommit")
        return store.withLock { s in
            s.flushed = s.docs
            s.flushedSeq = s.seq
            return "instance-\(s.instance)"
        }
    }

    func getLocal(_ id: String) async throws -> JSON? {
        try injected("getLocal")
        return store.withLock { $0.locals[id] }
    }

    func putLocal(_ id: String, _ body: JSON) async throws {
        try injected("putLocal")
        try store.withLock { s in
            let current = s.locals[id]?["_rev"]?.stringValue
            guard body["_rev"]?.stringValue == current else {
                throw ReplicationError.http(status: 409, error: "conflict", reason: "Document update conflict")
            }
            var stored = body
            stored.set("_rev", .string("0-" + Self.decimalSuccessor(current.map { String($0.dropFirst(2)) } ?? "0")))
            s.locals[id] = stored
        }
    }

    /// `digits + 1` in decimal without a width limit, as CouchDB (Erlang integers) counts `_local` revisions: a
    /// checkpoint at `0-9223372036854775807` becomes `0-9223372036854775808`. Not digits: counts from 0.
    static func decimalSuccessor(_ digits: String) -> String {
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return "1" }
        var out = Array(digits.utf8)
        var i = out.count - 1
        while i >= 0 {
            if out[i] < 0x39 {
                out[i] += 1
                return String(decoding: out, as: UTF8.self)
            }
            out[i] = 0x30
            i -= 1
        }
        return "1" + String(decoding: out, as: UTF8.self)
    }
}
