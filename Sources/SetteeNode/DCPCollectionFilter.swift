import SetteeCore
import SetteeJSON
import SetteeProtocol

/// How a DCP producer connection hands out keys (ADR 0138). Chosen once, at DCP_OPEN.
enum DCPKeyMode: Sendable, Equatable {
    /// Engine keys verbatim, every collection's (marker, LEB128 id, key; ADR 0129): node-to-node replication only
    /// (a trusted connection named `DCPNames.replicaPrefix`), whose replica stores what the active stores.
    case engine
    /// The connection did not negotiate HELLO Collections: the default collection only, with its logical keys (an
    /// escaped default key unescaped), as kv_engine streams to a consumer that is not collection-aware.
    case defaultCollection
    /// HELLO Collections: keys as `LEB128(collection id) ‖ logical key`, each stream filtered by its request's
    /// value (`DCPCollectionFilter`).
    case collections
}

/// The collections a collection-aware stream carries, from the STREAM_REQ value (kv_engine
/// `docs/dcp/documentation/commands/stream-request-value.md`): `{"collections":["0","8a"]}` (ids in base 16, no
/// 0x) or `{"scope":"9"}`; no value (or neither key) streams every collection. Other keys (`uid`, `purge_seqno`)
/// are accepted and ignored; `sid` is refused, as the stream-ID feature is not offered. Pure value.
///
/// Whatever the filter, a dropped collection's items are not sent (they are being purged, ADR 0138), and a
/// collection created in a filtered scope later is in the stream.
struct DCPCollectionFilter: Sendable, Hashable {
    enum Selection: Sendable, Hashable {
        case all
        case collections(Set<UInt32>)
        case scope(UInt32)
    }

    var selection: Selection

    static let all = DCPCollectionFilter(selection: .all)

    /// Ids this filter holds: what it counts against `Limits.dcpFilterIDsPerConnection`.
    var idCount: Int {
        switch selection {
        case .all: return 0
        case .collections(let ids): return ids.count
        case .scope: return 1
        }
    }

    /// Why a stream request's value was refused: the status to answer and whether the value is the manifest's
    /// `unknownBody` (for UnknownCollection / UnknownScope, as kv_engine answers them).
    struct Refusal: Error, Sendable, Equatable {
        var status: Status
        var carriesManifestUID: Bool { status == .unknownCollection || status == .unknownScope }
    }

    /// Parses `value` against `manifest`. Refuses (EINVAL) malformed JSON, a value that is not an object, both
    /// `collections` and `scope`, a `collections` that is not an array of hex strings, a `scope` that is not a hex
    /// string, and `sid`; an id the manifest does not have is UnknownCollection (UnknownScope for a scope). Bounded by
    /// the frame's size and `Limits.maxCollectionsPerBucket` ids.
    static func parse(_ value: [UInt8], manifest: CollectionsManifest) -> Result<DCPCollectionFilter, Refusal> {
        guard !value.isEmpty else { return .success(.all) }
        let invalid = Refusal(status: .invalidArguments)
        guard let json = try? JSON.parse(value, maxDepth: 3), case .object = json else { return .failure(invalid) }
        if json["sid"] != nil { return .failure(invalid) }  // DCP stream-IDs are not offered
        if let uid = json["uid"], uid.stringValue == nil { return .failure(invalid) }
        switch (json["collections"], json["scope"]) {
        case (.some, .some):
            return .failure(invalid)
        case (.some(let list), nil):
            guard let items = list.arrayValue, items.count <= Limits.maxCollectionsPerBucket else {
                return .failure(invalid)
            }
            var ids = Set<UInt32>()
            for item in items {
                guard let id = item.stringValue.flatMap(hexID) else { return .failure(invalid) }
                guard id == CollectionsManifest.defaultCollectionID || manifest.collection(id: id) != nil else {
                    return .failure(Refusal(status: .unknownCollection))
                }
                ids.insert(id)
            }
            return .success(DCPCollectionFilter(selection: .collections(ids)))
        case (nil, .some(let scope)):
            guard let id = scope.stringValue.flatMap(hexID) else { return .failure(invalid) }
            guard manifest.scopes.contains(where: { $0.id == id }) else {
                return .failure(Refusal(status: .unknownScope))
            }
            return .success(DCPCollectionFilter(selection: .scope(id)))
        case (nil, nil):
            return .success(.all)
        }
    }

    /// A base-16 id without 0x, at most 8 digits.
    private static func hexID(_ text: String) -> UInt32? {
        guard !text.isEmpty, text.utf8.count <= 8 else { return nil }
        return UInt32(text, radix: 16)
    }

    /// Whether a collection or scope event goes to a stream with this filter (ADR 0143): every event without a filter;
    /// a collection filter's own collections' begin and end; a scope filter's scope's events and its collections'.
    func admits(_ event: CollectionSystemEvent) -> Bool {
        switch selection {
        case .all:
            return true
        case .collections(let ids):
            return (event.kind == .beginCollection || event.kind == .endCollection) && ids.contains(event.collectionID)
        case .scope(let id):
            return event.scopeID == id
        }
    }

    /// The collections of `manifest` this filter admits now: nil for "every live collection" (`.all`).
    func admitted(in manifest: CollectionsManifest) -> Set<UInt32>? {
        switch selection {
        case .all:
            return nil
        case .collections(let ids):
            return ids.filter { $0 == CollectionsManifest.defaultCollectionID || manifest.collection(id: $0) != nil }
        case .scope(let id):
            return Set(manifest.scopes.first { $0.id == id }?.collections.map(\.id) ?? [])
        }
    }
}
