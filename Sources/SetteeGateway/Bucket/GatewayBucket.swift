import SetteeClient
import SetteeCore
import SetteeSubdoc

/// One item read from the bucket the gateway is mounted on.
public struct BucketItem: Sendable, Equatable {
    public var value: [UInt8]
    public var cas: CAS
    public init(value: [UInt8], cas: CAS) {
        self.value = value
        self.cas = cas
    }
}

/// One mutation seen on the bucket's change stream (a write or a deletion by anyone: this gateway,
/// another gateway on the same bucket, or a KV client such as an SDK or the CLI).
public struct BucketMutation: Sendable, Equatable {
    public var key: String
    /// The new value; empty for a deletion.
    public var value: [UInt8]
    public var cas: CAS
    public var deleted: Bool
    public var vbucket: VBucketID
    public var seqno: SeqNo
    /// The value of the system XATTR `_sync` (shared bucket access, docs/adr/0037), for a write or for the
    /// tombstone a deletion left; nil when the item has none.
    public var syncXattr: [UInt8]?
    /// A deletion made by a gateway's `_purge` (its tombstone keeps the system XATTR `_purged`, `PurgeMarker`):
    /// every gateway on the bucket drops the document without importing the deletion.
    public var purged: Bool
    /// Set on a marker that is not a mutation: the stream reads `vbucket` again from seqno 0, because the position
    /// it had reached is no longer in the vBucket's history (a failover promoted a copy that lacked some writes, the
    /// bucket was flushed, tombstones above it were purged; ADR 0096). A document of that vBucket delivered before
    /// and not delivered again may be gone without a deletion ever being delivered: the consumer checks what it
    /// holds of the vBucket against the bucket. `key` is empty.
    public var restart: VBucketRestart?
    public init(
        key: String, value: [UInt8], cas: CAS, deleted: Bool, vbucket: VBucketID, seqno: SeqNo,
        syncXattr: [UInt8]? = nil, purged: Bool = false
    ) {
        self.key = key
        self.value = value
        self.cas = cas
        self.deleted = deleted
        self.vbucket = vbucket
        self.seqno = seqno
        self.syncXattr = syncXattr
        self.purged = purged
    }

    /// The marker of `vb`'s restart from seqno 0 in a bucket of `vbucketCount` vBuckets; `branched`: not a restart,
    /// but the stream's first open of `vb` or a reopen in a newer history (`ChangeStreamBatch.branched`, ADR 0098).
    public static func restart(_ vb: VBucketID, vbucketCount: Int, branched: Bool = false) -> BucketMutation {
        var m = BucketMutation(key: "", value: [], cas: .zero, deleted: false, vbucket: vb, seqno: .zero)
        m.restart = VBucketRestart(vbucketCount: vbucketCount, branched: branched)
        return m
    }

    /// Splits a stored value (XATTR section when `hasXattrs`, then the body) into the body, `_sync` and whether
    /// it carries the purge marker.
    static func split(_ value: [UInt8], hasXattrs: Bool) -> (body: [UInt8], syncXattr: [UInt8]?, purged: Bool) {
        guard hasXattrs else { return (value, nil, false) }
        guard let (xattrs, body) = XattrBlob.split(value) else {
            return (XattrSection.body(of: value, hasXattrs: true), nil, false)
        }
        return (body, xattrs.value(of: Array(syncXattrName.utf8)), xattrs.value(of: PurgeMarker.name) != nil)
    }
}

/// What a restart marker (`BucketMutation.restart`) says besides its vBucket: how many vBuckets the bucket has, so
/// that the consumer finds which of its keys are in the restarted one (`VBucketHash.vbucket(forKey:count:)`).
public struct VBucketRestart: Sendable, Equatable {
    public var vbucketCount: Int
    /// The stream did not restart the vBucket: it opened it for the first time, or in a newer history, at a position
    /// that history still holds. Only writes the consumer made itself and the stream has not delivered yet may be gone.
    public var branched: Bool
    public init(vbucketCount: Int, branched: Bool = false) {
        self.vbucketCount = vbucketCount
        self.branched = branched
    }
}

/// Why a bucket operation failed, in the terms the gateway maps to HTTP statuses.
public enum GatewayBucketError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The key does not exist (replace, remove).
    case notFound
    /// The key exists (insert) or its CAS changed since it was read (replace, remove with CAS).
    case exists
    /// The value is over the bucket's item size limit.
    case tooBig
    /// Worth retrying: a node is failing over, the map is moving, a timeout.
    case temporary(String)
    /// Anything else, with what the bucket said.
    case failed(String)

    public var description: String {
        switch self {
        case .notFound: return "not found"
        case .exists: return "exists"
        case .tooBig: return "value too large"
        case .temporary(let m): return "temporarily unavailable: \(m)"
        case .failed(let m): return m
        }
    }
}

