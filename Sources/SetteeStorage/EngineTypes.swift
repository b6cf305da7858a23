import SetteeCore

/// Why a data operation did not succeed. Each case maps to one memcached status (see SetteeNode).
/// Operating errors only: programmer errors crash with context instead.
public enum EngineError: Error, Equatable, Sendable {
    /// No such document (or it expired, or it is a tombstone). Status 0x01.
    case keyNotFound
    /// CAS mismatch, or ADD of an existing key. Status 0x02.
    case keyExists
    /// APPEND/PREPEND to a missing key. Status 0x05.
    case notStored
    /// INCR/DECR on a value that is not an ASCII decimal u64. Status 0x06.
    case deltaBadValue
    /// Value above `Limits.maxValueSize`. Status 0x03.
    case valueTooLarge
    /// Retry later: warming up, over the memory quota with nothing evictable, or the flusher is behind. Status 0x86.
    case temporaryFailure
    /// The document is locked (GET_AND_LOCK). Status 0x09.
    case locked
    /// Bad arguments (e.g. key too long, empty key). Status 0x04.
    case invalidArguments
    /// The value is evicted to disk: call `BucketEngine.fetch(_:_:completion:)`, then retry the operation.
    case wouldBlock
    /// The vBucket is not active on this node. Status 0x07 with the cluster map.
    case notMyVBucket
    /// A durable write on this key is waiting for its commit; the client retries. Status 0xa2.
    case syncWriteInProgress
    /// A disk failure that is not retried (a failed bucket flush or rollback, a value that fails its
    /// checksum). Status 0x84.
    case ioFailure(String)
    /// The bucket cannot persist now (disk full, I/O error); the flusher retries by itself. A durable
    /// write is refused (TMPFAIL 0x86 with the reason) or, if it was already applied and waiting, answered
    /// SYNC_WRITE_AMBIGUOUS; plain writes get TMPFAIL once the unpersisted backlog passes its bound.
    case persistenceFailing(String)
}

/// The state of a vBucket on this node (Couchbase's active / replica / pending / dead).
public enum VBucketState: String, Sendable, Codable, CaseIterable {
    case active, replica, pending, dead
}

/// Everything stored about a document besides key and value.
public struct ItemMetadata: Sendable, Equatable {
    public var cas: CAS
    public var revSeqno: RevSeqNo
    public var bySeqno: SeqNo
    public var flags: UInt32
    /// Absolute Unix seconds, 0 = never.
    public var expiry: UInt32
    public var datatype: Datatype
    public var deleted: Bool

    public init(
        cas: CAS, revSeqno: RevSeqNo, bySeqno: SeqNo, flags: UInt32, expiry: UInt32, datatype: Datatype,
        deleted: Bool
    ) {
        self.cas = cas
        self.revSeqno = revSeqno
        self.bySeqno = bySeqno
        self.flags = flags
        self.expiry = expiry
        self.datatype = datatype
        self.deleted = deleted
    }
}

/// A document as a read returns it.
public struct Document: Sendable, Equatable {
    public var value: [UInt8]
    public var meta: ItemMetadata
    public init(value: [UInt8], meta: ItemMetadata) {
        self.value = value
        self.meta = meta
    }
}

/// Identifies one mutation: the client's "mutation token".
public struct MutationToken: Sendable, Equatable {
    public var vbucket: VBucketID
    public var uuid: VBucketUUID
    public var seqno: SeqNo
    public init(vbucket: VBucketID, uuid: VBucketUUID, seqno: SeqNo) {
        self.vbucket = vbucket
        self.uuid = uuid
        self.seqno = seqno
    }
}

/// What a successful mutation returns.
public struct MutationResult: Sendable, Equatable {
    public var cas: CAS
    public var token: MutationToken
    public init(cas: CAS, token: MutationToken) {
        self.cas = cas
        self.token = token
    }
}

