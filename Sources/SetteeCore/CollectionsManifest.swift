/// A bucket's collections manifest: its scopes, the collections in each, and the manifest uid that every change
/// bumps (Couchbase Server 7's model, kv_engine `docs/Collections.md`). A pure value: the edits are `mutating`
/// functions that either apply whole or throw an `EditError` and leave the manifest as it was.
///
/// Rules (ns_server's, which the SDKs' collection managers expect):
/// - `_default._default` is collection id 0 in scope id 0; ids 1...7 are reserved; new scopes and collections get
///   ids from 8 up, each from its own counter, never reused (a dropped collection's id stays dead, so items left
///   under it can never be reached again).
/// - Names: 1...`Limits.maxCollectionNameLength` characters of `A-Z a-z 0-9 _ - %`, not starting with `_` or `%`
///   (those are reserved for the system's own names).
/// - At most `Limits.maxScopesPerBucket` scopes and `Limits.maxCollectionsPerBucket` collections (the default one
///   included); `_default` scope and `_default._default` cannot be dropped here.
/// - Every successful edit adds 1 to `uid`.
///
/// Persisted inside `BucketSettings` (Codable, nil there meaning `CollectionsManifest.initial`); clients read it as
/// `json`: `{"uid":"<hex>","scopes":[{"name":..,"uid":"<hex>","collections":[{"name":..,"uid":"<hex>",
/// "maxTTL":<seconds>,"history":false}]}]}`, the shape of ns_server's `GET /pools/default/buckets/B/scopes` and of
/// kv_engine's GET_COLLECTIONS_MANIFEST.
public struct CollectionsManifest: Sendable, Equatable, Codable {
    /// One collection: its name, id (the LEB128 key prefix clients send) and maximum TTL in seconds (0: none).
    public struct Collection: Sendable, Equatable, Codable {
        public var name: String
        public var id: UInt32
        /// Seconds; a mutation's expiry is capped at now + maxTTL, and one without expiry gets it (0: no cap).
        public var maxTTL: UInt32
    }

    /// One scope: its name, id, and collections in creation order.
    public struct Scope: Sendable, Equatable, Codable {
        public var name: String
        public var id: UInt32
        public var collections: [Collection]
    }

    /// Why an edit was refused. The admin API maps these to ns_server's statuses and texts.
    public enum EditError: Error, Equatable, Sendable {
        case invalidName(String)
        case scopeExists(String)
        case scopeNotFound(String)
        case collectionExists(scope: String, collection: String)
        case collectionNotFound(scope: String, collection: String)
        /// `_default` scope or `_default._default`, which stay.
        case cannotDropDefault
        case tooManyScopes
        case tooManyCollections
        /// maxTTL past `Limits.maxCollectionMaxTTLSeconds`.
        case invalidMaxTTL
        /// The id or uid counter reached its end (2^32 - 1 ids, 2^64 - 1 uids).
        case exhausted
    }

    /// What a `scope.collection` or `scope` path names.
    public enum Resolution: Equatable, Sendable {
        case collection(scopeID: UInt32, collectionID: UInt32)
        case scope(UInt32)
        case unknownScope
        case unknownCollection
        case invalid
    }

    public static let defaultName = "_default"
    public static let defaultCollectionID: UInt32 = 0
    /// The first id a created scope or collection gets (0 is the default, 1...7 are reserved).
    public static let firstUserID: UInt32 = 8

    /// Bumped by every edit. Clients compare it (hex in JSON, u64 on the wire) to tell which manifest is newer.
    public private(set) var uid: UInt64
    public private(set) var scopes: [Scope]
    public private(set) var nextScopeID: UInt32
    public private(set) var nextCollectionID: UInt32

    /// A bucket's manifest before any edit: `_default._default` only, uid 0.
    public static let initial = CollectionsManifest(
        uid: 0,
        scopes: [
            Scope(
                name: defaultName, id: 0,
                collections: [Collection(name: defaultName, id: defaultCollectionID, maxTTL: 0)])
        ],
        nextScopeID: firstUserID, nextCollectionID: firstUserID)

    init(uid: UInt64, scopes: [Scope], nextScopeID: UInt32, nextCollectionID: UInt32) {
        self.uid = uid
        self.scopes = scopes
        self.nextScopeID = nextScopeID
        self.nextCollectionID = nextCollectionID
    }

    /// Every collection, in scope then creation order.
    public var collectionCount: Int { scopes.reduce(0) { $0 + $1.collections.count } }

    /// The uid as clients see it: lowercase hex without leading zeros.
    public var uidHex: String { String(uid, radix: 16) }

    // MARK: Lookups

    /// The collection with `id`, if it exists. Linear in the collections: the data path looks ids up in
    /// `collectionsByID()`, made once per manifest.
    public func collection(id: UInt32) -> Collection? {
        for scope in scopes {
            for c in scope.collections where c.id == id { return c }
        }
        return nil
    }

    /// Every collection by id, for the data path's per-request check.
    public func collectionsByID() -> [UInt32: Collection] {
        var byID: [UInt32: Collection] = [:]
        byID.reserveCapacity(collectionCount)
        for scope in scopes {
            for c in scope.collections { byID[c.id] = c }
        }
        return byID
    }

    /// Resolves GET_COLLECTION_ID's `scope.collection` (an empty part means `_default`, as kv_engine does).
    public func resolveCollection(_ path: String) -> Resolution {
        let parts = path.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2 else { return .invalid }
        let scopeName = parts[0].isEmpty ? Self.defaultName : String(parts[0])
        let collectionName = parts[1].isEmpty ? Self.defaultName : String(parts[1])
        guard let scope = scopes.first(where: { $0.name == scopeName }) else { return .unknownScope }
        guard let c = scope.collections.first(where: { $0.name == collectionName }) else { return .unknownCollection }
        return .collection(scopeID: scope.id, collectionID: c.id)
    }

