import Crypto
import SetteeBLIP
import SetteeCore
import SetteeJSON

/// The replication messages' bodies and properties as the client side of the BLIP replication protocol reads and
/// writes them (couchbase-lite-core `modules/docs/pages/replication-protocol.adoc`, §3 Message Types). Pure: no
/// connection, no database. Everything read here comes from the peer, so nothing traps on its bytes: a malformed
/// message is a `ReplicationError.badResponse` (the message's answer is then an error).
public enum BLIPReplicationWire {
    /// The `client` property of `getCheckpoint`/`setCheckpoint` (§getCheckpoint): `cp-` and the base64 SHA-1 of the
    /// replication id, the shape Couchbase Lite sends.
    public static func checkpointClient(_ replicationID: String) -> String {
        "cp-" + Base64.encode(Array(Insecure.SHA1.hash(data: Array(replicationID.utf8))))
    }

    /// A `since` or `sequence` property: the sequence JSON-encoded (§subChanges: a string sequence travels quoted).
    public static func encodedSequence(_ seq: SequenceID) -> String { seq.json.text }

    /// A `since` the replicator names by its text (`SequenceID.description`): digits are a number, anything else a
    /// string, JSON-encoded.
    public static func encodedSince(_ since: String) -> String {
        Int(since) != nil ? since : JSON.string(since).text
    }

    // MARK: changes (§changes)

    /// One entry of a `changes` body, `[sequence, docID, revID, deleted?, bodySize?]`.
    public struct Change: Sendable, Equatable {
        public var seq: SequenceID
        public var id: String
        public var rev: String
        public var deleted: Bool
        /// Sync Gateway's flags beyond deletion (2: revoked, 4: removed from the user's channels): not a revision to
        /// pull.
        public var removed: Bool
    }

    /// Parses a `changes` request body (an array of change arrays; an empty array says "caught up").
    public static func parseChanges(_ body: [UInt8]) throws(ReplicationError) -> [Change] {
        if body.isEmpty { return [] }
        let json: JSON
        do { json = try JSON.parse(body) } catch { throw .badResponse("changes body: \(error)") }
        guard let items = json.arrayValue else { throw .badResponse("changes body is not an array") }
        var out: [Change] = []
        out.reserveCapacity(items.count)
        for item in items {
            guard let a = item.arrayValue, a.count >= 3, let id = a[1].stringValue, let rev = a[2].stringValue,
                !id.isEmpty, !rev.isEmpty
            else { throw .badResponse("changes entry is not [seq, docID, revID, ...]") }
            let seq = SequenceID(a[0])
            guard seq.isAcceptable else {
                throw .badResponse("changes entry for \(LogText.quoted(id)) has an unusable seq")
            }
            var deleted = false
            var removed = false
            if a.count > 3 {
                if let b = a[3].boolValue {
                    deleted = b
                } else if let flags = a[3].intValue {
                    deleted = flags & 1 != 0
                    removed = flags & 6 != 0
                }
            }
            out.append(Change(seq: seq, id: id, rev: rev, deleted: deleted, removed: removed))
        }
        return out
    }

    /// The answer to a `changes` request: per change, the revisions known of a wanted one (an array, empty when
    /// none) or 0 for one not wanted; trailing zeros left out, so nothing wanted is `[]`.
    public static func changesAnswer(_ changes: [Change], wanted: [String: [String]]) -> [UInt8] {
        var entries: [JSON] = changes.map { c in
            guard let known = wanted[key(c.id, c.rev)] else { return .integer(0) }
            return .array(known.map(JSON.string))
        }
        while let last = entries.last, last == .integer(0) { entries.removeLast() }
        return JSON.array(entries).serialized()
    }

    /// `id NUL rev`: one revision as a dictionary key.
    static func key(_ id: String, _ rev: String) -> String { id + "\u{0}" + rev }

    // MARK: proposeChanges (§proposeChanges)

    /// One proposed revision: `[docID, revID, serverRevID, bodySize]`; `serverRev` empty for a document the
    /// server is not known to have.
    public struct Proposal: Sendable, Equatable {
        public var id: String
        public var rev: String
        public var serverRev: String
        public var bodySize: Int?

