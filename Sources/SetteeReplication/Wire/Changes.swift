import SetteeCore
import SetteeJSON

/// How a `_changes` request waits: `normal` answers what is there now; `longpoll` waits for the first
/// change (or the timeout) when there is none; `continuous` streams one row per line.
public enum ChangesFeedKind: String, Sendable, Equatable {
    case normal, longpoll, continuous
}

/// What part of the source a replication covers.
public enum ReplicationFilter: Sendable, Equatable, Hashable {
    /// `filter=_doc_ids` (the ids travel in a POST body).
    case docIDs([String])
    /// Sync Gateway's `filter=sync_gateway/bychannel&channels=a,b`.
    case channels([String])
    /// Any other named filter with its query parameters (in a stable order for the replication id).
    case named(String, parameters: [String: String])

    /// The filter name sent as `filter=`.
    public var name: String {
        switch self {
        case .docIDs: return "_doc_ids"
        case .channels: return "sync_gateway/bychannel"
        case .named(let n, _): return n
        }
    }

    /// Canonical text of the filter and its parameters (feeds the replication id).
    public var canonical: String {
        switch self {
        case .docIDs(let ids): return "_doc_ids:" + JSON.array(ids.sorted().map(JSON.string)).text
        case .channels(let c): return "bychannel:" + JSON.array(c.sorted().map(JSON.string)).text
        case .named(let n, let p):
            return n + ":" + JSON.object(p.sorted { $0.key < $1.key }.map { ($0.key, JSON.string($0.value)) }).text
        }
    }
}

/// A sequence as the source sent it, kept opaque: a number (`12`) or a string (`"5:12"`, `"5::12"`,
/// CouchDB's `"12-g1AAAA..."`). It is only ever echoed back as `since` or stored in a checkpoint.
public struct SequenceID: Sendable, Equatable, CustomStringConvertible {
    public var json: JSON

    public init(_ json: JSON) { self.json = json }
    public init(_ n: Int) { self.json = .number(Double(n)) }

    /// The `since=` query value: a number's digits or the string's text.
    public var description: String {
        switch json {
        case .string(let s): return s
        case .integer, .number: return json.text
        default: return json.text
        }
    }

    /// The zero sequence (a full replication).
    public static let zero = SequenceID(.number(0))

    /// Whether a peer's sequence is one the replicator keeps (in memory and in its checkpoints): a number, or a
    /// string, array or object within `ReplicationLimits.maxSequenceBytes` serialized and `maxSequenceDepth`
    /// levels. A peer's `last_seq` of 126 nested arrays was stored three levels deeper in the checkpoint, which then
    /// failed the depth bound on every read: the replication could not start again.
    public var isAcceptable: Bool {
        switch json {
        case .integer, .number: return true
        case .string(let s): return s.utf8.count <= ReplicationLimits.maxSequenceBytes
        case .array, .object:
            let bytes = json.serialized()
            return bytes.count <= ReplicationLimits.maxSequenceBytes
                && (try? JSON.parse(bytes, maxDepth: ReplicationLimits.maxSequenceDepth)) != nil
        default: return false
        }
    }
}

/// One `_changes` row.
public struct ChangeRow: Sendable, Equatable {
    public var seq: SequenceID
    public var id: String
    /// Leaf revisions (`style=all_docs`) or just the winner.
    public var revs: [String]
    public var deleted: Bool
    /// Sync Gateway: channels the document left at this sequence.
    public var removed: [String]

    public init(seq: SequenceID, id: String, revs: [String], deleted: Bool = false, removed: [String] = []) {
        self.seq = seq
        self.id = id
        self.revs = revs
        self.deleted = deleted
        self.removed = removed
    }

    /// Parses a row; nil when it has no `id` or `seq` (CouchDB's `last_seq` line in a continuous feed).
    public init?(json: JSON) {
        guard let seq = json["seq"], let id = json["id"]?.stringValue else { return nil }
        self.seq = SequenceID(seq)
        self.id = id
        revs = (json["changes"]?.arrayValue ?? []).compactMap { $0["rev"]?.stringValue }
        deleted = json["deleted"]?.boolValue ?? false
        removed = (json["removed"]?.arrayValue ?? []).compactMap(\.stringValue)
        // A `doc` is not kept: the replicator never asks for `include_docs`, and a peer sending one anyway made
        // every row of a batch hold a document.
    }

    public func json() -> JSON {
        var o: [(String, JSON)] = [("seq", seq.json), ("id", .string(id))]
        o.append(("changes", .array(revs.map { .object([("rev", .string($0))]) })))
        if deleted { o.append(("deleted", .bool(true))) }
        if !removed.isEmpty { o.append(("removed", .array(removed.map(JSON.string)))) }
        return .object(o)
    }

    /// Sync Gateway's pseudo rows for user-record changes (`_user/jane`, no revisions): not documents.
    public var isUserRow: Bool { id.hasPrefix("_user/") }
}

/// One answer of `_changes`: rows in feed order and the sequence to ask `since` next.
public struct ChangesBatch: Sendable, Equatable {
    public var rows: [ChangeRow]
    /// `last_seq`, or the last row's seq when the feed gives none; nil when neither exists.
    public var lastSeq: SequenceID?

    public init(rows: [ChangeRow], lastSeq: SequenceID?) {
        self.rows = rows
        self.lastSeq = lastSeq ?? rows.last?.seq
    }

    /// Parses a normal/longpoll answer `{"results":[...],"last_seq":...}`.
    public init(json: JSON) throws(ReplicationError) {
        guard let results = json["results"]?.arrayValue else {
            throw ReplicationError.badResponse("_changes answer has no results")
        }
        self.init(rows: results.compactMap(ChangeRow.init(json:)), lastSeq: json["last_seq"].map(SequenceID.init))
        try checkSequences()
    }

    /// Refuses a peer's answer naming a sequence the replicator cannot keep (`SequenceID.isAcceptable`).
    public func checkSequences() throws(ReplicationError) {
        if let bad = rows.first(where: { !$0.seq.isAcceptable }) {
            throw ReplicationError.badResponse("_changes row \(LogText.quoted(bad.id)) has an unusable seq")
        }
        if let lastSeq, !lastSeq.isAcceptable { throw ReplicationError.badResponse("_changes last_seq is unusable") }
    }

    /// Parses a continuous feed's lines (one JSON row per line; blank heartbeat lines; an optional final
    /// `{"last_seq":...}` line).
    public init(continuousLines text: [UInt8]) throws(ReplicationError) {
        var rows: [ChangeRow] = []
        var last: SequenceID?
        for line in text.split(separator: 0x0A) {
            guard line.contains(where: { $0 != 0x20 && $0 != 0x0D && $0 != 0x09 }) else { continue }
            let value: JSON
            do { value = try JSON.parse(Array(line)) } catch { throw ReplicationError.badResponse("\(error)") }
            if let row = ChangeRow(json: value) {
                rows.append(row)
            } else if let seq = value["last_seq"] {
                last = SequenceID(seq)
            }
        }
        self.init(rows: rows, lastSeq: last)
        try checkSequences()
    }

    public func json() -> JSON {
        var o: [(String, JSON)] = [("results", .array(rows.map { $0.json() }))]
        if let lastSeq { o.append(("last_seq", lastSeq.json)) }
        return .object(o)
    }
}
