/// The one collection Settee has: `_default._default`, id 0, in manifest 0. The KV port (Collections HELLO
/// feature, GET_COLLECTION_ID, GET_COLLECTIONS_MANIFEST) and the admin API (`/pools/default/buckets/B/scopes`)
/// both answer from here; named scopes and collections are refused with Couchbase's statuses (UNKNOWN_SCOPE
/// 0x8c, UNKNOWN_COLLECTION 0x88).
public enum DefaultCollection {
    public static let id: UInt32 = 0
    public static let manifestUID: UInt64 = 0
    public static let scopeName = "_default"
    public static let collectionName = "_default"

    /// The collections manifest, in the shape ns_server serves and the SDKs' collection managers parse.
    public static let manifestJSON = Array(
        (#"{"uid":"0","scopes":[{"name":"_default","uid":"0","collections":"#
            + #"[{"name":"_default","uid":"0","maxTTL":0,"history":false}]}]}"#).utf8)

    /// The body of an UNKNOWN_COLLECTION / UNKNOWN_SCOPE answer: the manifest the client should fetch.
    public static let unknownBody = Array(#"{"manifest_uid":"0"}"#.utf8)

    public enum Resolution: Equatable, Sendable {
        case collection(UInt32)
        case unknownScope
        case unknownCollection
        case invalid
    }

    /// Resolves GET_COLLECTION_ID's `scope.collection` (an empty part means `_default`).
    public static func resolve(_ path: String) -> Resolution {
        let parts = path.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2 else { return .invalid }
        let scope = parts[0].isEmpty ? scopeName : String(parts[0])
        let collection = parts[1].isEmpty ? collectionName : String(parts[1])
        guard scope == scopeName else { return .unknownScope }
        guard collection == collectionName else { return .unknownCollection }
        return .collection(id)
    }
}
