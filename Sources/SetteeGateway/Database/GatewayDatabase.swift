import Foundation
import Logging
import SetteeAuth
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeReplication
import Synchronization

/// One sync gateway database: documents with revision trees, users, roles, sessions, `_local`
/// checkpoints and the changes feeds, all kept in one bucket (docs/adr/0011-gateway-bucket-layout.md).
/// A plain async API; the REST layer maps it to HTTP. `user` nil means the admin port: no access checks.
///
/// State: the in-memory `ChannelIndex` behind a mutex, built at open from the bucket's mutation stream
/// and kept current from it (so writes by other gateways and KV clients are seen) and, for this
/// gateway's own writes, updated as soon as the bucket accepted them.
public final class GatewayDatabase: Sendable {
    public let name: String
    /// The collection this object serves (ADR 0142).
    public let keyspace: Keyspace
    let bucket: any GatewayBucket
    let logger: Logger
    /// The options and sync function in force; `reconfigure` (`PUT /db/_config`) swaps both at once, and a
    /// write uses the ones it read at that step.
    let settings: Mutex<(options: DatabaseOptions, sync: any SyncRunner)>
    var options: DatabaseOptions { settings.withLock { $0.options } }
    /// The sync function in force, its runs counted in `collectionStats`.
    var sync: any SyncRunner { CountedSyncRunner(inner: settings.withLock { $0.sync }, stats: collectionStats) }
    /// Sync Gateway 3.1's per-collection figures of this keyspace (`/_expvar` `per_collection`, ADR 0152).
    let collectionStats = CollectionStats()
    /// Set while `_resync` runs (one at a time).
    let resyncing = Atomic<Bool>(false)
    let index = Mutex(ChannelIndex())
    /// The winners indexed last (`RevisionCache`): what an import of a KV client's write needs of the revision the
    /// write replaced.
    let revisionCache = Mutex(RevisionCache())
    /// Imports made and refused since the database opened.
    let importStats = ImportStats()
    /// The compiled `import_filter` in force (nil: every document is imported); `reconfigure` replaces it.
    let importFilter: Mutex<JavaScriptPredicate?>
    /// Delta sync counters (`delta_sync` in `/_expvar`).
    let deltaStats = DeltaSyncStats()
    /// BLIP bytes on the wire (`replication_bytes_sent`/`_received`).
    let replicationBytes = ReplicationByteStats()
    /// Documents `_purge` is removing, whose change-stream echoes are skipped.
    let purgeEchoes = Mutex(PurgeEchoes())
    let waiters = Mutex(WaiterTable())
    /// Passwords already checked against a user's bcrypt hash (so Basic authentication costs one bcrypt per
    /// user and password, not one per request).
    let verifiedPasswords = Mutex(VerifiedCredentials<String>(capacity: Limits.gatewayVerifiedPasswords))
    private let onlineFlag = Atomic<Bool>(true)
    let closedFlag = Atomic<Bool>(false)
    /// Microseconds since the epoch when the database opened (`instance_start_time`).
    let startTime: Int64
    private let consumer = Mutex<Task<Void, Never>?>(nil)
    /// Webhooks (`event_handlers`) and the ordered feed of changed documents that reaches them, armed once the
    /// bucket's existing documents are indexed (those are not changes).
    let events: GatewayEvents?
    let eventFeed: EventFeed
    /// Uptime nanoseconds of the last mutation the consumer handled (the open waits for a quiet stream).
    private let lastEvent = Atomic<Int64>(0)
    private let gapTimer = Atomic<Bool>(false)
    /// A task watches writes ahead of the change stream (`armOwnWriteTimer`).
    let ownWriteTimer = Atomic<Bool>(false)
    /// This gateway's reserved batch of sequences (GatewayDatabase+Sequences.swift) and its release timer.
    let sequenceState = Mutex(SequenceState())
    let sequenceReleaseTimer = Atomic<Bool>(false)
    /// vBuckets the bucket's stream restarted from 0, whose documents wait to be checked (GatewayDatabase+Restarts).
    let restarts = Mutex(RestartedVBuckets())
    /// How far tombstone purges reached (`PurgeHorizon`, kept in the bucket as `_sync:purged`); pulls from below it
    /// are refused (GatewayDatabase+TombstonePurge).
    let purgeHorizon = Mutex(PurgeHorizon())
    /// The tombstone compaction's status (`GET /db/_compact?type=tombstone`).
    let tombstoneCompaction = Mutex(TombstoneCompactionStatus())
    /// The attachment compaction's status (`GET /db/_compact?type=attachment`, ADR 0151).
    let attachmentCompaction = Mutex(AttachmentCompactionStatus())
    /// The blobs commits in flight refer to, and those a running attachment compaction must not sweep.
    let attachmentSweep = Mutex(AttachmentSweepGuard())
    /// Tombstones removed since the database opened (compaction and `_purge` of deleted documents).
    let tombstonesPurged = Atomic<Int>(0)
    /// Channel removal entries dropped from documents since the database opened (`ChannelHistoryRule`, ADR 0151).
    let channelRemovalsPruned = Atomic<Int>(0)
    /// The task that runs the tombstone compaction every `compactIntervalSeconds`.
    let compactionScheduler = Mutex<Task<Void, Never>?>(nil)
    /// Replaced revision bodies dropped since the database opened, by age or the byte bound (`OldBodyRule`, ADR 0156).
    let oldBodiesExpired = Atomic<Int>(0)
    /// The task that sweeps expired and excess old bodies (`sweepOldBodies`), and whether a sweep is going.
    let oldBodySweeper = Mutex<Task<Void, Never>?>(nil)
    let oldBodySweepRunning = Atomic<Bool>(false)