/// SET / ADD / REPLACE.
public enum StoreOperation: Sendable {
    /// Store unconditionally (with CAS: only if it matches).
    case set
    /// Store only if the key does not exist (a tombstone counts as absent).
    case add
    /// Store only if the key exists (with CAS: and it matches).
    case replace
}

/// APPEND / PREPEND.
public enum ConcatOperation: Sendable {
    case append, prepend
}

/// One vBucket's sequence numbers, for OBSERVE_SEQNO and `stat vbucket-seqno`.
public struct VBucketSeqnoInfo: Sendable, Equatable {
    public var vbucket: VBucketID
    public var state: VBucketState
    public var uuid: VBucketUUID
    public var highSeqno: SeqNo
    /// Highest seqno whose batch is committed and fsynced.
    public var persistedSeqno: SeqNo
    public init(vbucket: VBucketID, state: VBucketState, uuid: VBucketUUID, highSeqno: SeqNo, persistedSeqno: SeqNo) {
        self.vbucket = vbucket
        self.state = state
        self.uuid = uuid
        self.highSeqno = highSeqno
        self.persistedSeqno = persistedSeqno
    }
}

/// Bucket-wide counters for STAT and the admin API.
public struct EngineStats: Sendable, Equatable {
    /// Live (not deleted, not expired-and-noticed) documents in active vBuckets.
    public var currItems: Int = 0
    /// Bytes the bucket accounts for (keys, values, metadata overhead).
    public var memUsed: Int = 0
    /// RAM quota in bytes.
    public var memQuota: Int = 0
    /// Mutations waiting for the flusher (`ep_queue_size`).
    public var queueSize: Int = 0
    /// Items the flusher has taken but not yet committed plus queued (`ep_flusher_todo`).
    public var flusherTodo: Int = 0
    /// Active vBuckets (`vb_active_num`).
    public var vbActiveNum: Int = 0
    /// Items whose value is evicted from memory.
    public var nonResidentItems: Int = 0
    /// Total items committed by the flusher since start.
    public var totalPersisted: Int = 0
    /// Flusher batches committed since start.
    public var flusherCommits: Int = 0
    /// vBucket state rows the flusher left out of its batches (their items carry the high seqno and max CAS).
    public var stateRowsSkipped: Int = 0
    /// Background fetches of evicted values.
    public var bgFetched: Int = 0
    /// Values evicted since start.
    public var evictions: Int = 0
    /// Items expired (lazily or by the pager) since start.
    public var expired: Int = 0
    /// Tombstones purged (older than the bucket's purge interval) since start, in every vBucket state.
    public var tombstonesPurged: Int = 0
    /// Dropped collections' items not purged yet (ADR 0138), as of the purger's last pass.
    public var collectionItemsToPurge: Int = 0
    /// Dropped collections' items purged since start.
    public var collectionItemsPurged: Int = 0
    /// Tombstones held in active vBuckets (deleted or expired documents not purged yet).
    public var tombstones: Int = 0
    /// Bytes of the bucket's files on disk.
    public var diskUsed: Int = 0
    /// Warmup: items loaded, and seconds it took (0 until done).
    public var warmupItems: Int = 0
    public var warmupSeconds: Double = 0
    /// Why the bucket cannot persist now (the last failed commit); nil while persistence works.
    public var diskFailure: String? = nil
    /// Failed commits since start (retries included).
    public var persistFailures: Int = 0
    /// Seconds the current persistence failure has lasted (0 while persistence works).
    public var persistFailingSeconds: Double = 0
    /// Rows skipped as corrupt by a repair warmup (`EngineOptions.repair`), 0 otherwise.
    public var repairedRows: Int = 0
    /// Durable writes since start (kv_engine's `vb_{active,replica}_sync_write_*_count`).
    public var syncWrites = SyncWriteCounts()
    public init() {}
}

