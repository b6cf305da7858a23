import NIOCore
import SetteeCore
import SetteeJSON
import SetteeProtocol
import SetteeSubdoc
import Synchronization

/// One collection of a bucket, as the SDKs' `bucket.scope(s).collection(c)` (ADR 0129, issue 70 item 3): the typed
/// key-value and sub-document operations of `BucketClient`, with every key sent as `LEB128(collection id) ‖ key`.
///
/// The id is resolved with GET_COLLECTION_ID (0xbb) on first use and cached in the client. When a node answers an
/// operation UNKNOWN_COLLECTION (the collection was dropped, or dropped and created again under a new id) the handle
/// forgets the id, resolves it once more and repeats the operation once with the new id (the refusal is definite, so
/// a mutation is never applied twice); if the collection is gone, or the node still refuses it, the operation fails
/// `ClientError.collectionNotFound` naming the collection. `_default._default` needs no resolution and works on a
/// client without `ClientOptions.collections`; a named collection needs it (`invalidArguments` otherwise).
///
/// A value: cheap to make, safe to share; its cache lives in the `BucketClient`.
public struct CollectionHandle: Sendable {
    public let client: BucketClient
    public let scope: String
    public let name: String
    /// Whether this is `_default._default` (decided once, not per operation).
    let isDefault: Bool
    /// The id this handle (and its copies) last used, read without the client's lock: an operation on a resolved
    /// handle neither builds the `scope.collection` path nor looks it up in the client's cache under its lock (issue
    /// 70's bench row, ADR 0143 session 61). Kept equal to what the handle learns from the client's cache.
    private let resolved: ResolvedCollectionID

    init(client: BucketClient, scope: String, name: String) {
        self.client = client
        self.scope = scope
        self.name = name
        self.isDefault = scope == CollectionsManifest.defaultName && name == CollectionsManifest.defaultName
        self.resolved = ResolvedCollectionID()
    }

    /// `scope.collection`, as GET_COLLECTION_ID takes it.
    public var path: String { "\(scope).\(name)" }

    public func get(_ key: String) async throws -> GetResult {
        try await run { try await client.get(key, collection: $0) }
    }

    /// GET_META of a key given as its bytes: the metadata of its document or tombstone (`deleted`), nil when it has
    /// neither (restore's newer-CAS policy compares with it).
    public func getMeta(_ key: [UInt8]) async throws -> (meta: DocumentMeta, deleted: Bool)? {
        try await run { try await client.getMeta(keyBytes: key, collection: $0) }
    }

    /// GET of a key given as its bytes, which need not be UTF-8 (restore's key; see `setWithMeta`).
    public func get(_ key: [UInt8]) async throws -> GetResult {
        try await run { try await client.get(keyBytes: key, collection: $0) }
    }

    /// Creates or replaces the document.
    public func upsert(
        _ key: String, _ value: [UInt8], flags: UInt32 = 0, expiry: UInt32 = 0, datatype: UInt8 = 0,
        durability: DurabilityLevel? = nil
    ) async throws -> MutationResult {
        try await run {
            try await client.store(
                .set, key, collection: $0, value, flags: flags, expiry: expiry, cas: .zero, datatype: datatype,
                durability: durability)
        }
    }

    /// Creates the document; fails `.keyExists` when it exists.
    public func insert(
        _ key: String, _ value: [UInt8], flags: UInt32 = 0, expiry: UInt32 = 0, datatype: UInt8 = 0,
        durability: DurabilityLevel? = nil
    ) async throws -> MutationResult {
        try await run {
            try await client.store(
                .add, key, collection: $0, value, flags: flags, expiry: expiry, cas: .zero, datatype: datatype,
                durability: durability)
        }
    }

    /// Replaces an existing document; with a non-zero `cas`, only if it still has that CAS.
    public func replace(
        _ key: String, _ value: [UInt8], flags: UInt32 = 0, expiry: UInt32 = 0, cas: CAS = .zero, datatype: UInt8 = 0,
        durability: DurabilityLevel? = nil
    ) async throws -> MutationResult {
        try await run {
            try await client.store(
                .replace, key, collection: $0, value, flags: flags, expiry: expiry, cas: cas, datatype: datatype,
                durability: durability)
        }
    }

    public func remove(_ key: String, cas: CAS = .zero, durability: DurabilityLevel? = nil) async throws
        -> MutationResult
    {
        try await run { try await client.remove(key, collection: $0, cas: cas, durability: durability) }
    }