    /// Opens the database on `bucket`: reads the sequence counter, indexes everything the bucket holds,
    /// then applies the config's users and roles.
    public init(options: DatabaseOptions, bucket: any GatewayBucket, logger: Logger) async throws(GatewayError) {
        self.name = options.name
        self.bucket = bucket
        var logger = logger
        logger[metadataKey: "db"] = "\(options.name)"
        if !options.keyspace.isDefault { logger[metadataKey: "keyspace"] = "\(options.keyspace)" }
        self.logger = logger
        self.keyspace = options.keyspace
        self.settings = Mutex((options, try makeSyncRunner(options: options, logger: logger)))
        // The import filter's and the webhooks' threads live until they are shut down: stopped here when a later step
        // of the open throws (a database that failed to open has no `close()` to stop them).
        let filter = try Self.makeImportFilter(options)
        var opened = false
        defer { if !opened { filter?.shutdown() } }
        self.importFilter = Mutex(filter)
        self.startTime = Int64(Date().timeIntervalSince1970 * 1_000_000)
        let events: GatewayEvents?
        do {
            events = try options.eventHandlers.map { c throws(ConfigError) in
                try GatewayEvents(config: c, logger: logger)
            }
        } catch {
            throw .badRequest("event_handlers: \(error)")
        }
        defer { if !opened { events?.shutdown() } }
        self.events = events
        self.eventFeed = EventFeed(events: events)
        options.links?.join(self)
        adoptOtherKeyspacesGrants()

        let counter = try await bucketCall { () async throws(GatewayBucketError) in try await bucket.get(seqKey) }
        let allocated = counter.flatMap { UInt64(String(decoding: $0.value, as: UTF8.self)) } ?? 0
        if allocated > SequenceTracker.maxSequence {
            logger.error(
                "the sequence counter is past any sequence a gateway allocates; documents written from now on may not reach change feeds",
                metadata: ["key": "\(seqKey)", "value": "\(allocated)", "max": "\(SequenceTracker.maxSequence)"])
        }
        index.withLock { $0.sequences.skip(through: allocated) }

        lastEvent.store(Self.uptime(), ordering: .relaxed)
        let stream = bucket.mutations()
        let metadataStream = bucket.metadataMutations()
        let task = Task { [weak self] in
            // Each vBucket's mutations in order, different vBuckets' at the same time (`MutationLanes`).
            let lanes = MutationLanes(count: Limits.gatewayImportLanes, depth: Limits.gatewayImportLaneDepth)
            await withTaskGroup(of: Void.self) { group in
                if let metadataStream {
                    // A named collection's keyspace: the database's principals and released sequences (ADR 0142).
                    group.addTask { [weak self] in
                        for await m in metadataStream where m.restart == nil && KeyspaceBucket.isMetadataKey(m.key) {
                            guard let self else { return }
                            await self.handle(m)
                        }
                    }
                }
                for lane in 0..<lanes.count {
                    group.addTask { [weak self] in
                        while let m = await lanes.take(lane) {
                            guard let self else { return }
                            await self.handle(m)
                        }
                    }
                }
                await withTaskCancellationHandler {
                    for await m in stream {
                        guard self != nil else { break }
                        await lanes.put(m)
                    }
                    lanes.finish()
                } onCancel: {
                    lanes.cancel()
                }
            }
        }
        consumer.withLock { $0 = task }
        let start = Self.uptime()
        let idle = Int64(Limits.gatewayOpenIdleSeconds * 1e9)
        let ceiling = Int64(Limits.gatewayOpenIndexWaitSeconds * 1e9)
        while Self.uptime() - start < ceiling {
            try? await Task.sleep(for: .milliseconds(20))
            if Self.uptime() - lastEvent.load(ordering: .relaxed) > idle { break }
        }
        try await applyConfigPrincipals()
        try await loadPurgeHorizon()
        startCompactionScheduler()
        startOldBodySweeper()
        eventFeed.arm()
        opened = true
        let docs = index.withLock { $0.docs.count }
        logger.info("database open", metadata: ["docs": "\(docs)", "sequence": "\(allocated)"])
    }

