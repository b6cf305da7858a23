import Foundation
import HTTPTypes
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeReplication

/// Multipart bodies in CouchDB's shapes, over `Multipart` (SetteeReplication): a document with its
/// attachments as `multipart/related` (JSON part first, then one part per `"follows": true`
/// attachment), `open_revs` and `_bulk_get` answers as `multipart/mixed` (one part per revision, a
/// nested `multipart/related` when it carries attachment bodies, `{"missing": rev}` error parts).
enum MultipartReplies {
    static let available = true

    /// A document as `multipart/related`: inline `data` attachments become `follows` parts.
    static func document(_ body: JSON, attachments: [String: [UInt8]], headers: HTTPFields = [:]) -> GatewayReply {
        let related = relatedParts(body, attachments: attachments)
        var h = headers
        h[.contentType] = related.contentType
        return .buffered(status: 200, headers: h, body: related.serialized())
    }

    /// The `multipart/related` form of one revision with attachment bodies.
    static func relatedParts(_ body: JSON, attachments: [String: [UInt8]]) -> Multipart {
        var doc = body
        var files: [MultipartPart] = []
        if case .object(let atts)? = body["_attachments"] {
            var out: [(String, JSON)] = []
            for (name, meta) in atts {
                guard meta["data"] != nil, let bytes = attachments[name] else {
                    out.append((name, meta))
                    continue
                }
                var m = meta
                m.set("data", nil)
                m.set("stub", nil)
                m.set("follows", .bool(true))
                out.append((name, m))
                var h: [(name: String, value: String)] = [
                    (name: "Content-Disposition", value: "attachment; filename=\"\(name)\"")
                ]
                if let type = meta["content_type"]?.stringValue { h.append((name: "Content-Type", value: type)) }
                if let enc = meta["encoding"]?.stringValue { h.append((name: "Content-Encoding", value: enc)) }
                files.append(MultipartPart(headers: h, body: bytes))
            }
            doc.set("_attachments", .object(out))
        }
        return Multipart(subtype: "related", parts: [MultipartPart(json: doc.serialized())] + files)
    }

    /// One `multipart/mixed` part for a revision body (nested `related` when it has attachment bodies).
    static func revisionPart(_ body: JSON) -> MultipartPart {
        var headers: [(name: String, value: String)] = []
        if let id = body["_id"]?.stringValue { headers.append((name: "X-Doc-ID", value: id)) }
        if let rev = body["_rev"]?.stringValue { headers.append((name: "X-Rev-ID", value: rev)) }
        var data: [String: [UInt8]] = [:]
        if case .object(let atts)? = body["_attachments"] {
            for (name, meta) in atts {
                if let b64 = meta["data"]?.stringValue, let bytes = Base64.decode(b64, .strict) {
                    data[name] = bytes
                }
            }
        }
        if data.isEmpty { return MultipartPart(json: body.serialized(), headers: headers) }
        return MultipartPart(nested: relatedParts(body, attachments: data), headers: headers)
    }

    static func errorPart(_ json: JSON) -> MultipartPart {
        MultipartPart(
            headers: [(name: "Content-Type", value: "application/json; error=\"true\"")], body: json.serialized())
    }

    /// `GET /db/doc?open_revs=...` with `Accept: multipart/mixed`.
    static func openRevs(_ results: [OpenRev], docID: String) -> GatewayReply {
        var mixed = Multipart(subtype: "mixed")
        for result in results {
            switch result {
            case .ok(let body): mixed.parts.append(revisionPart(body))
            case .missing: mixed.parts.append(errorPart(result.json))
            }
        }
        var h = HTTPFields()
        h[.contentType] = mixed.contentType
        return .buffered(status: 200, headers: h, body: mixed.serialized())
    }

    /// `_bulk_get` with `Accept: multipart/mixed`: one part per requested revision.
    static func bulkGet(_ results: [(id: String, rev: String?, result: Result<JSON, GatewayError>)]) -> GatewayReply {
        var mixed = Multipart(subtype: "mixed")
        for item in results {
            switch item.result {
            case .success(let body): mixed.parts.append(revisionPart(body))
            case .failure(let e):
                mixed.parts.append(errorPart(e.row(id: item.id, rev: item.rev)))
            }
        }
        var h = HTTPFields()
        h[.contentType] = mixed.contentType
        return .buffered(status: 200, headers: h, body: mixed.serialized())
    }

    /// A `multipart/related` request body: the JSON document and the bytes of its `follows` attachments,
    /// matched by `Content-Disposition` filename, else in the order the document lists them.
    static func parseDocument(_ bytes: [UInt8], contentType: String) throws(GatewayError) -> (JSON, [String: [UInt8]]) {
        let multipart: Multipart
        do { multipart = try Multipart.parse(bytes, contentType: contentType) } catch {
            throw .badRequest(error.description)
        }
        guard let first = multipart.parts.first else { throw .badRequest("Empty multipart body") }
        let doc: JSON
        do {
            doc = try JSON.parse(
                first.body, maxDepth: Limits.maxDocumentDepth, maxValues: GatewayHTTPLimits.maxRequestJSONValues)
        } catch {
            if error.bound == .depth { throw .documentTooDeep }
            throw .badRequest("Invalid JSON in the document part: \(error.reason)")
        }
        guard case .object = doc else { throw .badRequest("Document body must be a JSON object") }
        var following: [String] = []
        if case .object(let atts)? = doc["_attachments"] {
            for (name, meta) in atts where meta["follows"]?.boolValue == true { following.append(name) }
        }
        var data: [String: [UInt8]] = [:]
        var next = following.makeIterator()
        for part in multipart.parts.dropFirst() {
            if let name = part.filename, following.contains(name) {
                data[name] = part.body
            } else if let name = next.next() {
                data[name] = part.body
            }
        }
        for name in following where data[name] == nil {
            throw .badRequest("Missing attachment part for \(name)")
        }
        return (doc, data)
    }
}