/// The storage a sync gateway database is mounted on: an embedded in-process bucket (`"server":
/// "walrus:"` or a directory, built on `BucketEngine`) or a bucket of a settee cluster reached through
/// its admin API and the smart client (`"server": "http://host:8091"`). Everything the gateway keeps
/// (documents with their revision trees, users, roles, sessions, the sequence counter, `_local`
/// checkpoints) is an item of this bucket, so several gateways on one bucket agree.
public protocol GatewayBucket: Sendable {
    /// The bucket's name.
    var name: String { get }
    /// The item, or nil when the key does not exist.
    func get(_ key: String) async throws(GatewayBucketError) -> BucketItem?
    /// Stores a new key; `.exists` when it is present.
    func insert(_ key: String, value: [UInt8], expiry: UInt32) async throws(GatewayBucketError) -> CAS
    /// Replaces the key only if its CAS is still `cas`; `.exists` when it changed, `.notFound` when gone.
    func replace(_ key: String, value: [UInt8], cas: CAS, expiry: UInt32) async throws(GatewayBucketError) -> CAS
    /// Stores the key whatever it held.
    func upsert(_ key: String, value: [UInt8], expiry: UInt32) async throws(GatewayBucketError) -> CAS
    /// Sets the key's expiry (memcached's rule: up to 30 days relative seconds, above that an absolute epoch time; 0
    /// never) without changing its value: Sync Gateway touches a `_local` document when it is read, so a checkpoint
    /// in use never expires (`local_doc_expiry_secs`). `.notFound` when absent.
    func touch(_ key: String, expiry: UInt32) async throws(GatewayBucketError)
    /// Deletes the key (`cas` zero: whatever it holds); the deletion's CAS; `.notFound` when absent.
    @discardableResult func remove(_ key: String, cas: CAS) async throws(GatewayBucketError) -> CAS
    /// A sub-document MULTI_LOOKUP (shared bucket access reads `_sync` and the body in one call); nil when the
    /// key does not exist (with ACCESS_DELETED: not even as a tombstone).
    func lookupIn(_ key: String, _ request: SubdocRequest) async throws(GatewayBucketError) -> LookupInResult?
    /// A sub-document MULTI_MUTATION, only if the document's CAS is still `cas` (zero: no condition): `.exists`
    /// when it changed (or, with the ADD flag, exists), `.notFound` when it is gone, `.failed` when a path failed.
    func mutateIn(_ key: String, _ request: SubdocRequest, cas: CAS) async throws(GatewayBucketError) -> CAS
    /// Atomically adds `delta` to a counter item, creating it with `initial` when absent; the new value.
    func increment(_ key: String, delta: UInt64, initial: UInt64) async throws(GatewayBucketError) -> UInt64
    /// Every item the bucket holds, then every later mutation, each vBucket in seqno order, until the
    /// consuming task is cancelled or `close()` is called. A consumer that falls behind is not dropped.
    func mutations() -> AsyncStream<BucketMutation>
    /// A second stream the database follows for its metadata keys only (`KeyspaceBucket.isMetadataKey`): a named
    /// collection's keyspace reads principals, sessions and released sequences from the default collection (ADR
    /// 0142). Nil (the default): everything is on `mutations()`.
    func metadataMutations() -> AsyncStream<BucketMutation>?
    /// `_ensure_full_commit`: returns once every write acknowledged before the call is on disk
    /// (GatewayBucket+FullCommit.swift).
    func ensureFullCommit() async throws(GatewayBucketError)
    /// Stops change streams and closes connections.
    func close() async
    /// The bucket's metadata purge interval in days (`purgeInterval`: how long its tombstones are kept), when known;
    /// a gateway database's `meta_purge_interval` defaults to it.
    var metadataPurgeIntervalDays: Double? { get }
}

extension GatewayBucket {
    /// Unknown unless the bucket says (a cluster bucket: the gateway then uses Couchbase's default).
    public var metadataPurgeIntervalDays: Double? { nil }
}

extension GatewayBucket {
    public func metadataMutations() -> AsyncStream<BucketMutation>? { nil }
}

extension GatewayBucket {
    /// A bucket without a touch of its own: the value read and replaced, CAS-conditioned, with the new expiry (a
    /// concurrent write wins: it set its own expiry).
    public func touch(_ key: String, expiry: UInt32) async throws(GatewayBucketError) {
        guard let item = try await get(key) else { throw .notFound }
        do { _ = try await replace(key, value: item.value, cas: item.cas, expiry: expiry) } catch .exists {}
    }
}

/// The system XATTR in which a database with `enable_shared_bucket_access` keeps a document's metadata.
let syncXattrName = "_sync"

/// How a gateway's `_purge` marks its deletion so that every gateway on the bucket tells it from an application's
/// KV delete (which, with `import_docs`, becomes a tombstone revision): the deletion is one MULTI_MUTATION that sets
/// the system XATTR `_purged` and deletes the whole document, so the tombstone keeps the marker (ADR 0029) and
/// every change stream's deletion carries it (ADR 0074). A later write of the key replaces the tombstone and its
/// attributes.
public enum PurgeMarker {
    /// The attribute's name.
    public static let name = Array("_purged".utf8)

    /// The marked deletion of a live item (no CAS condition: `_purge` removes whatever the item holds).
    public static let deletion: SubdocRequest = .multiMutation([
        SubdocSpec(operation: .command(.dictUpsert), flags: .xattrPath, path: name, value: Array("true".utf8)),
        SubdocSpec(operation: .wholeDocumentDelete, path: []),
    ])
}
