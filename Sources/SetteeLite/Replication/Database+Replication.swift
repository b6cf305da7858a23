import SetteeCore
import SetteeDocument
import SetteeJSON

/// One revision as the replication protocol moves it: the CouchDB body (`_id`, `_rev`, `_revisions`,
/// `_deleted`, `_attachments`) and the bytes of attachments marked `follows`, by name.
public struct ReplicatedRevision: Sendable {
    public var body: JSON
    public var attachments: [String: [UInt8]]
    public init(body: JSON, attachments: [String: [UInt8]] = [:]) {
        self.body = body
        self.attachments = attachments
    }
}

/// The replication protocol's operations on one collection of a local database (what `LocalEndpoint` and a peer
/// listener serve): `_changes`, `_revs_diff`, `_bulk_get`/`open_revs`, `_bulk_docs new_edits=false`.
extension DatabaseCollection {
    /// `_revs_diff`: per document, the revisions this database lacks and the ones it has that a sender
    /// may use as `atts_since`. Documents with nothing missing are left out, as CouchDB does.
    public func revsDiff(_ request: [String: [String]]) throws(LiteError) -> JSON {
        try read { store in
            var out: [(String, JSON)] = []
            for (id, texts) in request.sorted(by: { $0.key < $1.key }) {
                let revs = texts.compactMap(RevID.init)
                let tree = try store.loadDoc(id)?.tree ?? RevTree()
                let (missing, ancestors) = tree.revsDiff(revs)
                if missing.isEmpty { continue }
                var entry: [(String, JSON)] = [("missing", .array(missing.map { .string($0.description) }))]
                if !ancestors.isEmpty {
                    entry.append(("possible_ancestors", .array(ancestors.map { .string($0.description) })))
                }
                out.append((id, .object(entry)))
            }
            return .object(out)
        }
    }

    /// A revision as `_bulk_get`/`GET ?open_revs&revs=true` return it: the body with `_id`, `_rev`,
    /// `_deleted`, `_revisions` (up to `historyLimit`, stopping at a revision in `attsSince`) and
    /// `_attachments`. Attachments whose `revpos` is above every `attsSince` generation (all, when nil)
    /// carry their bytes: inline base64 `data`, or with `follows` the bytes go in `attachments`.
    /// Nil when the revision is unknown or its body was compacted away.
    public func replicatedRevision(
        _ id: String, revision: RevID, historyLimit: Int = Limits.liteRevsLimit, attsSince: [RevID]? = nil,
        follows: Bool = true
    ) throws(LiteError) -> ReplicatedRevision? {
        try read { store in
            guard let stored = try store.loadDoc(id), stored.tree.contains(revision),
                let bytes = try store.body(of: stored, rev: revision)
            else { return nil }
            let body = try JSON.parse(bytes, maxValues: Limits.liteMaxJSONValues)
            var members: [(String, JSON)] = [("_id", .string(id)), ("_rev", .string(revision.description))]
            if stored.tree.isDeleted(revision) { members.append(("_deleted", true)) }
            let known = Set(attsSince ?? [])
            members.append(
                ("_revisions", stored.tree.revisionsJSON(of: revision, limit: historyLimit, knownAncestors: known)))
            // Only an ancestor of `revision` proves the receiver holds its attachments: a known revision on
            // another branch may lack one this branch added at a lower revpos.
            let sinceGeneration = stored.tree.history(of: revision).first { known.contains($0) }?.generation ?? 0
            var data: [String: [UInt8]] = [:]
            for (k, v) in body.objectValue ?? [] {
                guard k == "_attachments", let atts = v.objectValue else {
                    members.append((k, v))
                    continue
                }
                var entries: [(String, JSON)] = []
                for (name, stub) in atts {
                    let info = try AttachmentInfo(json: stub)
                    if info.revpos > sinceGeneration, let bytes = try store.attachmentData(info.digest) {
                        if follows {
                            data[name] = bytes
                            entries.append((name, info.json(stub: false, follows: true)))
                        } else {
                            entries.append((name, info.json(stub: false, data: bytes)))
                        }
                    } else {
                        entries.append((name, info.json(stub: true)))
                    }
                }
                members.append(("_attachments", .object(entries)))
            }
            return ReplicatedRevision(body: .object(members), attachments: data)
        }
    }

