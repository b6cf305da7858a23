import SetteeBLIP
import SetteeCore
import SetteeJSON

/// A `subChanges` request's parameters (replication-protocol.adoc §subChanges; Sync Gateway's
/// `SubChangesParams`), as both passive sides read them (the gateway's `BLIPSyncHandler`, Lite's
/// `BLIPReplicationServer`): `since` (JSON-encoded sequence), `continuous`, `activeOnly`, `filter` =
/// `sync_gateway/bychannel` with `channels` (comma list), `batch`, `revocations`, and a JSON body whose `docIDs`
/// restricts the feed (one-shot only, as Sync Gateway refuses it on a continuous feed).
public struct SubChangesRequest: Sendable, Equatable {
    /// What a server takes from one `subChanges`: `batch` is clamped to `minBatch...maxBatch` (`defaultBatch` when
    /// absent); at most `maxChannels` channels, `maxDocIDs` document ids, and `maxJSONValues` values in the body.
    public struct Bounds: Sendable, Equatable {
        public var defaultBatch: Int
        public var minBatch: Int
        public var maxBatch: Int
        public var maxChannels: Int
        public var maxDocIDs: Int
        public var maxJSONValues: Int

        public init(
            defaultBatch: Int, minBatch: Int, maxBatch: Int, maxChannels: Int, maxDocIDs: Int, maxJSONValues: Int
        ) {
            self.defaultBatch = defaultBatch
            self.minBatch = minBatch
            self.maxBatch = maxBatch
            self.maxChannels = maxChannels
            self.maxDocIDs = maxDocIDs
            self.maxJSONValues = maxJSONValues
        }

        /// A Lite P2P listener's (`Limits.liteListenerBLIP*`; the body as its REST side's).
        public static let liteListener = Bounds(
            defaultBatch: Limits.liteListenerBLIPDefaultChangesBatch, minBatch: 1,
            maxBatch: Limits.liteListenerBLIPMaxChangesBatch, maxChannels: Limits.maxChannelsPerGrant,
            maxDocIDs: GatewayHTTPLimits.maxBulkReadDocs, maxJSONValues: GatewayHTTPLimits.maxRequestJSONValues)
    }

    /// The sequence to start after, as text: a JSON string's contents (`"5:12"` → `5:12`), else the property as sent
    /// (`12`); nil when absent or empty (from the start). Each server reads it as its own sequence type.
    public var since: String?
    public var continuous = false
    public var activeOnly = false
    public var channels: Set<String>? = nil
    public var docIDs: Set<String>? = nil
    public var batch: Int
    /// CBMobile_3: the client wants rows for documents that left all its channels (flag 4).
    public var revocations = false

    /// Parses `request` within `bounds`.
    /// - Throws: `CouchError` 400 with Sync Gateway's reason for a malformed parameter, an unknown filter, an empty
    ///   or too long channel list, a body that is not a JSON object, bad `docIDs`, or `docIDs` on a continuous feed.
    public init(_ request: BLIPMessage, bounds: Bounds) throws(CouchError) {
        batch = bounds.defaultBatch
        if let s = request["since"], !s.isEmpty {
            since = (try? JSON.parse(s, maxValues: 4))?.stringValue ?? s
        }
        if let c = request["continuous"] { continuous = c != "false" && c != "0" }
        activeOnly = Self.flag(request["activeOnly"])
        revocations = Self.flag(request["revocations"])
        if let b = request["batch"] {
            guard let n = Int(b), n > 0 else { throw .badRequest("Invalid subChanges parameters: batch \(b)") }
            batch = min(max(n, bounds.minBatch), bounds.maxBatch)
        }
        switch request["filter"] {
        case nil, "": break
        case "sync_gateway/bychannel":
            guard let list = request["channels"] else { throw .badRequest("Missing 'channels' filter parameter") }
            let names = Set(list.split(separator: ",").map(String.init).filter { !$0.isEmpty })
            guard !names.isEmpty else { throw .badRequest("Empty channel list") }
            guard names.count <= bounds.maxChannels else {
                throw .badRequest("Too many channels (max \(bounds.maxChannels))")
            }
            channels = names
        default:
            throw .badRequest("Unknown filter; try sync_gateway/bychannel")
        }
        if !request.body.isEmpty {
            guard let body = try? JSON.parse(request.body, maxValues: bounds.maxJSONValues), case .object = body
            else { throw .badRequest("Invalid subChanges body: not a JSON object") }
            if let ids = body["docIDs"] {
                guard let items = ids.arrayValue, items.count <= bounds.maxDocIDs else {
                    throw .badRequest("docIDs must be an array of at most \(bounds.maxDocIDs) strings")
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
    public static func flag(_ value: String?) -> Bool {
        guard let value else { return false }
        return value == "true" || value == "True" || value == "1"
    }

    /// The subscription as a `ReplicationFilter` (document ids before channels, sorted; nil for none).
    public var filter: ReplicationFilter? {
        if let docIDs { return .docIDs(docIDs.sorted()) }
        if let channels { return .channels(channels.sorted()) }
        return nil
    }
}