        public init(id: String, rev: String, serverRev: String = "", bodySize: Int? = nil) {
            self.id = id
            self.rev = rev
            self.serverRev = serverRev
            self.bodySize = bodySize
        }
    }

    public static func proposeChangesBody(_ proposals: [Proposal]) -> [UInt8] {
        JSON.array(
            proposals.map { p in
                var a: [JSON] = [.string(p.id), .string(p.rev), .string(p.serverRev)]
                if let size = p.bodySize { a.append(.int(size)) }
                return .array(a)
            }
        ).serialized()
    }

    /// The server's word on one proposed revision.
    public enum ProposalAnswer: Sendable, Equatable {
        /// 0: send it.
        case send
        /// 304: the server has it.
        case known
        /// 409: the server's current revision is another one (named with `conflictIncludesRev`).
        case conflict(serverRev: String?)
        /// Any other status (403: no write access, ...).
        case refused(status: Int)
    }

    /// Parses a `proposeChanges` answer for `count` proposals: numbers, `{"status":409,"rev":…}` objects with
    /// `conflictIncludesRev`; missing trailing entries are 0 (send).
    public static func parseProposalAnswer(_ body: [UInt8], count: Int) throws(ReplicationError) -> [ProposalAnswer] {
        var entries: [JSON] = []
        if !body.isEmpty {
            let json: JSON
            do { json = try JSON.parse(body) } catch { throw .badResponse("proposeChanges answer: \(error)") }
            guard let a = json.arrayValue else { throw .badResponse("proposeChanges answer is not an array") }
            entries = a
        }
        guard entries.count <= count else { throw .badResponse("proposeChanges answer has more entries than asked") }
        return (0..<count).map { i in
            guard i < entries.count else { return .send }
            let e = entries[i]
            let status = e.intValue ?? e["status"]?.intValue ?? (e.isNull ? 0 : 400)
            switch status {
            case 0: return .send
            case 304: return .known
            case 409: return .conflict(serverRev: e["rev"]?.stringValue)
            default: return .refused(status: status)
            }
        }
    }

    // MARK: rev (§rev)

    /// The generation of a revision id (`3-abc` → 3); nil when it has none.
    static func generation(_ rev: String) -> Int? {
        guard let dash = rev.firstIndex(of: "-"), let n = Int(rev[..<dash]), n > 0 else { return nil }
        return n
    }

    /// A `rev` request for a revision read from the local database (`_revisions`, `_deleted`, `_attachments` with
    /// bytes marked `follows`): properties `id`, `rev`, `sequence`, `history` (the ancestors, newest first),
    /// `deleted`, `noconflicts`; the body the document's own properties with every attachment as a stub naming its
    /// digest. The bytes of the attachments are returned by digest, for the server's `getAttachment` and
    /// `proveAttachment`.
    ///
    /// With `deltaSource` (a revision the server has, and its local body), a live revision's body goes as a JSON
    /// delta against that body as a `rev` would carry it (`deltaSrc`, ADR 0125) when the delta is smaller.
    public static func revRequest(
        _ revision: FetchedRevision, sequence: SequenceID?, deltaSource: (rev: String, body: JSON)? = nil
    ) -> (message: BLIPMessage, attachments: [String: [UInt8]]) {
        var props: [(name: String, value: String)] = [
            (name: "Profile", value: "rev"), (name: "id", value: revision.id), (name: "rev", value: revision.rev),
        ]
        if let sequence { props.append((name: "sequence", value: encodedSequence(sequence))) }
        let history = historyRevs(revision.body["_revisions"]).dropFirst()
        if !history.isEmpty { props.append((name: "history", value: history.joined(separator: ","))) }
        if revision.isDeleted { props.append((name: "deleted", value: "1")) }
        props.append((name: "noconflicts", value: "1"))
        var bytes: [String: [UInt8]] = [:]
        for (name, entry) in revision.body["_attachments"]?.objectValue ?? [] {
            if let data = revision.attachments[name], let digest = entry["digest"]?.stringValue { bytes[digest] = data }
        }
        let members = sentMembers(of: revision.body)
        var body = JSON.object(members).serialized()
        if let source = deltaSource, !revision.isDeleted,
            let delta = BLIPDeltaSync.delta(from: source.body, to: members, whole: body)
        {
            body = delta
            props.append((name: "deltaSrc", value: source.rev))
        }
        let message = BLIPMessage(compressed: body.count >= compressionThreshold, properties: props, body: body)
        return (message, bytes)
    }