    static func uptime() -> Int64 {
        Int64(clamping: DispatchTime.now().uptimeNanoseconds)
    }

    /// Stops following the bucket and wakes every waiting feed (the bucket itself stays open).
    public func close() async {
        guard !closedFlag.exchange(true, ordering: .acquiringAndReleasing) else { return }
        await releaseReservedSequences()
        onlineFlag.store(false, ordering: .relaxed)
        consumer.withLock {
            $0?.cancel()
            $0 = nil
        }
        compactionScheduler.withLock {
            $0?.cancel()
            $0 = nil
        }
        oldBodySweeper.withLock {
            $0?.cancel()
            $0 = nil
        }
        eventFeed.close()
        importFilter.withLock { $0 }?.shutdown()
        wakeAll()
    }

    public var isOnline: Bool { onlineFlag.load(ordering: .relaxed) }

    /// `_offline` / `_online`: offline wakes every feed (they end) and the REST layer answers 503.
    public func setOnline(_ online: Bool) async {
        onlineFlag.store(online && !closedFlag.load(ordering: .relaxed), ordering: .relaxed)
        if !online { wakeAll() }
    }

    /// `GET /db/`.
    public func info() async -> JSON {
        let seq = index.withLock { $0.sequences.stable }
        let online = isOnline
        return .object([
            ("db_name", .string(name)),
            ("update_seq", .number(Double(online ? seq : 0))),
            ("committed_update_seq", .number(Double(online ? seq : 0))),
            ("instance_start_time", .number(Double(startTime))),
            ("compact_running", .bool(tombstoneCompaction.withLock { $0.isRunning })),
            ("purge_seq", .number(Double(purgeHorizon.withLock { $0.purgedThrough }))),
            ("disk_format_version", .number(0)),
            ("state", .string(online ? "Online" : "Offline")),
        ])
    }

    // MARK: sequences

