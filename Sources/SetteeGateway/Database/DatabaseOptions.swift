import SetteeCore
import SetteeJSON

/// How one gateway database is configured (the `databases.{name}` object of the config file).
public struct DatabaseOptions: Sendable {
    /// The database's name in URLs (`/demo/...`).
    public var name: String
    /// The sync function's source; nil runs the default `function(doc){channel(doc.channels);}`.
    public var syncSource: String?
    /// `import_filter`: the JavaScript function that decides which documents KV clients write are imported
    /// (`GatewayDatabase.importFilter`); nil imports all.
    public var importFilterSource: String? = nil
    /// Revisions kept per branch of a document's revision tree.
    public var revsLimit: Int
    /// Import documents written to the bucket by KV clients (`import_docs`).
    public var importDocs: Bool
    /// Accept `new_edits=false` revisions that branch the tree (replication conflicts).
    public var allowConflicts: Bool
    /// Users from the config file, by name (`GUEST` for the guest), in the admin REST shape.
    public var users: [String: JSON]
    /// Roles from the config file, by name.
    public var roles: [String: JSON]
    /// Seconds a missing sequence may hold back the changes feeds before it is abandoned.
    public var skippedSequenceWaitSeconds: Double
    /// JavaScript threads running the sync function.
    public var syncThreads: Int
    /// Heap one run of the sync function may hold before it is stopped and the write answers 500 (ADR 0111; tests
    /// lower it).
    public var syncHeapLimitBytes = Limits.jsHeapMaxBytes
    /// Seconds a write of this gateway may stay ahead of the change stream before it is read again (tests shorten it).
    public var ownWriteStreamWaitSeconds = Limits.gatewayOwnWriteStreamWaitSeconds
    /// `enable_shared_bucket_access` (Sync Gateway 2.x, docs/adr/0037): documents keep the gateway's metadata in
    /// the system XATTR `_sync` and their body exactly as the application wrote it; off, the 1.x layout (ADR 0011).
    /// A config file's database has it on unless it says `false` (`DatabaseConfig.sharedBucketAccess`, Sync Gateway
    /// 3.0's default); this type, built by code, keeps the 1.x layout unless told, so each caller states its layout.
    public var sharedBucketAccess = false
    /// Attachment bytes one revision read with its attachments inline (`?attachments=true`, `_bulk_get`,
    /// `open_revs`) may hold; past it the read answers 413 (tests lower it).
    public var maxInlineAttachmentBytes = GatewayHTTPLimits.maxBulkReadBytes
    /// `event_handlers` (webhooks); nil: none.
    public var eventHandlers: EventHandlersConfig? = nil
    /// `meta_purge_interval` in days: a tombstone (a document whose winner is deleted) older than this is purged by
    /// the tombstone compaction (`GatewayDatabase+TombstonePurge.swift`, ADR 0145). Nil: the bucket's
    /// `metadataPurgeIntervalDays`, else `Limits.defaultPurgeIntervalDays` (Couchbase's 3 days).
    public var metaPurgeIntervalDays: Double? = nil
    /// Seconds between background tombstone compactions (`compact_interval_days`; tests shorten it).
    public var compactIntervalSeconds = Limits.gatewayCompactIntervalDays * 86_400
    /// `local_doc_expiry_secs`: the bucket expiry a `_local` document gets when written and again when read, so a
    /// replicator's checkpoint goes once the replicator has not been seen for this long (ADR 0151).
    public var localDocExpirySeconds = Limits.gatewayLocalDocExpirySeconds
    /// `old_rev_expiry_seconds`: seconds a replaced revision's body is kept (while delta sync is active,
    /// `delta_sync.rev_max_age_seconds` instead, as Sync Gateway); 0 keeps it without an age bound (ADR 0156).
    public var oldRevExpirySeconds = Limits.gatewayOldRevExpirySeconds
    /// Bytes of replaced revision bodies the database keeps in all, oldest evicted first (tests lower it).
    public var oldBodyMaxBytes = Limits.gatewayOldBodyBytes
    /// Seconds between sweeps of expired and excess old bodies: nil, the window (at least 1 s) up to
    /// `Limits.gatewayOldBodySweepSeconds`; tests that call `sweepOldBodies` themselves set a long one.
    public var oldBodySweepSeconds: Double? = nil
    /// The wall clock a tombstone's age is read from (`_sync.tombstoned_at` is stamped with it; tests use a manual one).
    public var clock: any WallClock = SystemWallClock()
    /// `delta_sync`: JSON deltas in BLIP `rev` messages both ways (ADR 0125); off by default, as in Sync Gateway.
    public var deltaSync = DeltaSyncConfig.disabled
    /// The collection this database object serves (ADR 0142): `_default._default` unless the config's `scopes` name
    /// others, each of which gets a `GatewayDatabase` of its own over a `KeyspaceBucket`.
    public var keyspace = Keyspace.defaultCollection
    /// The database's other keyspaces, with which this one shares sequences and principals; nil: a database of one
    /// collection.
    public var links: KeyspaceLinks? = nil

    public init(
        name: String, syncSource: String? = nil, revsLimit: Int = 1000, importDocs: Bool = false,
        allowConflicts: Bool = true, users: [String: JSON] = [:], roles: [String: JSON] = [:],
        skippedSequenceWaitSeconds: Double = Limits.gatewaySkippedSequenceWaitSeconds, syncThreads: Int = 2
    ) {
        self.name = name
        self.syncSource = syncSource
        self.revsLimit = revsLimit
        self.importDocs = importDocs
        self.allowConflicts = allowConflicts
        self.users = users
        self.roles = roles
        self.skippedSequenceWaitSeconds = skippedSequenceWaitSeconds
        self.syncThreads = syncThreads
    }
}