    /// A CouchDB-shaped revision body as a `rev` carries it: the document's own properties, `_attachments` as stubs
    /// (no `data`, no `follows`, `stub: true`); `_id`, `_rev`, `_revisions`, `_deleted` travel as properties.
    public static func sentMembers(of body: JSON) -> [(String, JSON)] {
        var members: [(String, JSON)] = []
        for (k, v) in body.objectValue ?? [] {
            switch k {
            case "_id", "_rev", "_revisions", "_deleted": continue
            case "_attachments":
                var stubs: [(String, JSON)] = []
                for (name, var entry) in v.objectValue ?? [] {
                    entry.set("follows", nil)
                    entry.set("data", nil)
                    entry.set("stub", .bool(true))
                    stubs.append((name, entry))
                }
                members.append((k, .object(stubs)))
            default: members.append((k, v))
            }
        }
        return members
    }

    /// `sentMembers(of:)` of a live revision; nil for a tombstone or a removal stub (no body to patch).
    public static func sentMembers(ofLive body: JSON) -> [(String, JSON)]? {
        if body["_deleted"]?.boolValue == true || body["_removed"]?.boolValue == true { return nil }
        return sentMembers(of: body)
    }

    /// A `rev` request whose body is a JSON delta (`deltaSrc`), made whole: the delta applied to `source`, the body
    /// of that revision (CouchDB-shaped, read from the local database), as it travels (`sentMembers`). The request
    /// comes back without `deltaSrc`, as if the server had sent the revision whole.
    /// - Throws: `ReplicationError.badResponse` for a delta that is not JSON or does not apply (Couchbase Lite's
    ///   corrupt delta), or a source that is a tombstone.
    public static func applyDelta(_ message: BLIPMessage, source: JSON) throws(ReplicationError) -> BLIPMessage {
        guard let base = sentMembers(ofLive: source) else { throw .badResponse("delta source is a tombstone") }
        let delta: JSON
        do { delta = try JSON.parse(message.body) } catch { throw .badResponse("delta body: \(error)") }
        let body: JSON
        do { body = try JSONDelta.apply(delta, to: .object(base)) } catch { throw .badResponse("\(error)") }
        var whole = message
        whole.properties.removeAll { $0.name == "deltaSrc" }
        whole.body = body.serialized()
        return whole
    }

    /// Bodies at least this long travel compressed (small ones grow under deflate).
    static let compressionThreshold = 128

    /// `["3-c", "2-b", "1-a"]` from `{"start":3,"ids":["c","b","a"]}`; empty when malformed.
    static func historyRevs(_ revisions: JSON?) -> [String] {
        guard let start = revisions?["start"]?.intValue, start > 0, let ids = revisions?["ids"]?.arrayValue else {
            return []
        }
        var out: [String] = []
        for (i, id) in ids.enumerated() {
            guard let digest = id.stringValue, start - i > 0 else { break }
            out.append("\(start - i)-\(digest)")
        }
        return out
    }

    /// A `rev` request the server sent, before its attachments are fetched.
    public struct IncomingRevision: Sendable, Equatable {
        public var id: String
        public var rev: String
        /// The revision asked for, when the server sent a newer one instead (`sendReplacementRevs`).
        public var replacedRev: String?
        /// The CouchDB body: the document's properties, `_id`, `_rev`, `_deleted` when a tombstone, `_revisions`
        /// (the revision and its `history`, as far as generations run on without a gap), `_attachments` as sent.
        public var body: JSON
    }

