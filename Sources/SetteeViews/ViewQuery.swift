import SetteeCore
import SetteeJSON

/// When a query may answer from the index as it is.
public enum Staleness: String, Sendable {
    /// Answer from the index as it is.
    case ok
    /// Bring the index up to the vBuckets' current seqnos first (read your own writes).
    case `false`
    /// Answer from the index as it is, then start an update (Couchbase's default).
    case updateAfter = "update_after"
}

/// A parsed view query: every parameter of `GET/POST /BUCKET/_design/D/_view/V`.
public struct ViewQuery: Sendable, Equatable {
    public var key: JSON?
    public var keys: [JSON]?
    public var startKey: JSON?
    public var endKey: JSON?
    public var startKeyDocID: String?
    public var endKeyDocID: String?
    public var inclusiveEnd = true
    public var descending = false
    public var limit: Int?
    public var skip = 0
    /// nil = default (reduce when the view has one).
    public var reduce: Bool?
    public var group = false
    public var groupLevel: Int?
    public var includeDocs = false
    public var stale: Staleness = .updateAfter
    /// `on_error=stop`: a failing peer stops the merge (still 200 with `errors`).
    public var onErrorStop = false
    /// Internal: answer from this node's vBuckets only (a coordinator's request to a peer).
    public var localOnly = false
    /// `full_set` (dev views): accepted, no effect here (dev views index all vBuckets).
    public var fullSet = false
    /// `connection_timeout` in ms for peers.
    public var connectionTimeoutMs = 60_000

    public init() {}

    /// Parses query parameters (name → raw value, already percent-decoded). `body` is a POST body
    /// (`{"keys":[...]}` and possibly other parameters), whose members override the query string.
    /// A `keys` list, at most `Limits.viewMaxQueryKeys` long: each listed key is its own index lookup (and, merged
    /// over nodes, its own pass), so a 4 MiB body of keys cost millions of them.
    static func boundedKeys(_ items: [JSON]) throws(ViewError) -> [JSON] {
        guard items.count <= Limits.viewMaxQueryKeys else {
            throw .queryParse("`keys` lists at most \(Limits.viewMaxQueryKeys) keys")
        }
        return items
    }

    public static func parse(_ params: [(String, String)], body: JSON? = nil) throws(ViewError) -> ViewQuery {
        var q = ViewQuery()
        var sawGroup = false
        var sawGroupLevel = false
        func json(_ name: String, _ raw: String) throws(ViewError) -> JSON {
            do { return try JSON.parse(raw) } catch {
                throw .queryParse("Invalid JSON value for parameter `\(name)`: \(raw)")
            }
        }
        func bool(_ name: String, _ raw: String) throws(ViewError) -> Bool {
            // Any case, as Couchbase's `parse_bool_param` lowercases the value (`descending=True` is true).
            switch raw.count <= 5 ? raw.lowercased() : raw {
            case "true": return true
            case "false": return false
            default: throw .queryParse("Invalid boolean parameter value for `\(name)`: \(raw)")
            }
        }
        func nonNegative(_ name: String, _ raw: String) throws(ViewError) -> Int {
            guard let n = Int(raw), n >= 0 else {
                throw .queryParse("Invalid value for integer parameter `\(name)`: \(raw)")
            }
            return n
        }
        for (name, raw) in params {
            switch name {
            case "key": q.key = try json(name, raw)
            case "keys":
                guard case .array(let items) = try json(name, raw) else {
                    throw .queryParse("`keys` parameter must be an array")
                }
                q.keys = try Self.boundedKeys(items)
            case "startkey", "start_key": q.startKey = try json(name, raw)
            case "endkey", "end_key": q.endKey = try json(name, raw)
            case "startkey_docid", "start_key_doc_id": q.startKeyDocID = raw
            case "endkey_docid", "end_key_doc_id": q.endKeyDocID = raw
            case "inclusive_end": q.inclusiveEnd = try bool(name, raw)
            case "descending": q.descending = try bool(name, raw)
            case "limit": q.limit = min(try nonNegative(name, raw), Limits.maxViewQueryCount)
            case "skip": q.skip = min(try nonNegative(name, raw), Limits.maxViewQueryCount)
            case "reduce": q.reduce = try bool(name, raw)
            case "group":
                q.group = try bool(name, raw)
                sawGroup = true
            case "group_level":
                q.groupLevel = min(try nonNegative(name, raw), Limits.maxViewQueryCount)
                sawGroupLevel = true
            case "include_docs": q.includeDocs = try bool(name, raw)
            case "stale":
                guard let s = Staleness(rawValue: raw) else {
                    throw .queryParse("stale only available as stale=ok, stale=update_after or stale=false")
                }
                q.stale = s
            case "on_error":
                switch raw {
                case "continue": q.onErrorStop = false
                case "stop": q.onErrorStop = true
                default: throw .queryParse("Invalid value for parameter `on_error`: \(raw)")
                }
            case "full_set": q.fullSet = try bool(name, raw)
            case "connection_timeout":
                q.connectionTimeoutMs = min(try nonNegative(name, raw), Limits.maxViewConnectionTimeoutMs)
            case "_local": q.localOnly = try bool(name, raw)
            case "count": throw .queryParse("Query parameter 'count' is now 'limit'.")
            case "debug", "_": continue
            default: continue  // CouchDB ignores unknown parameters.
            }
        }
        if let body {
            guard case .object(let members) = body else { throw .badRequest("Request body must be a JSON object") }
            for (name, value) in members {
                if name == "keys" {
                    guard case .array(let items) = value else {
                        throw .queryParse("`keys` member must be an array")
                    }
                    q.keys = try Self.boundedKeys(items)
                }
            }
        }
        if sawGroup && sawGroupLevel && q.group {
            throw .queryParse("Query parameter `group_level` is not compatible with `group`")
        }
        if q.key != nil && q.keys != nil {
            throw .queryParse("`keys` is incompatible with `key`")
        }
        return q
    }

    /// The effective start/end after `key`, and the direction.
    var effectiveStartKey: JSON? { key ?? startKey }
    var effectiveEndKey: JSON? { key ?? endKey }

    /// Checks what depends on the view (reduce or not) and the key range.
    func validate(hasReduce: Bool) throws(ViewError) {
        if !hasReduce {
            // `reduce=false` asks for what a map view answers anyway: Couchbase and CouchDB accept it (clients that
            // always send it work on every view); only `reduce=true` is refused.
            if reduce == true { throw .queryParse("Invalid URL parameter `reduce` for map view.") }
            if group || groupLevel != nil {
                throw .queryParse("Invalid URL parameter 'group' or  'group_level' for non-reduce view.")
            }
        }
        let reducing = hasReduce && (reduce ?? true)
        if reducing && includeDocs {
            throw .queryParse("Query parameter `include_docs` is invalid for reduce views.")
        }
        if reducing, keys != nil, !group, groupLevel == nil {
            throw .queryParse("Multi-key fetchs for reduce view must include `group=true`")
        }
        if let s = effectiveStartKey, let e = effectiveEndKey {
            let c = Collation.compare(s, e)
            let wrong = descending ? c < 0 : c > 0
            if wrong {
                throw .queryParse(
                    "No rows can match your key range, reverse your start_key and end_key or set descending="
                        + (descending ? "false" : "true"))
            }
        }
    }
}
