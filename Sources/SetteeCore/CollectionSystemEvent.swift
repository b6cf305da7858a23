/// A collection or scope change as an item in a vBucket's seqno space (ADR 0143), which a collection-aware DCP consumer
/// receives as DCP_SYSTEM_EVENT (0x5f; kv_engine `docs/dcp/documentation/commands/system_event.md`).
///
/// As kv_engine does, each active vBucket writes one item per created scope or collection when its node adopts the
/// manifest that made it, with a seqno of its own, and rewrites the same item when the collection or scope is dropped,
/// so resuming, rollback, replication and warmup treat events like any item. The items live in the system collection's
/// key space, which no client can name (id 1: ids 1...7 are reserved, a client's named collections start at 8, and a
/// default key starting with 0xff is escaped; ADR 0129):
///
/// - engine key: `0xff ‖ LEB128(1) ‖ 0x00 ‖ LEB128(collection id)` for a collection, `… ‖ 0x01 ‖ LEB128(scope id)`
///   for a scope;
/// - stored value: `event (u8) ‖ manifest uid (u64) ‖ scope id (u32) ‖ collection id (u32) ‖ maxTTL (u32) ‖ name`,
///   big-endian, the name's UTF-8 to the end (empty for a drop).
///
/// Pure value; no storage or protocol types.
public struct CollectionSystemEvent: Sendable, Equatable {
    /// kv_engine's event ids (the extras' `event` field).
    public enum Kind: UInt8, Sendable {
        case beginCollection = 0
        case endCollection = 1
        case createScope = 3
        case dropScope = 4
    }

    public var kind: Kind
    /// The manifest uid the event is stamped with: the one that made it for the last event a manifest change wrote in
    /// a vBucket, the vBucket's previous one for the others (kv_engine's "last completely processed manifest").
    public var manifestUID: UInt64
    public var scopeID: UInt32
    /// 0 for scope events.
    public var collectionID: UInt32
    /// Seconds, begin events only (0: none).
    public var maxTTL: UInt32
    /// The collection's or scope's name for begin / create events; empty for drops.
    public var name: String

    public init(
        kind: Kind, manifestUID: UInt64, scopeID: UInt32, collectionID: UInt32 = 0, maxTTL: UInt32 = 0,
        name: String = ""
    ) {
        self.kind = kind
        self.manifestUID = manifestUID
        self.scopeID = scopeID
        self.collectionID = collectionID
        self.maxTTL = maxTTL
        self.name = name
    }

    /// The system collection's id (kv_engine's "System" namespace).
    public static let systemCollectionID: UInt32 = 1
    private static let collectionSpace: UInt8 = 0
    private static let scopeSpace: UInt8 = 1

    /// Whether an engine key is in the system collection: `0xff 0x01 …`. One or two bytes compared.
    @inline(__always)
    public static func isSystemKey<C: Collection<UInt8>>(_ key: C) -> Bool {
        var i = key.makeIterator()
        return i.next() == CollectionKey.engineMarker && i.next() == UInt8(systemCollectionID)
    }

    /// The engine key of collection `id`'s event item.
    public static func engineKey(collection id: UInt32) -> [UInt8] {
        [CollectionKey.engineMarker, UInt8(systemCollectionID), collectionSpace] + CollectionKey.encodePrefix(id)
    }

    /// The engine key of scope `id`'s event item.
    public static func engineKey(scope id: UInt32) -> [UInt8] {
        [CollectionKey.engineMarker, UInt8(systemCollectionID), scopeSpace] + CollectionKey.encodePrefix(id)
    }

    /// This event's item key: its collection's for collection events, its scope's for scope events.
    public var engineKey: [UInt8] {
        switch kind {
        case .beginCollection, .endCollection: return Self.engineKey(collection: collectionID)
        case .createScope, .dropScope: return Self.engineKey(scope: scopeID)
        }
    }

    /// The stored value (layout above).
    public var encoded: [UInt8] {
        var out: [UInt8] = [kind.rawValue]
        out.reserveCapacity(21 + name.utf8.count)
        Self.append(manifestUID, to: &out)
        Self.append(scopeID, to: &out)
        Self.append(collectionID, to: &out)
        Self.append(maxTTL, to: &out)
        out.append(contentsOf: name.utf8)
        return out
    }

