import Foundation
import HTTPTypes
import HummingbirdCore
import SetteeCore
import SetteeDocument
import SetteeJSON

/// Documents and attachments: `GET/PUT/DELETE /db/doc`, `POST /db/`, `GET/PUT /db/doc/attachment`.
enum DocumentHandlers {
    /// `GET /db/doc` with `rev`, `revs`, `revs_limit`, `open_revs`, `atts_since`, `attachments`, `latest`.
    static func get(_ r: GatewayRequest) async throws -> GatewayReply {
        let db = r.database
        let id = r.route.id
        let revs = try r.bool("revs")
        let latest = try r.bool("latest")
        let attachments = try r.bool("attachments")
        let attsSince = try GatewayRequest.revList(r.jsonQuery("atts_since"), name: "atts_since")
        let revsLimit = try r.int("revs_limit")
        if let openRevs = r.query["open_revs"] {
            let wanted: [RevID]?
            if openRevs == "all" {
                wanted = nil
            } else {
                let parsed: JSON
                do { parsed = try JSON.parse(openRevs, maxValues: GatewayHTTPLimits.maxRequestJSONValues) } catch {
                    throw GatewayError.badRequest("bad open_revs")
                }
                wanted = try GatewayRequest.revList(parsed, name: "open_revs")
            }
            let results = try await db.openRevs(
                id, revs: wanted, revs: revs, user: r.user, attsSince: attsSince, attachmentBodies: attachments,
                latest: latest)
            let trimmed = results.map { result -> OpenRev in
                if case .ok(let body) = result { return .ok(trimRevisions(body, limit: revsLimit)) }
                return result
            }
            if r.acceptsMultipart && MultipartReplies.available {
                return MultipartReplies.openRevs(trimmed, docID: id)
            }
            return .json(200, .array(trimmed.map(\.json)))
        }
        let (body, data) = try await db.get(
            id, rev: try r.rev(), revs: revs, attsSince: attsSince, attachmentBodies: attachments, user: r.user,
            latest: latest)
        let out = trimRevisions(body, limit: revsLimit)
        var h = HTTPFields()
        if let rev = out["_rev"]?.stringValue { h[.eTag] = "\"\(rev)\"" }
        if attachments, !data.isEmpty, r.acceptsMultipart, MultipartReplies.available {
            return MultipartReplies.document(out, attachments: data, headers: h)
        }
        return .json(200, out, headers: h)
    }

    /// Caps `_revisions.ids` at `revs_limit`.
    static func trimRevisions(_ body: JSON, limit: Int?) -> JSON {
        guard let limit, case .object? = body["_revisions"], let ids = body["_revisions"]?["ids"]?.arrayValue,
            ids.count > limit
        else { return body }
        var revisions = body["_revisions"]!
        revisions.set("ids", .array(Array(ids.prefix(limit))))
        var b = body
        b.set("_revisions", revisions)
        return b
    }

    /// `PUT /db/doc`: JSON or `multipart/related` (JSON part first, then the `follows` attachments).
    /// The parent revision comes from `_rev`, `?rev=` or `If-Match`; `?new_edits=false` grafts `_revisions`.
    static func put(_ r: GatewayRequest) async throws -> GatewayReply {
        let newEdits = try r.bool("new_edits", true)
        var (body, data) = try documentBody(r)
        if body["_rev"] == nil, let parent = try r.parentRev() { body.set("_rev", .string(parent.description)) }
        let rev = try await r.database.put(
            r.route.id, body: body, attachmentData: data, newEdits: newEdits, user: r.user)
        return .ok(201, id: r.route.id, rev: rev.description)
    }

    /// The request's document: a JSON object, or the JSON part of a `multipart/related` body with the
    /// bytes of its `follows` attachments by name. 415 for other content types.
    static func documentBody(_ r: GatewayRequest) throws -> (JSON, [String: [UInt8]]) {
        let type = (r.contentType ?? GatewayReply.jsonType).lowercased()
        if type.hasPrefix("multipart/related") {
            return try MultipartReplies.parseDocument(r.body, contentType: r.contentType ?? "")
        }
        guard type.hasPrefix("application/json") || type.hasPrefix("text/plain") else {
            throw GatewayError.status(415, "Invalid content type \(type)")
        }
        let body = try r.documentJSON()
        guard case .object = body else { throw GatewayError.badRequest("Document body must be a JSON object") }
        return (body, [:])
    }

