import SetteeCore
import SetteeJSON

/// One revision asked of `_bulk_get` (or `GET doc?open_revs=`).
public struct BulkGetRequest: Sendable, Hashable {
    public var id: String
    public var rev: String
    /// Revisions the receiver already has: attachments unchanged since them may come as stubs, and the
    /// history may stop at them.
    public var attsSince: [String]

    public init(id: String, rev: String, attsSince: [String] = []) {
        self.id = id
        self.rev = rev
        self.attsSince = attsSince
    }

    public func json() -> JSON {
        var o: [(String, JSON)] = [("id", .string(id)), ("rev", .string(rev))]
        if !attsSince.isEmpty { o.append(("atts_since", .array(attsSince.map(JSON.string)))) }
        return .object(o)
    }

    public init?(json: JSON) {
        guard let id = json["id"]?.stringValue, let rev = json["rev"]?.stringValue else { return nil }
        self.init(id: id, rev: rev, attsSince: (json["atts_since"]?.arrayValue ?? []).compactMap(\.stringValue))
    }
}

/// A per-document error (`_bulk_get` error entries, `_bulk_docs` error rows, `{"missing":rev}`).
public typealias RevisionError = CouchError

/// One revision read from a source, normalised whichever way it travelled: `body` is the document
/// (`_id`, `_rev`, `_deleted`?, `_revisions`, `_attachments`), and each attachment whose bytes came along
/// (inline base64 `data` or a MIME part) is in `attachments` with its `_attachments` entry marked
/// `"follows": true`; entries the receiver already has stay `"stub": true`.
public struct FetchedRevision: Sendable, Equatable {
    public var id: String
    public var rev: String
    public var body: JSON
    public var attachments: [String: [UInt8]]
    /// Set when the source could not give this revision (then `body` is `.null`).
    public var error: RevisionError?

    public init(id: String, rev: String, body: JSON, attachments: [String: [UInt8]] = [:]) {
        self.id = id
        self.rev = rev
        self.body = body
        self.attachments = attachments
        self.error = nil
    }

    public init(id: String, rev: String, error: RevisionError) {
        self.id = id
        self.rev = rev
        self.body = .null
        self.attachments = [:]
        self.error = error
    }

    /// A document body as it arrives in JSON: inline `data` is decoded into `attachments` (its entry
    /// then says `follows`), other bytes (from MIME parts) are passed in `parts`.
    /// The revision is `_rev`, or the head of `_revisions` (`"<start>-<ids[0]>"`) when a pushed body carries that
    /// alone, as CouchDB and PouchDB replicators may; whoever stores the body checks the history
    /// (`DocumentBody.replicatedHistory`).
    public init(document: JSON, parts: [String: [UInt8]] = [:]) throws(ReplicationError) {
        guard let id = document["_id"]?.stringValue, let rev = document["_rev"]?.stringValue ?? Self.head(document)
        else {
            throw ReplicationError.badResponse("revision without _id or _rev")
        }
        var body = document
        var atts = parts
        if let entries = document["_attachments"]?.objectValue {
            var normalised: [(String, JSON)] = []
            for (name, var entry) in entries {
                if let data = entry["data"]?.stringValue {
                    guard let bytes = Base64.decode(data) else {
                        throw ReplicationError.badResponse("attachment \(name) of \(id): bad base64")
                    }
                    atts[name] = bytes
                    entry.set("data", nil)
                    entry.set("stub", nil)
                    if entry["length"] == nil, entry["encoding"] == nil {
                        entry.set("length", .number(Double(bytes.count)))
                    }
                    entry.set("follows", .bool(true))
                } else if entry["follows"]?.boolValue == true, atts[name] == nil {
                    throw ReplicationError.badResponse("attachment \(name) of \(id) follows but no part carries it")
                }
                normalised.append((name, entry))
            }
            body.set("_attachments", .object(normalised))
        }
        self.init(id: id, rev: rev, body: body, attachments: atts)
    }

    /// `"<start>-<ids[0]>"` of a body's `_revisions`, unchecked; nil without an integer `start` and a string first id.
    static func head(_ document: JSON) -> String? {
        guard let revisions = document["_revisions"], let start = revisions["start"]?.intValue,
            let digest = revisions["ids"]?.arrayValue?.first?.stringValue
        else { return nil }
        return "\(start)-\(digest)"
    }