    /// Reads a stored value; nil when it is not one (short, an unknown event, a name that is not UTF-8).
    public static func decode<C: Collection<UInt8>>(_ value: C) -> CollectionSystemEvent? {
        let bytes = Array(value)
        guard bytes.count >= 21, let kind = Kind(rawValue: bytes[0]) else { return nil }
        func int<T: FixedWidthInteger>(_ at: Int, _: T.Type) -> T {
            bytes[at..<(at + MemoryLayout<T>.size)].reduce(T.zero) { $0 << 8 | T($1) }
        }
        guard let name = String(validating: bytes[21...], as: UTF8.self) else { return nil }
        return CollectionSystemEvent(
            kind: kind, manifestUID: int(1, UInt64.self), scopeID: int(9, UInt32.self),
            collectionID: int(13, UInt32.self), maxTTL: int(17, UInt32.self), name: name)
    }

    /// The DCP_SYSTEM_EVENT key: the name for a begin-collection or create-scope event, none for drops.
    public var dcpKey: [UInt8] {
        kind == .beginCollection || kind == .createScope ? Array(name.utf8) : []
    }

    /// The extras' version byte: 1 for a begin-collection event of a collection with a maxTTL (its value carries
    /// it), else 0.
    public var dcpVersion: UInt8 { kind == .beginCollection && maxTTL != 0 ? 1 : 0 }

    /// The DCP_SYSTEM_EVENT value, big-endian: manifest uid (u64), scope id (u32), then for collection events the
    /// collection id (u32) and, at version 1, the maxTTL (u32); kv_engine's `collection_begin_event_data_version0/1`,
    /// `collection_end_event_data_version0`, `scope_create_event_data_version0`, `scope_drop_event_data_version0`.
    public var dcpValue: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(20)
        Self.append(manifestUID, to: &out)
        Self.append(scopeID, to: &out)
        if kind == .beginCollection || kind == .endCollection { Self.append(collectionID, to: &out) }
        if dcpVersion == 1 { Self.append(maxTTL, to: &out) }
        return out
    }

    private static func append<T: FixedWidthInteger>(_ v: T, to out: inout [UInt8]) {
        for shift in stride(from: T.bitWidth - 8, through: 0, by: -8) {
            out.append(UInt8(truncatingIfNeeded: v >> shift))
        }
    }

    /// The events that bring a vBucket whose event items are `existing` (by engine key, as `decode` read them) to
    /// `manifest`, in the order they are to be written: scopes created, collections begun, collections ended, scopes
    /// dropped. A live named scope or collection whose item is missing or says otherwise gets a create / begin event;
    /// an item whose scope or collection the manifest no longer lists, and that is not already a drop, gets a drop /
    /// end event. The default scope and collection have none (as in kv_engine, they exist without an event). The last
    /// event is stamped with the manifest's uid, the others with `previousUID`.
    public static func changes(
        existing: [[UInt8]: CollectionSystemEvent], to manifest: CollectionsManifest, previousUID: UInt64
    ) -> [CollectionSystemEvent] {
        var out: [CollectionSystemEvent] = []
        var liveScopes = Set<UInt32>()
        var liveCollections = Set<UInt32>()
        for scope in manifest.scopes {
            liveScopes.insert(scope.id)
            if scope.id != 0 {
                let want = CollectionSystemEvent(
                    kind: .createScope, manifestUID: 0, scopeID: scope.id, name: scope.name)
                if existing[want.engineKey]?.sameState(as: want) != true { out.append(want) }
            }
        }
        for scope in manifest.scopes {
            for c in scope.collections {
                liveCollections.insert(c.id)
                guard c.id != CollectionsManifest.defaultCollectionID else { continue }
                let want = CollectionSystemEvent(
                    kind: .beginCollection, manifestUID: 0, scopeID: scope.id, collectionID: c.id, maxTTL: c.maxTTL,
                    name: c.name)
                if existing[want.engineKey]?.sameState(as: want) != true { out.append(want) }
            }
        }
        // Drops in key order, so the same inputs always give the same seqnos.
        let gone = existing.values.sorted {
            ($0.kind.rawValue, $0.scopeID, $0.collectionID) < ($1.kind.rawValue, $1.scopeID, $1.collectionID)
        }
        for e in gone where e.kind == .beginCollection && !liveCollections.contains(e.collectionID) {
            out.append(
                CollectionSystemEvent(
                    kind: .endCollection, manifestUID: 0, scopeID: e.scopeID, collectionID: e.collectionID))
        }
        for e in gone where e.kind == .createScope && !liveScopes.contains(e.scopeID) {
            out.append(CollectionSystemEvent(kind: .dropScope, manifestUID: 0, scopeID: e.scopeID))
        }
        for i in out.indices { out[i].manifestUID = i == out.count - 1 ? manifest.uid : previousUID }
        return out
    }

    /// Same kind, ids, maxTTL and name: the uid stamp does not make an item stale.
    private func sameState(as other: CollectionSystemEvent) -> Bool {
        kind == other.kind && scopeID == other.scopeID && collectionID == other.collectionID && maxTTL == other.maxTTL
            && name == other.name
    }
}
