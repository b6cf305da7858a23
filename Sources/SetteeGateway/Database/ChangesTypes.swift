import SetteeDocument
import SetteeJSON

/// A `_changes` sequence: a plain gateway sequence `S`, a backfill sequence `T:S` (S delivered by the
/// backfill of a channel granted at T) or `L::S` / `L:T:S` (L: every sequence up to L delivered), any of them
/// optionally followed by `@H`: the purge horizon in force when the pull handed this token began (`pullHorizon`,
/// ADR 0145 amendment; only on a token below the horizon, so a database that never purged never sends one).
/// Plain ones travel as JSON numbers, compound ones as strings; clients treat both as opaque and echo them back as
/// `since` (PouchDB, Couchbase Lite and our replicator store them as they came).
public struct ChangesSince: Sendable, Hashable, CustomStringConvertible {
    public var seq: UInt64
    /// The grant sequence whose backfill this belongs to; 0 for none.
    public var triggeredBy: UInt64
    /// A low sequence below which everything was delivered; 0 for none.
    public var low: UInt64
    /// The purge horizon (`PurgeHorizon.purgedThrough`) in force when the pull that was handed this token started
    /// from 0 (capped at the stable sequence its first page was read at); 0 for none. `PurgeHorizon.admits` lets such a
    /// pull go on below the horizon as long as the horizon has not risen since.
    public var pullHorizon: UInt64

    public init(_ seq: UInt64, triggeredBy: UInt64 = 0, low: UInt64 = 0, pullHorizon: UInt64 = 0) {
        self.seq = seq
        self.triggeredBy = triggeredBy
        self.low = low
        self.pullHorizon = pullHorizon
    }

    public static let zero = ChangesSince(0)

    /// Parses `12`, `"12"`, `"5:12"`, `"5::12"` and `"3:5:12"`, each optionally followed by `@H` (H > 0: the
    /// `pullHorizon`); nil when malformed.
    public init?(_ text: String) {
        var t = Substring(text)
        if t.count >= 2, t.first == "\"", t.last == "\"" { t = t.dropFirst().dropLast() }
        var horizon: UInt64 = 0
        if let at = t.lastIndex(of: "@") {
            guard let h = UInt64(t[t.index(after: at)...]), h > 0 else { return nil }
            horizon = h
            t = t[..<at]
        }
        if t.isEmpty { return nil }
        let parts = t.split(separator: ":", omittingEmptySubsequences: false)
        func num(_ s: Substring) -> UInt64? { s.isEmpty ? 0 : UInt64(s) }
        switch parts.count {
        case 1:
            guard let s = UInt64(parts[0]) else { return nil }
            self.init(s)
        case 2:
            guard let tr = UInt64(parts[0]), let s = UInt64(parts[1]) else { return nil }
            self.init(s, triggeredBy: tr)
        case 3:
            guard let l = num(parts[0]), let tr = num(parts[1]), let s = UInt64(parts[2]) else { return nil }
            self.init(s, triggeredBy: tr, low: l)
        default:
            return nil
        }
        pullHorizon = horizon
    }

    /// Parses a `since` given as a JSON number or string.
    public init?(json: JSON) {
        switch json {
        case .integer, .number:
            guard let n = json.uint64Value else { return nil }
            self.init(n)
        case .string(let s): self.init(s)
        default: return nil
        }
    }

    /// Sent as a string: a backfill, low or `pullHorizon` part is present.
    public var isCompound: Bool { triggeredBy != 0 || low != 0 || pullHorizon != 0 }

    public var description: String {
        let mark = pullHorizon != 0 ? "@\(pullHorizon)" : ""
        if low != 0 { return (triggeredBy != 0 ? "\(low):\(triggeredBy):\(seq)" : "\(low)::\(seq)") + mark }
        return (triggeredBy != 0 ? "\(triggeredBy):\(seq)" : "\(seq)") + mark
    }

    /// This token as handed to a pull that began at purge horizon `horizon` (0: none): marked with it when below it
    /// (`plainSince < horizon`, where a plain token would be refused), else without a mark.
    func marked(pullHorizon horizon: UInt64) -> ChangesSince {
        var t = self
        t.pullHorizon = horizon != 0 && plainSince < horizon ? horizon : 0
        return t
    }

    /// A number when plain, else the compound string.
    public var json: JSON { isCompound ? .string(description) : .number(Double(seq)) }

    /// Every plain sequence up to this one was delivered (a backfill at T has everything below T).
    var plainSince: UInt64 {
        if low != 0 { return low }
        return triggeredBy != 0 ? triggeredBy - 1 : seq
    }
}