    /// Reads a `rev` request: `id`/`rev`/`deleted` from the properties or the body (§rev), `history` as
    /// `_revisions`. Refuses a revision id without a generation, a history that is not strictly older, and a body
    /// that is not a JSON object.
    public static func parseRev(_ message: BLIPMessage) throws(ReplicationError) -> IncomingRevision {
        let json: JSON
        do { json = message.body.isEmpty ? .object([]) : try JSON.parse(message.body) } catch {
            throw .badResponse("rev body: \(error)")
        }
        guard let members = json.objectValue else { throw .badResponse("rev body is not an object") }
        guard let id = message["id"] ?? json["_id"]?.stringValue, !id.isEmpty,
            let rev = message["rev"] ?? json["_rev"]?.stringValue, let gen = generation(rev)
        else { throw .badResponse("rev without a document id or a revision id") }
        let deleted =
            message["deleted"].map { $0 == "1" || $0 == "true" } ?? json["_deleted"]?.boolValue ?? false
        var ids: [JSON] = [.string(String(rev.drop { $0 != "-" }.dropFirst()))]
        var expected = gen - 1
        for h in (message["history"] ?? "").split(separator: ",") where expected > 0 {
            let text = h.trimmingPrefixSpaces()
            guard let g = generation(text) else { throw .badResponse("rev \(id): bad history entry") }
            if g != expected { break }  // a gap: `_revisions` can only say consecutive generations
            ids.append(.string(String(text.drop { $0 != "-" }.dropFirst())))
            expected -= 1
        }
        var body: [(String, JSON)] = [("_id", .string(id)), ("_rev", .string(rev))]
        if deleted { body.append(("_deleted", .bool(true))) }
        body.append(("_revisions", .object([("start", .int(gen)), ("ids", .array(ids))])))
        for (k, v) in members where !["_id", "_rev", "_deleted", "_revisions"].contains(k) { body.append((k, v)) }
        return IncomingRevision(id: id, rev: rev, replacedRev: message["replacedRev"], body: .object(body))
    }

    // MARK: checkpoints (§getCheckpoint, §setCheckpoint)

    /// The checkpoint body Couchbase Lite keeps on the server: `{"local":N}` for a push (the local sequence pushed
    /// up to), `{"remote":M}` for a pull (the server's sequence pulled up to).
    public static func checkpointBody(key: String, sequence: SequenceID) -> [UInt8] {
        JSON.object([(key, sequence.json)]).serialized()
    }

    // MARK: attachments (§proveAttachment)

    /// `proveAttachment`'s proof: SHA-1 over the nonce's length (one byte), the nonce and the attachment, as
    /// `sha1-` and base64 (an attachment digest's encoding).
    public static func attachmentProof(nonce: [UInt8], attachment: [UInt8]) -> String {
        var h = Insecure.SHA1()
        h.update(data: [UInt8(truncatingIfNeeded: nonce.count)])
        h.update(data: nonce)
        h.update(data: attachment)
        return "sha1-" + Base64.encode(Array(h.finalize()))
    }

    /// An attachment digest of `bytes` (`sha1-` base64, as Couchbase Lite and Sync Gateway name attachments).
    public static func digest(of bytes: [UInt8]) -> String {
        "sha1-" + Base64.encode(Array(Insecure.SHA1.hash(data: bytes)))
    }

    /// The error a BLIP error answer stands for: `HTTP` domain codes as their status, others as 502 (a peer that
    /// failed the exchange) with the domain in the reason.
    public static func error(of answer: BLIPMessage) -> ReplicationError {
        let code = answer["Error-Code"].flatMap { Int($0) } ?? 500
        let text = String(decoding: answer.body.prefix(1024), as: UTF8.self)
        if answer["Error-Domain"] == "HTTP" || answer["Error-Domain"] == nil {
            return .http(status: code, error: CouchError.couchName(code), reason: text)
        }
        if answer["Error-Domain"] == "BLIP" && code == 404 {
            return .http(status: 404, error: "not_found", reason: "peer does not handle the request: \(text)")
        }
        return .http(status: 502, error: "bad_gateway", reason: "\(answer["Error-Domain"] ?? "") \(code): \(text)")
    }
}

extension Substring {
    fileprivate func trimmingPrefixSpaces() -> String { String(self.drop { $0 == " " }) }
}