    /// Starts the timer that abandons a missing sequence after `skippedSequenceWaitSeconds`.
    func armGapTimer() {
        guard index.withLock({ $0.sequences.hasGap }) else { return }
        guard !gapTimer.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let wait = options.skippedSequenceWaitSeconds
        var waitedFor = index.withLock { $0.sequences.next }
        Task { [weak self] in
            while true {
                try? await Task.sleep(for: .seconds(wait))
                guard let self, !self.closedFlag.load(ordering: .relaxed) else { return }
                let (moved, gap, next) = self.index.withLock { idx -> (Bool, Bool, UInt64) in
                    let next = idx.sequences.next
                    // Abandon only a gap that has been the first one for a whole wait.
                    guard idx.sequences.hasGap, next == waitedFor else {
                        return (false, idx.sequences.hasGap, next)
                    }
                    return (idx.abandonFirstGap(), idx.sequences.hasGap, idx.sequences.next)
                }
                if moved {
                    self.logger.warning("abandoned a missing sequence", metadata: ["seq": "\(waitedFor)"])
                    self.wakeAll()
                }
                waitedFor = next
                if !gap {
                    self.gapTimer.store(false, ordering: .releasing)
                    // A gap may have opened between the check and the store.
                    if self.index.withLock({ $0.sequences.hasGap }) { self.armGapTimer() }
                    return
                }
            }
        }
    }

    // MARK: the bucket's mutation stream

    func handle(_ m: BucketMutation) async {
        lastEvent.store(Self.uptime(), ordering: .relaxed)
        if let restart = m.restart {
            vbucketRestarted(m.vbucket, vbucketCount: restart.vbucketCount, branched: restart.branched)
            return
        }
        index.withLock { $0.streamed(m.key, cas: m.cas) }
        if m.key.hasPrefix("_sync:") {
            handleMetadata(m)
            return
        }
        // A KV client's item whose key no document can have (`_design/x`, over-long): never imported or listed,
        // since no document read could serve it (`isDocumentID`).
        guard Self.isDocumentID(m.key) else { return }
        guard purgeEchoes.withLock({ $0.admits(m.key, cas: m.cas) }) else { return }
        if m.deleted && m.purged {
            // Another gateway's `_purge` (or this one's, unwatched): forgotten, never imported as a tombstone.
            if let change = index.withLock({ $0.remove(m.key) }) { notify(change) }
            return
        }
        if options.sharedBucketAccess {
            await handleShared(m)
            return
        }
        if m.deleted {
            // With import on, a KV delete of a gateway document reaches clients as a tombstone revision.
            if options.importDocs, await importDeletion(id: m.key) { return }
            if let change = index.withLock({ $0.remove(m.key) }) { notify(change) }
            return
        }
        // This gateway's own write (already indexed): no need to parse it again.
        let version = streamedVersion(m)
        if version == .indexed { return }
        switch StoredDocument.parse(id: m.key, value: m.value, cas: m.cas) {
        case .gateway(let doc):
            indexDocument(doc, streamed: true)
        case .external where version == .older:
            await handleCurrentItem(m.key)
        case .external(let body, let meta, let cas):
            await importFromStream(m.key, body: body, meta: meta, cas: cas)
        case .refused(let reason):
            if options.importDocs { refuseImport(m.key, reason: reason) }
        case .foreign, .deletedByKV, .absent, .legacy:
            return  // the last three come from shared bucket access only
        }
    }