    /// The body with every carried attachment inline as base64 `data` (for a JSON `_bulk_docs`).
    public func inlineJSON() -> JSON {
        guard let entries = body["_attachments"]?.objectValue else { return body }
        var out = body
        out.set(
            "_attachments",
            .object(
                entries.map { name, entry in
                    guard let bytes = attachments[name] else { return (name, entry) }
                    var e = entry
                    e.set("follows", nil)
                    e.set("stub", nil)
                    e.set("data", .string(Base64.encode(bytes)))
                    return (name, e)
                }))
        return out
    }

    public var isDeleted: Bool { body["_deleted"]?.boolValue ?? false }
}

/// Readers and writers of the two `_bulk_get` answer shapes and of `open_revs` answers.
public enum BulkGet {
    /// `{"docs":[{"id","rev","atts_since"?},...]}`.
    public static func requestJSON(_ requests: [BulkGetRequest]) -> JSON {
        .object([("docs", .array(requests.map { $0.json() }))])
    }

    /// Parses a request body; entries without `id` are dropped, entries without `rev` ask for the winner.
    public static func parseRequest(_ json: JSON) throws(ReplicationError) -> [(
        id: String, rev: String?, attsSince: [String]
    )] {
        guard let docs = json["docs"]?.arrayValue else {
            throw ReplicationError.badResponse("_bulk_get body has no docs")
        }
        return docs.compactMap { d in
            guard let id = d["id"]?.stringValue else { return nil }
            return (id, d["rev"]?.stringValue, (d["atts_since"]?.arrayValue ?? []).compactMap(\.stringValue))
        }
    }

    /// CouchDB 2's JSON answer: `{"results":[{"id","docs":[{"ok":{...}}|{"error":{...}}]}]}`.
    public static func parseJSONAnswer(_ json: JSON) throws(ReplicationError) -> [FetchedRevision] {
        guard let results = json["results"]?.arrayValue else {
            throw ReplicationError.badResponse("_bulk_get: no results")
        }
        var out: [FetchedRevision] = []
        for result in results {
            let id = result["id"]?.stringValue ?? ""
            for entry in result["docs"]?.arrayValue ?? [] {
                out.append(try revision(fromEntry: entry, id: id))
            }
        }
        return out
    }

    /// An `open_revs` JSON answer: `[{"ok":{...}},{"missing":"rev"}]`.
    public static func parseOpenRevsJSON(_ json: JSON, id: String) throws(ReplicationError) -> [FetchedRevision] {
        guard let entries = json.arrayValue else { throw ReplicationError.badResponse("open_revs answer not an array") }
        var out: [FetchedRevision] = []
        for entry in entries { out.append(try revision(fromEntry: entry, id: id)) }
        return out
    }

    private static func revision(fromEntry entry: JSON, id: String) throws(ReplicationError) -> FetchedRevision {
        if let doc = entry["ok"] { return try FetchedRevision(document: doc) }
        if let missing = entry["missing"]?.stringValue {
            return FetchedRevision(
                id: id, rev: missing, error: RevisionError(status: 404, error: "not_found", reason: "missing"))
        }
        let e = entry["error"] ?? entry
        return FetchedRevision(
            id: e["id"]?.stringValue ?? id, rev: e["rev"]?.stringValue ?? "",
            error: RevisionError(
                status: e["status"]?.intValue ?? 404, error: e["error"]?.stringValue ?? "not_found",
                reason: e["reason"]?.stringValue ?? ""))
    }

    /// Sync Gateway's `multipart/mixed` answer (also `open_revs` with `Accept: multipart/mixed`): one
    /// part per revision, JSON or `multipart/related` (document, then attachment parts), error parts
    /// marked `error="true"` or shaped `{"missing":rev}`.
    public static func parseMultipartAnswer(_ m: Multipart) throws(ReplicationError) -> [FetchedRevision] {
        var out: [FetchedRevision] = []
        for part in m.parts {
            let nested: Multipart?
            do { nested = try part.nested() } catch { throw ReplicationError.badResponse("\(error)") }
            if let nested {
                out.append(try revision(related: nested))
                continue
            }
            let json: JSON
            do { json = try JSON.parse(part.body) } catch { throw ReplicationError.badResponse("part JSON: \(error)") }
            if part.isError || json["error"] != nil || json["missing"] != nil {
                let id = json["id"]?.stringValue ?? part.docID ?? ""
                if let missing = json["missing"]?.stringValue {
                    out.append(
                        FetchedRevision(
                            id: id, rev: missing,
                            error: RevisionError(status: 404, error: "not_found", reason: "missing")))
                } else {
                    out.append(
                        FetchedRevision(
                            id: id, rev: json["rev"]?.stringValue ?? part.revID ?? "",
                            error: RevisionError(
                                status: json["status"]?.intValue ?? json["error"]?.stringValue.flatMap(
                                    RevisionError.status(named:)) ?? 400,
                                error: json["error"]?.stringValue ?? "error",
                                reason: json["reason"]?.stringValue ?? "")))
                }
            } else {
                out.append(try FetchedRevision(document: json))
            }
        }
        return out
    }