    /// SET_WITH_META (ADR 0147): stores the document with its own `meta` (CAS, revSeqno, flags, absolute expiry,
    /// datatype), as restore and XDCR do. The server keeps it only if it wins conflict resolution (higher revSeqno,
    /// then higher CAS) unless `skipConflictResolution`; a loss is `ClientError.keyExists`. A non-zero `guardCAS`
    /// must be the stored version's. Needs write and manage on the bucket (Full/Cluster Admin, bucket_full_access).
    public func setWithMeta(
        _ key: String, _ value: [UInt8], meta: DocumentMeta, guardCAS: CAS = .zero, skipConflictResolution: Bool = false
    ) async throws -> MutationResult {
        try await setWithMeta(
            Array(key.utf8), value, meta: meta, guardCAS: guardCAS, skipConflictResolution: skipConflictResolution)
    }

    /// `setWithMeta` of a key given as its bytes, which need not be UTF-8: restore writes back the exact key a
    /// backup streamed (the memcached protocol's keys are bytes; a `String` would have replaced invalid sequences).
    public func setWithMeta(
        _ key: [UInt8], _ value: [UInt8], meta: DocumentMeta, guardCAS: CAS = .zero,
        skipConflictResolution: Bool = false
    ) async throws -> MutationResult {
        try await run {
            try await client.withMeta(
                .setWithMeta, keyBytes: key, collection: $0, value, meta: meta, guardCAS: guardCAS,
                skipConflictResolution: skipConflictResolution)
        }
    }

    /// ADD_WITH_META: `setWithMeta` only where no live document is (a tombstone or nothing); else `keyExists`.
    public func addWithMeta(_ key: String, _ value: [UInt8], meta: DocumentMeta) async throws -> MutationResult {
        try await addWithMeta(Array(key.utf8), value, meta: meta)
    }

    /// `addWithMeta` of a key given as its bytes (see `setWithMeta(_:_:meta:guardCAS:skipConflictResolution:)`).
    public func addWithMeta(_ key: [UInt8], _ value: [UInt8], meta: DocumentMeta) async throws -> MutationResult {
        try await run {
            try await client.withMeta(
                .addWithMeta, keyBytes: key, collection: $0, value, meta: meta, guardCAS: .zero,
                skipConflictResolution: false)
        }
    }

    /// DEL_WITH_META: leaves a tombstone with `meta`'s CAS and revSeqno (`value`: the XATTR section it keeps, with
    /// the XATTR datatype; empty for none), whether or not the document exists. Conflicts as `setWithMeta`.
    public func deleteWithMeta(
        _ key: String, meta: DocumentMeta, value: [UInt8] = [], guardCAS: CAS = .zero,
        skipConflictResolution: Bool = false
    ) async throws -> MutationResult {
        try await deleteWithMeta(
            Array(key.utf8), meta: meta, value: value, guardCAS: guardCAS,
            skipConflictResolution: skipConflictResolution)
    }

    /// `deleteWithMeta` of a key given as its bytes (see `setWithMeta(_:_:meta:guardCAS:skipConflictResolution:)`).
    public func deleteWithMeta(
        _ key: [UInt8], meta: DocumentMeta, value: [UInt8] = [], guardCAS: CAS = .zero,
        skipConflictResolution: Bool = false
    ) async throws -> MutationResult {
        try await run {
            try await client.withMeta(
                .delWithMeta, keyBytes: key, collection: $0, value, meta: meta, guardCAS: guardCAS,
                skipConflictResolution: skipConflictResolution)
        }
    }

    /// Sets a new expiry (seconds, or an absolute time) without changing the value.
    public func touch(_ key: String, expiry: UInt32) async throws -> MutationResult {
        try await run { try await client.touch(key, collection: $0, expiry: expiry) }
    }

    /// Adds `delta`; creates the counter with `initial` when missing (fails `.keyNotFound` if `initial` is nil).
    public func increment(
        _ key: String, delta: UInt64 = 1, initial: UInt64? = nil, expiry: UInt32 = 0,
        durability: DurabilityLevel? = nil
    ) async throws -> CounterResult {
        try await run {
            try await client.counter(
                .increment, key, collection: $0, delta: delta, initial: initial, expiry: expiry,
                durability: durability)
        }
    }

    /// `BucketClient.lookupIn` in this collection.
    public func lookupIn(_ key: String, _ request: SubdocRequest) async throws -> LookupInResult? {
        try await run { try await client.lookupIn(key, collection: $0, request) }
    }

    /// `BucketClient.mutateIn` in this collection.
    public func mutateIn(_ key: String, _ request: SubdocRequest, cas: CAS = .zero) async throws -> MutationResult {
        try await run { try await client.mutateIn(key, collection: $0, request, cas: cas) }
    }