    /// Imports an application's write seen on the change stream, when the database imports (`import_docs`).
    /// When the item changed since the entry (the import's CAS write fails), what it holds now is imported in its
    /// place, as Sync Gateway reloads a document whose import lost a CAS race: the stream delivers the newer version
    /// too, but only after everything queued before it, each of which would fail the same way. `rereads` bounds how
    /// often (an application writing the document again between each read and write).
    private func importFromStream(
        _ id: String, body: [(String, JSON)], meta: SyncMeta?, cas: CAS, rereads: Int = Limits.gatewayImportRereads
    ) async {
        guard options.importDocs else { return }
        do {
            if try await importDocument(id: id, body: body, meta: meta, cas: cas) == nil, rereads > 0 {
                await handleCurrentItem(id, rereads: rereads - 1)
            }
        } catch {
            // A document the import filter left out was counted and logged at debug level.
            if error == Self.filteredOut { return }
            logger.warning("import failed", metadata: ["doc": "\(id)", "error": "\(error)"])
        }
    }

    /// What the index holds of a stream entry's document, by CAS (a CAS is the item's version: a later write of the
    /// same item has a higher one).
    enum StreamedVersion {
        /// The version indexed: this gateway's own write, or one it read.
        case indexed
        /// Older than the version indexed: the stream is behind the bucket (a lagging stream delivers each of the
        /// application's writes, in turn). Importing such an entry's body would fail the CAS write after a sequence
        /// was taken, and leave the index behind until the stream caught up; an application's entry is handled from
        /// the item as it is now instead (a gateway's own older version is indexed as before: a no-op, no read).
        case older
        /// Not indexed, or newer.
        case unknown
    }

    func streamedVersion(_ m: BucketMutation) -> StreamedVersion {
        guard let indexed = index.withLock({ $0.docs[m.key]?.cas }) else { return .unknown }
        if indexed == m.cas { return .indexed }
        return m.cas < indexed ? .older : .unknown
    }

    /// A document's mutation with shared bucket access: `_sync` comes with it (from the XATTR, tombstones
    /// included), so an application's write or delete is told from the gateway's own by the item alone.
    private func handleShared(_ m: BucketMutation) async {
        // This gateway's own write (already indexed).
        let version = streamedVersion(m)
        if version == .indexed { return }
        if m.syncXattr == nil {
            // No `_sync` on the stream: an application's new document, or a stream that does not carry XATTRs.
            // The item itself says which (and is at least as new as this mutation).
            await handleCurrentItem(m.key)
            return
        }
        let parsed = StoredDocument.parseShared(
            id: m.key, body: m.value, sync: m.syncXattr, cas: m.cas, deleted: m.deleted)
        switch parsed {
        case .external, .deletedByKV:
            if version == .older {
                await handleCurrentItem(m.key)
                return
            }
        default: break
        }
        await handleParsed(m.key, parsed)
    }

    /// Handles `id` from its item as the bucket holds it now (in place of a stream entry that cannot say).
    /// `replacing` (a recheck, ADR 0096): the sequence of the version indexed when the recheck began; the bucket's
    /// version, or its absence, replaces that one even when older, and nothing else (a version the stream indexed
    /// while the item was read is at least as new as the read). False when the item could not be read.
    @discardableResult
    func handleCurrentItem(_ id: String, replacing: UInt64? = nil, rereads: Int = Limits.gatewayImportRereads) async
        -> Bool
    {
        let parsed: StoredDocument.Parsed
        do { parsed = try await readItem(id) ?? .absent } catch {
            logger.warning("cannot read an item to import", metadata: ["doc": "\(id)", "error": "\(error)"])
            return false
        }
        await handleParsed(id, parsed, replacing: replacing, rereads: rereads)
        return true
    }