    /// A `multipart/related` document: the JSON part first, then one part per `follows` attachment,
    /// matched by `Content-Disposition` filename, else in the order the `_attachments` entries list them.
    public static func revision(related m: Multipart) throws(ReplicationError) -> FetchedRevision {
        guard let first = m.parts.first else { throw ReplicationError.badResponse("empty multipart/related") }
        let doc: JSON
        do { doc = try JSON.parse(first.body) } catch { throw ReplicationError.badResponse("document part: \(error)") }
        let following = (doc["_attachments"]?.objectValue ?? []).filter { $0.1["follows"]?.boolValue == true }.map(\.0)
        var parts: [String: [UInt8]] = [:]
        var unnamed = following.makeIterator()
        for part in m.parts.dropFirst() {
            if let name = part.filename, following.contains(name) {
                parts[name] = part.body
            } else {
                while let name = unnamed.next() {
                    if parts[name] == nil {
                        parts[name] = part.body
                        break
                    }
                }
            }
        }
        return try FetchedRevision(document: doc, parts: parts)
    }

    /// Writes the CouchDB 2 JSON answer (attachments inline), grouping revisions by document in order.
    public static func jsonAnswer(_ revisions: [FetchedRevision]) -> JSON {
        var order: [String] = []
        var byID: [String: [JSON]] = [:]
        for r in revisions {
            if byID[r.id] == nil { order.append(r.id) }
            let entry: JSON
            if let e = r.error {
                entry = .object([
                    ("error", .errorBody(e.error, reason: e.reason, status: e.status, id: r.id, rev: r.rev))
                ])
            } else {
                entry = .object([("ok", r.inlineJSON())])
            }
            byID[r.id, default: []].append(entry)
        }
        return .object([("results", .array(order.map { .object([("id", .string($0)), ("docs", .array(byID[$0]!))]) }))])
    }

    /// Writes Sync Gateway's multipart/mixed answer: JSON parts, `multipart/related` for revisions that
    /// carry attachment bytes, `error="true"` parts for errors.
    public static func multipartAnswer(_ revisions: [FetchedRevision], boundary: String = Multipart.makeBoundary())
        -> Multipart
    {
        var m = Multipart(subtype: "mixed", boundary: boundary)
        for r in revisions {
            let ids: [(name: String, value: String)] = [("X-Doc-ID", r.id), ("X-Rev-ID", r.rev)]
            if let e = r.error {
                let body = JSON.errorBody(e.error, reason: e.reason, status: e.status, id: r.id, rev: r.rev)
                m.parts.append(
                    MultipartPart(
                        headers: [("Content-Type", "application/json; error=\"true\"")] + ids, body: body.serialized()))
            } else if r.attachments.isEmpty {
                m.parts.append(MultipartPart(json: r.body.serialized(), headers: ids))
            } else {
                m.parts.append(MultipartPart(nested: related(r), headers: ids))
            }
        }
        return m
    }

    /// A revision as `multipart/related`: JSON first (carried attachments `follows`), then one part each.
    public static func related(_ r: FetchedRevision, boundary: String = Multipart.makeBoundary()) -> Multipart {
        var m = Multipart(subtype: "related", boundary: boundary, parts: [MultipartPart(json: r.body.serialized())])
        for (name, entry) in r.body["_attachments"]?.objectValue ?? [] {
            guard let bytes = r.attachments[name] else { continue }
            var headers: [(name: String, value: String)] = [
                (
                    "Content-Disposition",
                    MediaType(type: "attachment", subtype: "", parameters: [("filename", name)]).description
                )
            ]
            if let type = entry["content_type"]?.stringValue { headers.append(("Content-Type", type)) }
            if let enc = entry["encoding"]?.stringValue { headers.append(("Content-Encoding", enc)) }
            m.parts.append(MultipartPart(headers: headers, body: bytes))
        }
        return m
    }
}
