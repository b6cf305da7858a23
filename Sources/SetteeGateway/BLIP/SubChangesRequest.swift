import SetteeBLIP
import SetteeCore
import SetteeJSON

/// A `subChanges` request's parameters (replication-protocol.adoc §subChanges; Sync Gateway's
/// `SubChangesParams`): `since` (JSON-encoded sequence), `continuous`, `activeOnly`, `filter` =
/// `sync_gateway/bychannel` with `channels` (comma list), `batch`, `revocations`, `sendReplacementRevs`, and a JSON
/// body whose `docIDs` restricts the feed (one-shot only, as Sync Gateway refuses it on a continuous feed).
struct SubChangesRequest: Sendable, Equatable {
    var since: ChangesSince = .zero
    var continuous = false
    var activeOnly = false
    var channels: Set<String>? = nil
    var docIDs: Set<String>? = nil
    var batch = Limits.gatewayBLIPDefaultChangesBatch
    /// CBMobile_3: the client wants rows for documents that left all its channels (flag 4).
    var revocations = false

    /// Parses `request`; a malformed parameter is a `GatewayError` (400) with Sync Gateway's reason.
    init(_ request: BLIPMessage) throws(GatewayError) {
        if let s = request["since"], !s.isEmpty {
            // JSON-encoded: a number, or a quoted compound sequence ("5:12"); a bare compound is read too.
            let parsed = (try? JSON.parse(s, maxValues: 4)).flatMap { ChangesSince(json: $0) } ?? ChangesSince(s)
            guard let parsed else { throw .badRequest("Invalid subChanges parameters: since \(s)") }
            since = parsed
        }
        if let c = request["continuous"] { continuous = c != "false" && c != "0" }
        activeOnly = Self.flag(request["activeOnly"])
        revocations = Self.flag(request["revocations"])
        if let b = request["batch"] {
            guard let n = Int(b), n > 0 else { throw .badRequest("Invalid subChanges parameters: batch \(b)") }
            batch = min(max(n, Limits.gatewayBLIPMinChangesBatch), Limits.gatewayBLIPMaxChangesBatch)
        }
        switch request["filter"] {
        case nil, "": break
        case "sync_gateway/bychannel":
            guard let list = request["channels"] else { throw .badRequest("Missing 'channels' filter parameter") }
            let names = Set(list.split(separator: ",").map(String.init).filter { !$0.isEmpty })
            guard !names.isEmpty else { throw .badRequest("Empty channel list") }
            guard names.count <= Limits.maxChannelsPerGrant else {
                throw .badRequest("Too many channels (max \(Limits.maxChannelsPerGrant))")
            }
            channels = names
        default:
            throw .badRequest("Unknown filter; try sync_gateway/bychannel")
        }
        if !request.body.isEmpty {
            guard let body = try? JSON.parse(request.body, maxValues: Limits.gatewayBLIPMaxJSONValues),
                case .object = body
            else { throw .badRequest("Invalid subChanges body: not a JSON object") }
            if let ids = body["docIDs"] {
                guard let items = ids.arrayValue, items.count <= Limits.gatewayBLIPMaxDocIDs else {
                    throw .badRequest("docIDs must be an array of at most \(Limits.gatewayBLIPMaxDocIDs) strings")
                }
                var set = Set<String>()
                for item in items {
                    guard let s = item.stringValue else { throw .badRequest("docIDs must be strings") }
                    set.insert(s)
                }
                if !set.isEmpty { docIDs = set }
            }
        }
        if docIDs != nil && continuous {
            throw .badRequest("DocIDs filter not supported for continuous subChanges")
        }
    }

    /// A boolean property: Couchbase Lite sends `true`; other clients send `1` or Python's `True`.
    static func flag(_ value: String?) -> Bool {
        guard let value else { return false }
        return value == "true" || value == "True" || value == "1"
    }

    /// The gateway's `_changes` query for this subscription from `since` on.
    func query(since: ChangesSince) -> ChangesQuery {
        ChangesQuery(since: since, activeOnly: activeOnly, channels: channels, docIDs: docIDs)
    }
}