    private func handleParsed(
        _ id: String, _ parsed: StoredDocument.Parsed, replacing: UInt64? = nil,
        rereads: Int = Limits.gatewayImportRereads
    ) async {
        switch parsed {
        case .gateway(let doc):
            indexDocument(doc, replacing: replacing, streamed: true)
        case .external(let body, let meta, let cas):
            await importFromStream(id, body: body, meta: meta, cas: cas, rereads: rereads)
        case .deletedByKV(let meta, let cas):
            guard options.importDocs else { return }
            _ = await importDeletion(id: id, known: (meta, cas))
        case .legacy(let body, let sync, let winnerDeleted, let cas):
            // A 1.x document: moved to the XATTR layout; the stream brings the moved item back here.
            _ = await migrateLegacyItem(id, body: body, sync: sync, winnerDeleted: winnerDeleted, cas: cas)
        case .absent:
            // Purged (or never the gateway's): nothing left to serve.
            let change = index.withLock { idx in
                replacing == nil || idx.docs[id]?.seq == replacing ? idx.remove(id) : nil
            }
            if let change { notify(change) }
        case .refused(let reason):
            if options.importDocs { refuseImport(id, reason: reason) }
        case .foreign:
            return
        }
    }

    private func handleMetadata(_ m: BucketMutation) {
        let key = m.key
        if key.hasPrefix(unusedSeqPrefix) {
            guard !m.deleted, let seq = UInt64(key.dropFirst(unusedSeqPrefix.count)) else { return }
            seeUnused(seq...seq)
        } else if key.hasPrefix(unusedSeqRangePrefix) {
            let maxBatch = sequenceState.withLock { $0.allocator.maxBatch }
            let suffix = key.dropFirst(unusedSeqRangePrefix.count)
            guard !m.deleted, let range = SequenceAllocator.parseRangeMarker(suffix, maxBatch: maxBatch) else { return }
            seeUnused(range)
        } else if key == purgeHorizonKey {
            // Another gateway's purge (or this one's): the horizon only moves up.
            guard !m.deleted else { return }
            let seen = PurgeHorizon(bytes: m.value)
            purgeHorizon.withLock { $0.purgedThrough = max($0.purgedThrough, seen.purgedThrough) }
        } else if key.hasPrefix(attachmentPrefix) {
            index.withLock { $0.attachmentBytes[key] = m.deleted ? nil : m.value.count }
        } else if key.hasPrefix(sessionPrefix) {
            index.withLock { idx in
                if m.deleted { idx.sessionKeys.remove(key) } else { idx.sessionKeys.insert(key) }
            }
        } else if key.hasPrefix(localPrefix) {
            index.withLock { idx in
                if m.deleted { idx.localKeys.remove(key) } else { idx.localKeys.insert(key) }
            }
        } else if case let (name, isRole)? = PrincipalRecord.parse(key: key) {
            if m.deleted {
                applyPrincipal(nil, name: name, isRole: isRole)
            } else if let json = try? JSON.parse(m.value), let p = PrincipalRecord(json: json, isRole: isRole) {
                applyPrincipal(p, name: name, isRole: isRole)
            }
        }
    }

    /// Indexes a version of a document this gateway has just written, ahead of its change stream (ADR 0098).
    func indexOwnWrite(_ doc: StoredDocument) {
        noteAheadOfStream(doc.id, cas: doc.cas)
        indexDocument(doc)
    }

    /// Indexes a document version (a no-op for one already indexed, or a newer one) and wakes the feeds it concerns.
    /// `replacing`: the version is installed over the indexed one while that one still has this sequence, even when
    /// newer (`ChannelIndex.reindex`, ADR 0096), and not at all once the stream indexed another.
    func indexDocument(_ doc: StoredDocument, replacing: UInt64? = nil, streamed: Bool = false) {
        // A version the stream brought (or an item read in its place) is indexed only while no purge of it is under
        // way: the purge's watch is checked again with the index change made under its lock (lock order: the watch,
        // then the index; nothing takes them the other way round), so a purge that began after the entry was
        // admitted either finds the document indexed and removes it, or is seen here (the purged document came back:
        // KVImportHistoryTests, under load).
        let change =
            streamed
            ? purgeEchoes.withLock { $0.isEcho(doc.id, cas: doc.cas) ? nil : indexChange(doc, replacing: replacing) }
            : indexChange(doc, replacing: replacing)
        guard let change else { return }
        shareSequences(doc.meta.recentSequences + [doc.meta.sequence])
        if !change.principals.isEmpty { shareGrants(of: doc) }
        rememberWinner(doc)
        notify(change)
        armGapTimer()
        if eventFeed.isArmed, let rev = doc.meta.tree.winner {
            let body = revisionJSON(id: doc.id, rev: rev, deleted: doc.meta.tree.winnerIsDeleted, members: doc.body)
            eventFeed.documentChanged(id: doc.id, body: body.serialized())
        }
    }