    /// Resolves GET_SCOPE_ID's `scope` (also `scope.`; empty means `_default`).
    public func resolveScope(_ path: String) -> Resolution {
        var name = Substring(path)
        if name.hasSuffix(".") { name = name.dropLast() }
        guard !name.contains(".") else { return .invalid }
        let scopeName = name.isEmpty ? Self.defaultName : String(name)
        guard let scope = scopes.first(where: { $0.name == scopeName }) else { return .unknownScope }
        return .scope(scope.id)
    }

    // MARK: Edits

    /// Whether `name` may name a new scope or collection (ns_server's rule, see the type's comment).
    public static func isValidName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard (1...Limits.maxCollectionNameLength).contains(bytes.count), bytes[0] != UInt8(ascii: "_"),
            bytes[0] != UInt8(ascii: "%")
        else { return false }
        return bytes.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a) || b == 0x5f
                || b == 0x2d || b == 0x25
        }
    }

    /// Adds an empty scope. Throws `invalidName`, `scopeExists`, `tooManyScopes`, `exhausted`.
    public mutating func createScope(_ name: String) throws(EditError) {
        guard Self.isValidName(name) else { throw .invalidName(name) }
        guard !scopes.contains(where: { $0.name == name }) else { throw .scopeExists(name) }
        guard scopes.count < Limits.maxScopesPerBucket else { throw .tooManyScopes }
        let id = nextScopeID
        guard id < UInt32.max, uid < UInt64.max else { throw .exhausted }
        scopes.append(Scope(name: name, id: id, collections: []))
        nextScopeID = id + 1
        uid += 1
    }

    /// Removes a scope and every collection in it. Throws `scopeNotFound`, `cannotDropDefault`.
    public mutating func dropScope(_ name: String) throws(EditError) {
        guard name != Self.defaultName else { throw .cannotDropDefault }
        guard let i = scopes.firstIndex(where: { $0.name == name }) else { throw .scopeNotFound(name) }
        guard uid < UInt64.max else { throw .exhausted }
        scopes.remove(at: i)
        uid += 1
    }

    /// Adds a collection to a scope, with `maxTTL` seconds (0: none). Throws `invalidName`, `scopeNotFound`,
    /// `collectionExists`, `tooManyCollections`, `invalidMaxTTL`, `exhausted`.
    public mutating func createCollection(_ name: String, inScope scope: String, maxTTL: UInt32 = 0)
        throws(EditError)
    {
        guard Self.isValidName(name) else { throw .invalidName(name) }
        guard let s = scopes.firstIndex(where: { $0.name == scope }) else { throw .scopeNotFound(scope) }
        guard !scopes[s].collections.contains(where: { $0.name == name }) else {
            throw .collectionExists(scope: scope, collection: name)
        }
        guard collectionCount < Limits.maxCollectionsPerBucket else { throw .tooManyCollections }
        guard maxTTL <= Limits.maxCollectionMaxTTLSeconds else { throw .invalidMaxTTL }
        let id = nextCollectionID
        guard id < UInt32.max, uid < UInt64.max else { throw .exhausted }
        scopes[s].collections.append(Collection(name: name, id: id, maxTTL: maxTTL))
        nextCollectionID = id + 1
        uid += 1
    }

    /// Removes a collection. Throws `scopeNotFound`, `collectionNotFound`, `cannotDropDefault`.
    public mutating func dropCollection(_ name: String, inScope scope: String) throws(EditError) {
        guard !(scope == Self.defaultName && name == Self.defaultName) else { throw .cannotDropDefault }
        guard let s = scopes.firstIndex(where: { $0.name == scope }) else { throw .scopeNotFound(scope) }
        guard let c = scopes[s].collections.firstIndex(where: { $0.name == name }) else {
            throw .collectionNotFound(scope: scope, collection: name)
        }
        guard uid < UInt64.max else { throw .exhausted }
        scopes[s].collections.remove(at: c)
        uid += 1
    }

    // MARK: JSON

    /// The manifest as clients read it (see the type's comment). Names are validated to need no escaping.
    public var json: [UInt8] { json(showingScope: { _ in true }, collection: { _, _ in true }) }

    /// The manifest as a caller that sees only part of it reads it (ADR 0141; kv_engine filters
    /// GET_COLLECTIONS_MANIFEST the same way): the collections `collection(scope, name)` accepts, in the scopes
    /// `showingScope(scope)` accepts or that hold such a collection. The uid is the manifest's own.
    public func json(showingScope: (String) -> Bool, collection visible: (String, String) -> Bool) -> [UInt8] {
        var out = #"{"uid":"\#(uidHex)","scopes":["#
        var first = true
        for scope in scopes {
            let shown = scope.collections.filter { visible(scope.name, $0.name) }
            guard !shown.isEmpty || showingScope(scope.name) else { continue }
            if !first { out += "," }
            first = false
            out += #"{"name":"\#(scope.name)","uid":"\#(String(scope.id, radix: 16))","collections":["#
            for (j, c) in shown.enumerated() {
                if j > 0 { out += "," }
                out += #"{"name":"\#(c.name)","uid":"\#(String(c.id, radix: 16))","maxTTL":\#(c.maxTTL),"#
                out += #""history":false}"#
            }
            out += "]}"
        }
        out += "]}"
        return Array(out.utf8)
    }

    /// The body of an UNKNOWN_COLLECTION / UNKNOWN_SCOPE answer, as kv_engine sends it: the uid of the manifest the
    /// node has, so the client knows whether to fetch a newer one.
    public var unknownBody: [UInt8] { Array(#"{"manifest_uid":"\#(uidHex)"}"#.utf8) }
}