    /// `open_revs`: the listed revisions (nil: every leaf), each found or reported missing.
    public func openRevisions(
        _ id: String, revisions: [RevID]?, attsSince: [RevID]? = nil, follows: Bool = true
    ) throws(LiteError) -> [(revision: RevID, found: ReplicatedRevision?)] {
        var revs = revisions ?? []
        if revisions == nil { revs = try revisionTree(of: id)?.leaves ?? [] }
        var out: [(revision: RevID, found: ReplicatedRevision?)] = []
        for r in revs {
            out.append((r, try replicatedRevision(id, revision: r, attsSince: attsSince, follows: follows)))
        }
        return out
    }

    /// The revision a replicated body names for its result row: `_rev`, else the head of `_revisions` (a body may
    /// carry `_revisions` alone); null when it names none.
    static func revisionNamed(by body: JSON) -> JSON {
        if let rev = body["_rev"], !rev.isNull { return rev }
        let history = try? DocumentBody.replicatedHistory(rev: nil, revisions: body["_revisions"])
        return history?.first.map { .string($0.description) } ?? .null
    }

    /// `_bulk_docs` with `new_edits=false`: inserts each revision with its history; per revision a
    /// CouchDB result row (`{"id","rev"}` or `{"id","rev","error","reason"}`). One transaction per
    /// call unless a revision is refused, then each is tried on its own so the good ones still land.
    /// A failure of the machine (`.unavailable`: a full disk) is thrown, on its own revision too: a row would let
    /// the replicator count that revision as refused and checkpoint past it, and it would never be fetched again.
    public func bulkInsert(_ revisions: [ReplicatedRevision]) throws(LiteError) -> [JSON] {
        func row(_ r: ReplicatedRevision, _ error: LiteError?) -> JSON {
            var m: [(String, JSON)] = [("id", r.body["_id"] ?? .null), ("rev", Self.revisionNamed(by: r.body))]
            if let error {
                m.append(("error", .string(error.errorName)))
                m.append(("reason", .string(error.description)))
                m.append(("status", .number(Double(error.status))))
            } else {
                m.append(("ok", true))
            }
            return .object(m)
        }
        do {
            _ = try insertRevisions(revisions.map { (body: $0.body, attachments: $0.attachments) })
            return revisions.map { row($0, nil) }
        } catch {
            switch error {
            case .closed, .storage, .unavailable: throw error
            case .notFound, .conflict, .badRequest: break
            }
        }
        var rows: [JSON] = []
        for r in revisions {
            do {
                _ = try insertRevisions([(body: r.body, attachments: r.attachments)])
                rows.append(row(r, nil))
            } catch {
                switch error {
                case .closed, .unavailable: throw error
                case .storage, .notFound, .conflict, .badRequest: rows.append(row(r, error))
                }
            }
        }
        return rows
    }
}

/// The replication operations on the default collection (`DatabaseCollection`'s, which they forward to).
extension Database {
    /// `_revs_diff` on the default collection.
    public func revsDiff(_ request: [String: [String]]) throws(LiteError) -> JSON {
        try defaultCollectionHandle.revsDiff(request)
    }

    /// A revision of the default collection as `_bulk_get` returns it (`DatabaseCollection.replicatedRevision`).
    public func replicatedRevision(
        _ id: String, revision: RevID, historyLimit: Int = Limits.liteRevsLimit, attsSince: [RevID]? = nil,
        follows: Bool = true
    ) throws(LiteError) -> ReplicatedRevision? {
        try defaultCollectionHandle.replicatedRevision(
            id, revision: revision, historyLimit: historyLimit, attsSince: attsSince, follows: follows)
    }

    /// `open_revs` on the default collection.
    public func openRevisions(
        _ id: String, revisions: [RevID]?, attsSince: [RevID]? = nil, follows: Bool = true
    ) throws(LiteError) -> [(revision: RevID, found: ReplicatedRevision?)] {
        try defaultCollectionHandle.openRevisions(id, revisions: revisions, attsSince: attsSince, follows: follows)
    }

    /// `_bulk_docs` with `new_edits=false` into the default collection (`DatabaseCollection.bulkInsert`).
    public func bulkInsert(_ revisions: [ReplicatedRevision]) throws(LiteError) -> [JSON] {
        try defaultCollectionHandle.bulkInsert(revisions)
    }
}