    /// `doc` applied to the index (`replacing`: as `indexDocument` says); the change, nil when nothing changed.
    private func indexChange(_ doc: StoredDocument, replacing: UInt64?) -> IndexChange? {
        index.withLock { idx -> IndexChange? in
            guard let replacing else { return idx.apply(doc) }
            return idx.docs[doc.id]?.seq == replacing ? idx.reindex(doc) : nil
        }
    }

    /// Puts `doc`'s winner in the revision cache: its body (as the tree or the item holds it) and its history up to
    /// the database's `revs_limit`.
    func rememberWinner(_ doc: StoredDocument) {
        let tree = doc.meta.tree
        guard let winner = tree.winner else { return }
        let body = tree.body(of: winner) ?? JSON.object(doc.body).serialized()
        let limit = min(options.revsLimit, Limits.gatewayRevisionCacheReadHistory)
        let history = tree.history(of: winner, limit: max(1, limit))
        let complete = history.last.map { tree.parent(of: $0) == nil } ?? false
        revisionCache.withLock {
            $0.put(doc.id, rev: winner, deleted: tree.winnerIsDeleted, body: body, history: history, complete: complete)
        }
    }

    /// Installs (or, nil, forgets) a principal version unless a newer one is known; wakes its feeds.
    /// `replacing` (a recheck, ADR 0096): the sequence of the version installed when the recheck began; `p` replaces
    /// that one even when older (a vBucket's new history lost the newer one), and nothing else.
    /// True when the index changed.
    @discardableResult
    func applyPrincipal(
        _ p: PrincipalRecord?, name: String, isRole: Bool, replacing: UInt64? = nil, shared: Bool = false
    ) -> Bool {
        let (applied, moved, affected) = index.withLock { idx -> (Bool, Bool, Set<String>) in
            let old = isRole ? idx.roles[name] : idx.users[name]
            if let replacing, old?.sequence != replacing { return (false, false, []) }
            let asStored = replacing != nil
            guard let p else {
                if isRole { idx.roles[name] = nil } else { idx.users[name] = nil }
                return (old != nil, false, isRole ? idx.usersWithRole(name) : [name])
            }
            let moved = idx.seeSequences(p.recentSequences + [p.sequence])
            // The same version, or (unless `asStored`) a newer one, is already installed.
            if let old, old.sequence == p.sequence || (old.sequence > p.sequence && !asStored) {
                return (false, moved, [])
            }
            if isRole { idx.roles[name] = p } else { idx.users[name] = p }
            return (true, moved, isRole ? idx.usersWithRole(name) : [name])
        }
        if moved { wakeAll() }
        if applied { wake(users: affected) }
        // `shared`: handed over by another keyspace of the database, which tells the rest itself.
        if applied && !shared && replacing == nil { sharePrincipal(p, name: name, isRole: isRole) }
        armGapTimer()
        return applied
    }
}

let seqKey = "_sync:seq"
let unusedSeqPrefix = "_sync:unusedSeq:"
/// `_sync:unusedSeqs:<from>:<to>`: a released range of a gateway's reserved batch (ADR 0045).
let unusedSeqRangePrefix = "_sync:unusedSeqs:"
let attachmentPrefix = "_sync:att:"
let localPrefix = "_sync:local:"
let sessionPrefix = "_sync:session:"
/// `{"purged_through": N}`: the database's `PurgeHorizon`, shared by every gateway on the bucket.
let purgeHorizonKey = "_sync:purged"