    /// Runs `operation` with the collection's id; on UNKNOWN_COLLECTION resolves the id again (once) and repeats it.
    private func run<T>(_ operation: (UInt32) async throws -> T) async throws -> T {
        if isDefault { return try await operation(CollectionsManifest.defaultCollectionID) }
        let id: UInt32
        if let known = resolved.id {
            id = known
        } else {
            id = try await client.collectionID(scope: scope, collection: name)
            resolved.id = id
        }
        do {
            return try await operation(id)
        } catch ClientError.collectionNotFound {
            resolved.id = nil
            let fresh = try await client.collectionID(scope: scope, collection: name, refresh: true)
            resolved.id = fresh
            do {
                return try await operation(fresh)
            } catch ClientError.collectionNotFound(let answer) {
                resolved.id = nil
                client.cacheCollectionID(path, nil)
                throw ClientError.collectionNotFound(
                    "\(path) (id \(fresh)) in bucket \(client.options.bucket): the key's node refused it twice "
                        + "(it answered \(answer.isEmpty ? "UNKNOWN_COLLECTION" : answer))")
            }
        }
    }
}

/// A collection handle's resolved id, shared by the handle's copies: a 32-bit id, or nil (not resolved, or forgotten
/// after UNKNOWN_COLLECTION). Read and written atomically, so copies used from any task see one id.
final class ResolvedCollectionID: Sendable {
    /// `UInt64(id)`, or `unresolved`.
    private let word = Atomic<UInt64>(ResolvedCollectionID.unresolved)
    private static let unresolved = UInt64.max

    var id: UInt32? {
        get {
            let w = word.load(ordering: .relaxed)
            return w == Self.unresolved ? nil : UInt32(truncatingIfNeeded: w)
        }
        set { word.store(newValue.map { UInt64($0) } ?? Self.unresolved, ordering: .relaxed) }
    }
}

extension BucketClient {
    /// A handle on collection `name` of scope `scope` (`_default`, `_default` is the default collection). Nothing is
    /// sent until its first operation.
    public func collection(_ scope: String, _ name: String) -> CollectionHandle {
        CollectionHandle(client: self, scope: scope, name: name)
    }

    /// The id of collection `scope.collection`: 0 for `_default._default`; else from the cache, or (when not cached,
    /// or `refresh`) GET_COLLECTION_ID asked of any node (those with an open connection first; the next only when
    /// one cannot be reached). Fails `collectionNotFound` when the node answers UNKNOWN_COLLECTION or UNKNOWN_SCOPE,
    /// `invalidArguments` for a named collection on a client without `ClientOptions.collections` (the node would
    /// not read key prefixes) or a path the node refuses, `timeout` when no node answers within the operation
    /// deadline.
    public func collectionID(scope: String, collection: String, refresh: Bool = false) async throws -> UInt32 {
        if scope == CollectionsManifest.defaultName && collection == CollectionsManifest.defaultName {
            return CollectionsManifest.defaultCollectionID
        }
        guard options.collections else {
            throw ClientError.invalidArguments(
                "collection \(scope).\(collection) needs HELLO Collections: set ClientOptions.collections")
        }
        let path = "\(scope).\(collection)"
        if !refresh, let id = cachedCollectionID(path) { return id }
        let request = RequestFrame(opcode: .getCollectionID, value: ByteBuffer(string: path))
        var unreachable: [String] = []
        for node in anyNodeAddresses() {
            let r: Frame
            do { r = try await send(request, to: node, timeoutMs: options.operationTimeoutMs) } catch let e
                as ClientError
            {
                throw e
            } catch {
                unreachable.append("\(node)")
                continue
            }
            switch r.status {
            case .success:
                // Extras: u64 manifest uid, u32 collection id.
                guard r.extras.readableBytes >= 12,
                    let id: UInt32 = r.extras.getInteger(at: r.extras.readerIndex + 8)
                else { throw ClientError.server(status: r.status.rawValue, message: "malformed GET_COLLECTION_ID") }
                cacheCollectionID(path, id)
                return id
            case .unknownCollection, .unknownScope:
                cacheCollectionID(path, nil)
                let uid = Self.manifestUID(r.value)
                throw ClientError.collectionNotFound(
                    "\(path) in bucket \(options.bucket)"
                        + (uid.map { " (node \(node) has manifest uid \($0))" } ?? " (node \(node))"))
            default:
                throw ClientError.from(status: r.status, opcode: .getCollectionID, message: String(buffer: r.value))
                    ?? .server(status: r.status.rawValue, message: "")
            }
        }
        throw ClientError.timeout(
            operation: "get_collection_id \(path) (no node reachable: \(unreachable.joined(separator: ", ")))",
            afterMs: options.operationTimeoutMs)
    }

    /// The `manifest_uid` of an UNKNOWN_COLLECTION / UNKNOWN_SCOPE body (`{"manifest_uid":"<hex>"}`), if present.
    static func manifestUID(_ body: ByteBuffer) -> String? {
        (try? JSON.parse(Array(body.readableBytesView)))?["manifest_uid"]?.stringValue
    }
}