/// What a `_changes` request asks for.
public struct ChangesQuery: Sendable {
    public var since: ChangesSince
    /// Most rows returned; 0 means no limit (capped at `Limits.gatewayMaxRows`).
    public var limit: Int
    /// `style=all_docs`: every leaf revision in `changes`, not just the winner.
    public var styleAllDocs: Bool
    public var includeDocs: Bool
    /// Skip deletions and removals.
    public var activeOnly: Bool
    /// `filter=sync_gateway/bychannel&channels=...`: only these channels (intersected with the user's).
    public var channels: Set<String>?
    /// `filter=_doc_ids`: only these documents.
    public var docIDs: Set<String>?
    /// Backfills (whole channels granted after `since`) reach no higher than this (`ChangesPager`: the sequence the
    /// answer started from, so a later page does not send again what an earlier one sent as plain rows); nil: `since`.
    var backfillThrough: UInt64?

    public init(
        since: ChangesSince = .zero, limit: Int = 0, styleAllDocs: Bool = false, includeDocs: Bool = false,
        activeOnly: Bool = false, channels: Set<String>? = nil, docIDs: Set<String>? = nil
    ) {
        self.since = since
        self.limit = limit
        self.styleAllDocs = styleAllDocs
        self.includeDocs = includeDocs
        self.activeOnly = activeOnly
        self.channels = channels
        self.docIDs = docIDs
    }
}

/// One `_changes` row.
public struct ChangeRow: Sendable, Equatable {
    public var seq: ChangesSince
    public var id: String
    /// The winning revision (or with `style=all_docs` every leaf); for a removal, the revision that
    /// removed the document; empty for a `_user/` row.
    public var changes: [RevID]
    public var deleted: Bool
    /// Channels (visible to the reader) the document left at this sequence.
    public var removed: [String]
    public var doc: JSON?

    public init(
        seq: ChangesSince, id: String, changes: [RevID], deleted: Bool = false, removed: [String] = [],
        doc: JSON? = nil
    ) {
        self.seq = seq
        self.id = id
        self.changes = changes
        self.deleted = deleted
        self.removed = removed
        self.doc = doc
    }

    /// `{"seq", "id", "deleted"?, "removed"?, "doc"?, "changes": [{"rev"}...]}`.
    public var json: JSON {
        var m: [(String, JSON)] = [("seq", seq.json), ("id", .string(id))]
        if deleted { m.append(("deleted", .bool(true))) }
        if !removed.isEmpty { m.append(("removed", .array(removed.map { .string($0) }))) }
        if let doc { m.append(("doc", doc)) }
        m.append(("changes", .array(changes.map { .object([("rev", .string($0.description))]) })))
        return .object(m)
    }
}

/// One `_changes` answer: rows in sequence order and the `last_seq` to pass as the next `since`.
public struct ChangesPage: Sendable {
    public var rows: [ChangeRow]
    public var lastSeq: ChangesSince
    /// Rows still needing their `include_docs` body (sorted by row), read as the rows are written.
    var bodyReads: [BodyRead] = []
    /// The stable sequence the page was read at (or the `through` it was capped at).
    var stable: UInt64 = 0
    /// More rows follow these (the page was cut at its query's limit); `lastSeq` is then the last row's.
    var truncated = false

    public init(rows: [ChangeRow], lastSeq: ChangesSince) {
        self.rows = rows
        self.lastSeq = lastSeq
    }

    /// `{"results": [...], "last_seq": "N"}` (`last_seq` always a string, as Sync Gateway sends it).
    public var json: JSON {
        .object([("results", .array(rows.map(\.json))), ("last_seq", .string(lastSeq.description))])
    }
}

/// What an `_all_docs` request asks for.
public struct AllDocsQuery: Sendable {
    /// Exactly these ids, in this order (missing and forbidden ones as error rows).
    public var keys: [String]?
    public var startKey: String?
    public var endKey: String?
    /// 0: no limit.
    public var limit: Int
    public var skip: Int
    public var includeDocs: Bool
    /// Add `value.channels`.
    public var channels: Bool
    /// Add `value.access` (admin only).
    public var access: Bool
    /// With `include_docs`: add `_revisions` to each doc.
    public var revs: Bool
    /// Add each row's `update_seq`.
    public var updateSeq: Bool

    public init(
        keys: [String]? = nil, startKey: String? = nil, endKey: String? = nil, limit: Int = 0, skip: Int = 0,
        includeDocs: Bool = false, channels: Bool = false, access: Bool = false, revs: Bool = false,
        updateSeq: Bool = false
    ) {
        self.keys = keys
        self.startKey = startKey
        self.endKey = endKey
        self.limit = limit
        self.skip = skip
        self.includeDocs = includeDocs
        self.channels = channels
        self.access = access
        self.revs = revs
        self.updateSeq = updateSeq
    }
}

/// One answer of `open_revs`: the revision's body, or the revision the document does not have.
public enum OpenRev: Sendable, Equatable {
    case ok(JSON)
    case missing(RevID)

    /// `{"ok": body}` or `{"missing": "rev"}` (the JSON form of `open_revs`).
    public var json: JSON {
        switch self {
        case .ok(let body): return .object([("ok", body)])
        case .missing(let rev): return .object([("missing", .string(rev.description))])
        }
    }
}
