import Crypto
import SetteeCore
import SetteeJSON

/// The replication log kept as `_local/<replication id>` on both source and target (CouchDB's shape):
/// ```
/// {"_rev":"0-3","session_id":"…","source_last_seq":42,"replication_id_version":3,
///  "history":[{"session_id":"…","recorded_seq":42,"docs_read":10,"docs_written":9,"doc_write_failures":1},…]}
/// ```
/// `history` is newest first and bounded (`ReplicationLimits.checkpointHistory`).
public struct ReplicationCheckpoint: Sendable, Equatable {
    public struct Entry: Sendable, Equatable {
        public var sessionID: String
        public var recordedSeq: SequenceID
        public var docsRead: Int
        public var docsWritten: Int
        public var docWriteFailures: Int

        public init(
            sessionID: String, recordedSeq: SequenceID, docsRead: Int = 0, docsWritten: Int = 0,
            docWriteFailures: Int = 0
        ) {
            self.sessionID = sessionID
            self.recordedSeq = recordedSeq
            self.docsRead = docsRead
            self.docsWritten = docsWritten
            self.docWriteFailures = docWriteFailures
        }
    }

    public static let version = 3

    public var sessionID: String
    public var sourceLastSeq: SequenceID
    public var history: [Entry]
    /// The `_local` document's revision as last read or written (`0-N`), sent back to avoid a 409.
    public var rev: String?

    public init(sessionID: String, sourceLastSeq: SequenceID, history: [Entry] = [], rev: String? = nil) {
        self.sessionID = sessionID
        self.sourceLastSeq = sourceLastSeq
        self.history = history
        self.rev = rev
    }

    /// Reads a `_local` document; nil when it is not a checkpoint this code understands.
    public init?(json: JSON) {
        guard let session = json["session_id"]?.stringValue, let last = json["source_last_seq"] else { return nil }
        sessionID = session
        sourceLastSeq = SequenceID(last)
        rev = json["_rev"]?.stringValue
        history = (json["history"]?.arrayValue ?? []).compactMap { h in
            guard let s = h["session_id"]?.stringValue, let seq = h["recorded_seq"] else { return nil }
            return Entry(
                sessionID: s, recordedSeq: SequenceID(seq), docsRead: h["docs_read"]?.intValue ?? 0,
                docsWritten: h["docs_written"]?.intValue ?? 0, docWriteFailures: h["doc_write_failures"]?.intValue ?? 0)
        }
    }

    /// The document body to PUT (with `_rev` when known).
    public func json() -> JSON {
        var o: [(String, JSON)] = []
        if let rev { o.append(("_rev", .string(rev))) }
        o.append(("session_id", .string(sessionID)))
        o.append(("source_last_seq", sourceLastSeq.json))
        o.append(("replication_id_version", .number(Double(Self.version))))
        o.append(
            (
                "history",
                .array(
                    history.map { h in
                        .object([
                            ("session_id", .string(h.sessionID)), ("recorded_seq", h.recordedSeq.json),
                            ("docs_read", .number(Double(h.docsRead))),
                            ("docs_written", .number(Double(h.docsWritten))),
                            ("doc_write_failures", .number(Double(h.docWriteFailures))),
                        ])
                    })
            ))
        return .object(o)
    }

    /// This log after recording `seq` in session `entry.sessionID`: the session's history entry is
    /// replaced (newest first), older ones kept up to the bound.
    public func recording(_ entry: Entry) -> ReplicationCheckpoint {
        var next = self
        next.sessionID = entry.sessionID
        next.sourceLastSeq = entry.recordedSeq
        next.history.removeAll { $0.sessionID == entry.sessionID }
        next.history.insert(entry, at: 0)
        if next.history.count > ReplicationLimits.checkpointHistory {
            next.history.removeLast(next.history.count - ReplicationLimits.checkpointHistory)
        }
        return next
    }

    /// Where a replication resumes (CouchDB's "compare replication logs"): the source's `source_last_seq`
    /// when both logs end in the same session at the same seq; else the `recorded_seq` of the newest session both
    /// histories share, when both recorded the same one; else nil (start from scratch). A log on one side only proves
    /// nothing. One session writes its log several times: a side that lost its last writes (a power loss) keeps an
    /// earlier seq of the same session, and resuming at the other side's would skip what lies between.
    public static func startSequence(source: ReplicationCheckpoint?, target: ReplicationCheckpoint?) -> SequenceID? {
        guard let source, let target else { return nil }
        if source.sessionID == target.sessionID && source.sourceLastSeq == target.sourceLastSeq {
            return source.sourceLastSeq
        }
        let targetSessions = Dictionary(target.history.map { ($0.sessionID, $0) }, uniquingKeysWith: { a, _ in a })
        for entry in source.history {
            if let t = targetSessions[entry.sessionID] {
                // Both recorded this session; the smaller claim is the safe one, and both sides wrote the
                // same seq for it unless one write failed.
                return t.recordedSeq == entry.recordedSeq ? entry.recordedSeq : nil
            }
        }
        return nil
    }
}

/// A replication's stable identity, naming its checkpoint documents: the same source, target, direction,
/// filter and filter parameters always give the same id; credentials never count (a new password must
/// not restart a replication).
public enum ReplicationID {
    /// Hex SHA-256 (first 32 digits) of the canonical description.
    public static func make(source: String, target: String, filter: ReplicationFilter?) -> String {
        var text = "settee-replication-v\(ReplicationCheckpoint.version)\n"
        text += stripCredentials(source) + "\n" + stripCredentials(target) + "\n"
        text += filter?.canonical ?? ""
        let digest = SHA256.hash(data: Array(text.utf8))
        return digest.map { b in
            let s = String(b, radix: 16)
            return s.count == 1 ? "0" + s : s
        }.joined().prefix(32).description
    }

    /// `http://user:pass@host/db` → `http://host/db`; also drops a trailing slash.
    public static func stripCredentials(_ url: String) -> String {
        var u = url
        if let schemeEnd = afterScheme(u) {
            let rest = u[schemeEnd...]
            let hostEnd = rest.firstIndex(of: "/") ?? rest.endIndex
            if let at = rest[..<hostEnd].lastIndex(of: "@") {
                u = String(u[..<schemeEnd]) + String(rest[rest.index(after: at)...])
            }
        }
        while u.hasSuffix("/") { u.removeLast() }
        return u
    }
}

/// The index just past `://` in a URL, nil when there is none.
func afterScheme(_ url: String) -> String.Index? {
    var i = url.startIndex
    while i < url.endIndex {
        if url[i...].hasPrefix("://") { return url.index(i, offsetBy: 3) }
        if url[i] == "/" { return nil }
        i = url.index(after: i)
    }
    return nil
}