/// A bucket's durable writes since start, as kv_engine counts them per vBucket state
/// (`vb_active_sync_write_accepted_count` and its siblings): a prepare an active vBucket accepted ends committed
/// (its level was met, or the copy holding it became active and committed it) or aborted (timed out, or its
/// persistence failed); the difference is what is in flight or was cut short by the vBucket changing state.
public struct SyncWriteCounts: Sendable, Equatable {
    /// Prepares accepted by an active vBucket.
    public var accepted = 0
    /// Prepares made visible on this node.
    public var committed = 0
    /// Prepares an active vBucket aborted: their writers were answered ambiguous or an error.
    public var aborted = 0
    /// Prepares a replica vBucket received from its active.
    public var replicaAccepted = 0
    public init() {}
}

/// A key's state on one copy of its vBucket, as OBSERVE (0x92) reports it (`BucketEngine.observe`).
public struct KeyObservation: Sendable, Equatable {
    public enum State: Sendable, Equatable {
        /// In memory, not on disk yet.
        case notPersisted
        /// In memory and on disk.
        case persisted
        /// No such key, or its deletion is on disk.
        case notFound
        /// Deleted; the deletion is not on disk yet.
        case deleted
    }

    public var state: State
    public var cas: CAS

    public init(state: State, cas: CAS) {
        self.state = state
        self.cas = cas
    }
}

/// The metadata a SET_WITH_META / DEL_WITH_META carries for the version it installs (kv_engine
/// `docs/Document.md`): the document's own CAS (nanoseconds of its origin's hybrid clock, below 2^63), revSeqno
/// (at most `Limits.maxRevSeqno`), flags, expiry (absolute Unix seconds, 0 = never; ignored for a deletion) and
/// datatype (a deletion's is `.xattr` when its value is the XATTRs the tombstone keeps, else `.raw`).
public struct IncomingMeta: Sendable, Equatable {
    public var cas: CAS
    public var revSeqno: RevSeqNo
    public var flags: UInt32
    public var expiry: UInt32
    public var datatype: Datatype
    public var deleted: Bool

    public init(cas: CAS, revSeqno: RevSeqNo, flags: UInt32, expiry: UInt32, datatype: Datatype, deleted: Bool = false)
    {
        self.cas = cas
        self.revSeqno = revSeqno
        self.flags = flags
        self.expiry = expiry
        self.datatype = datatype
        self.deleted = deleted
    }

    /// Whether this version beats the stored one under kv_engine's revision-seqno ("most writes wins") conflict
    /// resolution (`docs/BinaryProtocol.md`, Set With Meta / Delete With Meta, `conflict_resolution_mode=seqno`):
    /// the higher revSeqno wins; equal, the higher CAS; for a SET_WITH_META, equal CAS, the later expiry; equal expiry,
    /// the lower flags. A DEL_WITH_META stops at CAS. All equal: the stored version stays.
    public func winsBySeqno(storedRevSeqno: RevSeqNo, storedCAS: CAS, storedExpiry: UInt32, storedFlags: UInt32) -> Bool
    {
        if revSeqno != storedRevSeqno { return revSeqno > storedRevSeqno }
        if cas != storedCAS { return cas > storedCAS }
        if deleted { return false }
        if expiry != storedExpiry { return expiry > storedExpiry }
        return flags < storedFlags
    }
}

/// How a with-meta write is checked against the version the vBucket holds (live or tombstone).
public enum WithMetaConflict: Sendable, Equatable {
    /// kv_engine's "seqno" (revision-id) conflict resolution (`IncomingMeta.winsBySeqno`): the incoming version wins
    /// with a higher revSeqno, or an equal one and a higher CAS, and for a SET_WITH_META then a later expiry, then
    /// lower flags; else `.keyExists` and nothing changes. No stored version: it wins.
    case revSeqnoThenCAS
    /// SKIP_CONFLICT_RESOLUTION_FLAG: the incoming version wins whatever is stored.
    case skip
    /// Only where no live document is (a tombstone or nothing); else `.keyExists` (ADD_WITH_META semantics).
    case onlyIfAbsent
}