    /// `DELETE /db/doc?rev=` (or `If-Match`): a tombstone revision.
    static func delete(_ r: GatewayRequest) async throws -> GatewayReply {
        let rev = try await r.database.delete(r.route.id, rev: try r.parentRev(), user: r.user)
        return .ok(200, id: r.route.id, rev: rev.description)
    }

    /// `POST /db/`: a new document, id from `_id` or generated.
    static func post(_ r: GatewayRequest) async throws -> GatewayReply {
        var (body, data) = try documentBody(r)
        if body["_rev"] != nil { throw GatewayError.status(404, "No previous revision to replace") }
        let id = body["_id"]?.stringValue ?? newDocID()
        body.set("_id", nil)
        let rev = try await r.database.put(id, body: body, attachmentData: data, newEdits: true, user: r.user)
        return .ok(200, id: id, rev: rev.description)
    }

    /// 32 random hex digits (Sync Gateway generates random ids too).
    static func newDocID() -> String { RandomID.hex128() }

    /// `GET /db/doc/att?rev=`: the raw bytes with their content type; a single `Range` gives 206.
    static func getAttachment(_ r: GatewayRequest) async throws -> GatewayReply {
        let (info, data) = try await r.database.attachment(
            docID: r.route.id, name: r.route.attachment, rev: try r.rev(), user: r.user)
        var h = HTTPFields()
        h[.eTag] = "\"\(info.digest)\""
        if r.admin { h[.contentDisposition] = "attachment; filename=\"\(r.route.attachment)\"" }
        if let range = r.request.headers[.range], let (lo, hi) = parseRange(range, length: data.count) {
            h[.contentRange] = "bytes \(lo)-\(hi)/\(data.count)"
            return .bytes(206, Array(data[lo...hi]), contentType: info.contentType, headers: h)
        }
        return .bytes(200, data, contentType: info.contentType, headers: h)
    }

    /// `bytes=a-b`, `bytes=a-` or `bytes=-n` within `length`; nil for anything else (whole body sent).
    static func parseRange(_ header: String, length: Int) -> (Int, Int)? {
        guard header.hasPrefix("bytes="), length > 0 else { return nil }
        let spec = header.dropFirst(6)
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return nil }
        let a = spec[..<dash]
        let b = spec[spec.index(after: dash)...]
        if a.isEmpty {
            guard let n = Int(b), n > 0 else { return nil }
            return (max(0, length - n), length - 1)
        }
        guard let lo = Int(a), lo < length else { return nil }
        let hi = b.isEmpty ? length - 1 : min(Int(b) ?? -1, length - 1)
        return hi >= lo ? (lo, hi) : nil
    }

    /// `PUT /db/doc/att?rev=`: a new revision of the document with this attachment (the raw body).
    static func putAttachment(_ r: GatewayRequest) async throws -> GatewayReply {
        let db = r.database
        let id = r.route.id
        let parent = try r.parentRev()
        var body: JSON = .object([])
        if let parent {
            body = try await db.get(id, rev: parent, revs: false, attsSince: nil, attachmentBodies: false, user: r.user)
                .body
            if body["_removed"] != nil { throw GatewayError.status(404, "Document revision is not accessible") }
        } else {
            do {
                _ = try await db.get(id, rev: nil, revs: false, attsSince: nil, attachmentBodies: false, user: r.user)
                throw GatewayError.conflict("Document exists")
            } catch let e as GatewayError where e.status == 404 {
                body = .object([])
            }
        }
        body.set("_id", nil)
        body.set("_revisions", nil)
        if let parent { body.set("_rev", .string(parent.description)) }
        var atts = body["_attachments"] ?? .object([])
        atts.set(
            r.route.attachment,
            .object([
                ("content_type", .string(r.contentType ?? "application/octet-stream")), ("follows", .bool(true)),
            ]))
        body.set("_attachments", atts)
        let rev = try await db.put(
            id, body: body, attachmentData: [r.route.attachment: r.body], newEdits: true, user: r.user)
        return .ok(201, id: id, rev: rev.description)
    }
}
