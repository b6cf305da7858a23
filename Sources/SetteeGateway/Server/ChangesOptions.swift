import SetteeCore
import SetteeJSON

/// The parameters of one `_changes` request, from the query string, a POST body, or the first message
/// of a websocket feed (Sync Gateway's names and rules; query values override body values).
struct ChangesOptions: Sendable {
    enum Feed: String, Sendable { case normal, longpoll, continuous, websocket }

    var feed: Feed = .normal
    var query = ChangesQuery()
    /// Milliseconds between heartbeat newlines; nil for none.
    var heartbeatMs: Int? = nil
    /// Milliseconds a longpoll or continuous feed waits with nothing to send before ending; ignored when a
    /// heartbeat is set (then the feed waits until the client goes away).
    var timeoutMs: Int = GatewayHTTPLimits.changesDefaultTimeoutMs

    /// `s` split at its commas, refused with 413 when it would make more than `GatewayHTTPLimits.maxBulkItems` items,
    /// before any is made: a body's 64 MiB string of `a,a,…` split whole became 32 M substrings and strings (over a
    /// gigabyte) to be deduplicated to one.
    static func commaList(_ s: String, _ name: String) throws(GatewayError) -> [String] {
        guard s.utf8.count(where: { $0 == UInt8(ascii: ",") }) < GatewayHTTPLimits.maxBulkItems else {
            throw .status(413, "Too many \(name) (max \(GatewayHTTPLimits.maxBulkItems))")
        }
        return s.split(separator: ",").map(String.init)
    }

    /// Parses the merged parameters: strings from a query, any JSON from a body.
    static func parse(_ p: [String: JSON]) throws(GatewayError) -> ChangesOptions {
        var o = ChangesOptions()
        if let f = p["feed"] {
            guard let s = f.stringValue, let feed = Feed(rawValue: s) else {
                throw .badRequest("Unknown feed type")
            }
            o.feed = feed
        }
        if let since = p["since"] {
            let parsed: ChangesSince?
            if case .string(let s) = since, s.isEmpty { parsed = .zero } else { parsed = ChangesSince(json: since) }
            guard let parsed else { throw .badRequest("Invalid sequence") }
            o.query.since = parsed
        }
        o.query.limit = try int(p, "limit") ?? 0
        if let style = p["style"] {
            guard let s = style.stringValue, s == "all_docs" || s == "main_only" else {
                throw .badRequest("Invalid style")
            }
            o.query.styleAllDocs = s == "all_docs"
        }
        o.query.includeDocs = try bool(p, "include_docs")
        o.query.activeOnly = try bool(p, "active_only")
        if let hb = try int(p, "heartbeat"), hb > 0 {
            // Capped too: a heartbeat longer than the longest feed never fires, and `Int.max` ms would be
            // added to a clock instant.
            o.heartbeatMs = min(max(hb, GatewayHTTPLimits.changesMinHeartbeatMs), GatewayHTTPLimits.changesMaxTimeoutMs)
        }
        if let t = try int(p, "timeout") {
            o.timeoutMs = min(t, GatewayHTTPLimits.changesMaxTimeoutMs)
        }
        switch p["filter"]?.stringValue {
        case nil:
            break
        case "sync_gateway/bychannel":
            guard let channels = p["channels"] else { throw .badRequest("Missing 'channels' filter parameter") }
            let names: [String]
            switch channels {
            case .string(let s): names = try commaList(s, "channels")
            case .array(let items): names = items.compactMap(\.stringValue)
            default: throw .badRequest("Bad channels parameter")
            }
            let set = Set(names.filter { !$0.isEmpty })
            guard !set.isEmpty else { throw .badRequest("Empty channel list") }
            guard set.count <= GatewayHTTPLimits.maxBulkItems else {
                throw .status(413, "Too many channels (max \(GatewayHTTPLimits.maxBulkItems))")
            }
            o.query.channels = set
        case "_doc_ids":
            guard o.feed == .normal else { throw .badRequest("Filter '_doc_ids' is only supported with feed=normal") }
            guard let ids = p["doc_ids"] else { throw .badRequest("Missing 'doc_ids' filter parameter") }
            switch ids {
            case .array(let items): o.query.docIDs = Set(items.compactMap(\.stringValue))
            case .string(let s):
                if let parsed = try? JSON.parse(s, maxValues: GatewayHTTPLimits.maxRequestJSONValues),
                    let items = parsed.arrayValue
                {
                    o.query.docIDs = Set(items.compactMap(\.stringValue))
                } else {
                    o.query.docIDs = Set(try commaList(s, "doc_ids"))
                }
            default: throw .badRequest("Bad doc_ids parameter")
            }
            // Each id may cost a read of its document (a shared bucket's access check), as `_bulk_get`'s do.
            guard o.query.docIDs?.count ?? 0 <= GatewayHTTPLimits.maxBulkReadDocs else {
                throw .status(413, "Too many doc_ids (max \(GatewayHTTPLimits.maxBulkReadDocs))")
            }
        default:
            throw .badRequest("Unknown filter; try sync_gateway/bychannel or _doc_ids")
        }
        return o
    }

    /// Query-string parameters as JSON strings, over the members of a POST body.
    static func merge(query: [String: String], body: JSON?) -> [String: JSON] {
        var p: [String: JSON] = [:]
        for (k, v) in body?.objectValue ?? [] { p[k] = v }
        for (k, v) in query { p[k] = .string(v) }
        return p
    }

    private static func int(_ p: [String: JSON], _ name: String) throws(GatewayError) -> Int? {
        guard let v = p[name] else { return nil }
        switch v {
        case .integer, .number: if let n = v.intValue, n >= 0 { return n }
        case .string(let s): if let n = Int(s), n >= 0 { return n }
        case .null: return nil
        default: break
        }
        throw .badRequest("Invalid \(name)")
    }

    private static func bool(_ p: [String: JSON], _ name: String) throws(GatewayError) -> Bool {
        switch p[name] {
        case nil, .null?: return false
        case .bool(let b)?: return b
        case .string("true")?: return true
        case .string("false")?: return false
        default: throw .badRequest("Invalid \(name)")
        }
    }
}
