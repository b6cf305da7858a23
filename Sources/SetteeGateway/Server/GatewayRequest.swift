import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import SetteeCore
import SetteeDocument
import SetteeJSON

/// One request after routing, body decoding and authentication: what every handler reads.
struct GatewayRequest: Sendable {
    let request: Request
    let route: GatewayRoute
    let method: String
    /// Query parameters, percent-decoded (the last one wins when repeated).
    let query: [String: String]
    /// The body, gzip already decoded.
    let body: [UInt8]
    /// True on the admin port.
    let admin: Bool
    /// Who the request runs as: nil on the admin port (no access checks).
    let user: UserContext?
    /// The peer's host (`LoginGuard.sourceHost`), for the login throttle; nil when unknown.
    let source: String?
    let server: GatewayServer
    /// nil for server-level endpoints.
    let db: GatewayDatabase?

    /// Every keyspace of the request's database (the database alone when it has one collection; ADR 0142).
    var keyspaces: [GatewayDatabase] {
        let all = server.allKeyspaces(of: route.db)
        return all.isEmpty ? [database] : all
    }

    var database: GatewayDatabase {
        guard let db else { preconditionFailure("handler for \(route.endpoint) called without a database") }
        return db
    }

    func header(_ name: String) -> String? {
        guard let n = HTTPField.Name(name) else { return nil }
        return request.headers[n]
    }

    var contentType: String? { request.headers[.contentType] }

    /// Whether the client accepts `type` (`Accept` absent, `*/*`, `type/*` or the type itself).
    func accepts(_ type: String) -> Bool { Self.accepts(type, accept: request.headers[.accept]) }

    /// Whether an `Accept` value admits `type`; an absent or empty one admits JSON only. The one check behind every
    /// 406 (handlers, and the responder's for buffered JSON answers).
    static func accepts(_ type: String, accept: String?) -> Bool {
        guard let accept, !accept.isEmpty else { return type == GatewayReply.jsonType }
        let major = type.split(separator: "/").first.map(String.init) ?? type
        for item in accept.split(separator: ",") {
            let media = item.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            guard let media else { continue }
            if media == "*/*" || media == type || media == "\(major)/*" { return true }
        }
        return false
    }

    var acceptsMultipart: Bool {
        guard let accept = request.headers[.accept] else { return false }
        return accept.lowercased().contains("multipart/")
    }

    /// A boolean query parameter (`true`/`false`), `fallback` when absent; 400 for anything else.
    func bool(_ name: String, _ fallback: Bool = false) throws(GatewayError) -> Bool {
        guard let v = query[name] else { return fallback }
        switch v {
        case "true": return true
        case "false": return false
        default: throw .badRequest("Invalid boolean value for \(name): \(v)")
        }
    }

    func int(_ name: String) throws(GatewayError) -> Int? {
        guard let v = query[name] else { return nil }
        guard let n = Int(v), n >= 0 else { throw .badRequest("Invalid integer value for \(name): \(v)") }
        return n
    }

    /// A JSON-valued query parameter (`open_revs=["1-a"]`, `keys=[...]`).
    func jsonQuery(_ name: String) throws(GatewayError) -> JSON? {
        guard let v = query[name] else { return nil }
        do { return try JSON.parse(v, maxValues: GatewayHTTPLimits.maxRequestJSONValues) } catch {
            throw .badRequest("Invalid JSON in \(name)")
        }
    }

    /// The body as JSON; 400 for an empty or malformed one, or one of more than
    /// `GatewayHTTPLimits.maxRequestJSONValues` values.
    func bodyJSON() throws(GatewayError) -> JSON {
        guard !body.isEmpty else { throw .badRequest("Request body is empty") }
        let json: JSON
        do { json = try JSON.parse(body, maxValues: GatewayHTTPLimits.maxRequestJSONValues) } catch {
            throw .badRequest("Invalid JSON: \(error.reason)")
        }
        try Self.checkUTF8(body)
        return json
    }

    /// 400 for a body that parsed but is not UTF-8 (the parser reads invalid bytes as U+FFFD, as Go's decoder does):
    /// stored, the document would not be what the client sent. CouchDB refuses such a body too. Only bodies with a
    /// byte above 0x7F are scanned again (`JSON.isWellFormed`, which checks UTF-8 as RFC 8259 asks).
    static func checkUTF8(_ body: [UInt8]) throws(GatewayError) {
        guard JSON.parsedTextIsUTF8(body) else { throw .badRequest("Invalid JSON: the body is not UTF-8") }
    }

    /// The body as one document: `bodyJSON`, nesting at most `Limits.maxDocumentDepth` (400 beyond, as every other
    /// entry point answers a document that deep).
    func documentJSON() throws(GatewayError) -> JSON {
        guard !body.isEmpty else { throw .badRequest("Request body is empty") }
        let json: JSON
        do {
            json = try JSON.parse(
                body, maxDepth: Limits.maxDocumentDepth, maxValues: GatewayHTTPLimits.maxRequestJSONValues)
        } catch {
            if error.bound == .depth { throw .documentTooDeep }
            throw .badRequest("Invalid JSON: \(error.reason)")
        }
        try Self.checkUTF8(body)
        return json
    }

    /// The body as an object whose member `name` is an array of documents (`_bulk_docs`): the object (with `name`
    /// emptied) and each document, or `.tooDeep` for one nesting deeper than `Limits.maxDocumentDepth`, which
    /// fails alone (`JSON.parse(_:elementsOf:…)`). 400 for a malformed body.
    func bodyDocuments(_ name: String) throws(GatewayError) -> (body: JSON, documents: [JSONElement]) {
        guard !body.isEmpty else { throw .badRequest("Request body is empty") }
        let parsed: (JSON, [JSONElement])
        do throws(JSONError) {
            parsed = try JSON.parse(
                body, elementsOf: name, maxElementDepth: Limits.maxDocumentDepth,
                maxValues: GatewayHTTPLimits.maxRequestJSONValues)
        } catch {
            throw .badRequest("Invalid JSON: \(error.reason)")
        }
        try Self.checkUTF8(body)
        return parsed
    }

    /// A revision id from a query parameter; 400 when malformed.
    func rev(_ name: String = "rev") throws(GatewayError) -> RevID? {
        guard let v = query[name] else { return nil }
        guard let r = RevID(v) else { throw .badRequest("Invalid revision ID") }
        return r
    }

    /// `?rev=`, else the `If-Match` header's revision.
    func parentRev() throws(GatewayError) -> RevID? {
        if let r = try rev() { return r }
        guard var m = request.headers[.ifMatch] else { return nil }
        m = m.trimmingCharacters(in: CharacterSet(charactersIn: "\" "))
        guard let r = RevID(m) else { throw .badRequest("Invalid revision ID") }
        return r
    }

    /// A list of revision ids in JSON (`atts_since=["1-a"]`); 400 when malformed.
    static func revList(_ json: JSON?, name: String) throws(GatewayError) -> [RevID]? {
        guard let json else { return nil }
        guard let items = json.arrayValue else { throw .badRequest("\(name) must be an array of revision IDs") }
        var out: [RevID] = []
        for item in items {
            guard let s = item.stringValue, let r = RevID(s) else {
                throw .badRequest("Invalid revision ID in \(name)")
            }
            out.append(r)
        }
        return out
    }
}
