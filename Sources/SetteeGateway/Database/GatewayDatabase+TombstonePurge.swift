import Logging
import SetteeCore
import SetteeDocument
import SetteeJSON
import Synchronization

/// Tombstone purging (ADR 0145): documents whose winner has been deleted for `meta_purge_interval` are removed from the
/// bucket, history and all, by a compaction that runs every `compact_interval_days` and on demand
/// (`POST /db/_compact?type=tombstone`), as Sync Gateway's tombstone compaction does. Before a batch goes, the
/// database's `PurgeHorizon` is raised past it in the bucket, so a replica whose checkpoint predates a purged
/// tombstone is refused its pull (410) rather than silently keeping the deleted document.
extension GatewayDatabase {
    /// The purge interval in force, in seconds (`meta_purge_interval`, else the bucket's, else Couchbase's 3 days).
    var tombstonePurgeIntervalSeconds: Double {
        TombstonePurgeRule.intervalSeconds(
            configDays: options.metaPurgeIntervalDays, bucketDays: bucket.metadataPurgeIntervalDays)
    }

    /// Throws `checkpointPredatesPurge` when a pull from `since` may have missed a purged tombstone's deletion.
    public func admitPull(since: ChangesSince) throws(GatewayError) {
        let horizon = purgeHorizon.withLock { $0 }
        guard horizon.admits(since) else { throw .checkpointPredatesPurge(since: since, horizon: horizon) }
    }

    /// Reads the horizon the bucket keeps (at open).
    func loadPurgeHorizon() async throws(GatewayError) {
        let bucket = self.bucket
        guard
            let item = try await bucketCall({ () async throws(GatewayBucketError) in
                try await bucket.get(purgeHorizonKey)
            })
        else { return }
        let stored = PurgeHorizon(bytes: item.value)
        purgeHorizon.withLock { $0.purgedThrough = max($0.purgedThrough, stored.purgedThrough) }
    }

    /// Raises the horizon to `seq`, in the bucket first (CAS loop: another gateway may be raising it too), then here.
    /// Done before the tombstones at or below `seq` are purged, so no purge is ever unannounced, even after a crash.
    func raisePurgeHorizon(to seq: UInt64) async throws(GatewayError) {
        let bucket = self.bucket
        for _ in 0..<Limits.gatewayWriteRetries {
            let item = try await bucketCall { () async throws(GatewayBucketError) in
                try await bucket.get(purgeHorizonKey)
            }
            let stored = item.map { PurgeHorizon(bytes: $0.value) } ?? PurgeHorizon()
            if stored.purgedThrough >= seq {
                purgeHorizon.withLock { $0.purgedThrough = max($0.purgedThrough, stored.purgedThrough) }
                return
            }
            let value = PurgeHorizon(purgedThrough: seq).json().serialized()
            do {
                if let item {
                    _ = try await bucket.replace(purgeHorizonKey, value: value, cas: item.cas, expiry: 0)
                } else {
                    _ = try await bucket.insert(purgeHorizonKey, value: value, expiry: 0)
                }
                purgeHorizon.withLock { $0.purgedThrough = max($0.purgedThrough, seq) }
                return
            } catch .exists {
                continue
            } catch .notFound {
                continue
            } catch {
                throw GatewayError.bucket(error)
            }
        }
        throw .unavailable("the purge horizon kept changing")
    }

    // MARK: the compaction

    /// `POST /db/_compact?type=tombstone` (`action=start`): starts a run in the background and answers its status;
    /// 503 when one is running already (Sync Gateway's answer).
    public func startTombstoneCompaction() throws(GatewayError) -> JSON {
        let now = options.clock.nowSeconds()
        guard tombstoneCompaction.withLock({ $0.start(now: now) }) else {
            throw .unavailable("Process already running")
        }
        Task { [weak self] in await self?.runTombstoneCompaction() }
        return tombstoneCompactionStatus()
    }

    /// `POST /db/_compact?type=tombstone&action=stop`: the run stops after the document it is on; 400 when none runs.
    public func stopTombstoneCompaction() throws(GatewayError) -> JSON {
        guard tombstoneCompaction.withLock({ $0.requestStop() }) else { throw .badRequest("Process already stopped") }
        return tombstoneCompactionStatus()
    }

    /// `GET /db/_compact?type=tombstone`.
    public func tombstoneCompactionStatus() -> JSON { tombstoneCompaction.withLock { $0.json() } }

    /// Runs the compaction every `compactIntervalSeconds` while the database is open (skipped while one is running).
    func startCompactionScheduler() {
        let task = Task { [weak self] in
            while !Task.isCancelled {
                guard let wait = self?.options.compactIntervalSeconds else { return }
                try? await Task.sleep(for: .seconds(max(wait, 0.01)))
                guard let self, !Task.isCancelled, !self.closedFlag.load(ordering: .relaxed) else { return }
                if self.tombstoneCompaction.withLock({ $0.start(now: self.options.clock.nowSeconds()) }) {
                    await self.runTombstoneCompaction()
                }
            }
        }
        compactionScheduler.withLock { $0 = task }
    }

    /// One run (its status already `running`): every indexed document whose winner is deleted is read, and those due
    /// (`TombstonePurgeRule.isDue`) are purged, `Limits.gatewayTombstonePurgeBatch` at a time, each batch announced
    /// first (`raisePurgeHorizon`); then the due channel removals of documents not written since, and the recent
    /// sequences of those not written since the previous run, are pruned (`pruneIdleMetadata`).
    func runTombstoneCompaction() async {
        let interval = tombstonePurgeIntervalSeconds
        let candidates = index.withLock { idx in idx.docs.compactMap { id, entry in entry.deleted ? id : nil } }
            .sorted()
        var failure: String?
        var start = 0
        batches: while start < candidates.count {
            let end = min(start + Limits.gatewayTombstonePurgeBatch, candidates.count)
            var due: [StoredDocument] = []
            for id in candidates[start..<end] {
                if stopRequested { break batches }
                guard let loaded = try? await load(id), case .found(let doc) = loaded else { continue }
                let now = options.clock.nowSeconds()
                tombstoneCompaction.withLock { $0.docsChecked += 1 }
                if TombstonePurgeRule.isDue(
                    winnerDeleted: doc.meta.tree.winnerIsDeleted, tombstonedAt: doc.meta.tombstonedAt, now: now,
                    intervalSeconds: interval)
                {
                    due.append(doc)
                }
            }
            start = end
            guard let highest = due.map(\.meta.sequence).max() else { continue }
            do { try await raisePurgeHorizon(to: highest) } catch {
                failure = "\(error)"
                break
            }
            for doc in due {
                if stopRequested { break batches }
                do {
                    if try await purgeTombstone(doc) {
                        tombstoneCompaction.withLock { $0.docsPurged += 1 }
                    }
                } catch {
                    failure = "\(error)"
                    break batches
                }
            }
        }
        if failure == nil && !stopRequested {
            do {
                let pruned = try await pruneIdleMetadata { stopRequested }
                tombstoneCompaction.withLock {
                    $0.channelHistoryPruned = pruned.removals
                    $0.recentSequencesTrimmed = pruned.recentSequences
                }
            } catch {
                failure = "\(error)"
            }
        }
        let (purged, pruned, trimmed) = tombstoneCompaction.withLock { s in
            s.finish(error: failure)
            return (s.docsPurged, s.channelHistoryPruned, s.recentSequencesTrimmed)
        }
        if let failure {
            logger.warning("tombstone compaction failed", metadata: ["error": "\(failure)", "purged": "\(purged)"])
        } else if purged > 0 || pruned > 0 || trimmed > 0 {
            logger.info(
                "tombstone compaction",
                metadata: [
                    "purged": "\(purged)", "checked": "\(candidates.count)", "channel_history_pruned": "\(pruned)",
                    "recent_sequences_trimmed": "\(trimmed)",
                ])
        }
    }

    private var stopRequested: Bool {
        closedFlag.load(ordering: .relaxed) || tombstoneCompaction.withLock { $0.state == .stopping }
    }

    /// Purges `doc` (read as a tombstone) if the bucket still holds that version: false when it changed since (a
    /// re-creation, another gateway's purge), in which case the index keeps or reads again what the bucket holds.
    private func purgeTombstone(_ doc: StoredDocument) async throws(GatewayError) -> Bool {
        let id = doc.id
        if !purgeEchoes.withLock({ $0.begin(id) }) {
            logger.warning("purging without watching the change stream's echoes", metadata: ["doc": "\(id)"])
        }
        // Forgotten before the bucket delete (so the stream's deletion is not imported), only if still this version.
        let forgotten = index.withLock { idx -> IndexChange?? in
            guard idx.docs[id]?.seq == doc.meta.sequence else { return .none }
            return .some(idx.remove(id))
        }
        guard let change = forgotten else {
            await endTombstoneWatch(id, deletedWith: nil)
            return false
        }
        if let change { notify(change) }
        revisionCache.withLock { $0.remove(id) }
        let deletion: CAS
        do { deletion = try await purgeItem(id, cas: doc.cas) } catch {
            await endTombstoneWatch(id, deletedWith: nil)
            // The item changed (or went) since it was read: index what it holds now.
            await handleCurrentItem(id)
            switch error {
            case .exists, .notFound: return false
            default: throw GatewayError.bucket(error)
            }
        }
        noteAheadOfStream(id, cas: deletion)
        await endTombstoneWatch(id, deletedWith: deletion)
        _ = tombstonesPurged.add(1, ordering: .relaxed)
        return true
    }

    private func endTombstoneWatch(_ id: String, deletedWith cas: CAS?) async {
        guard purgeEchoes.withLock({ $0.end(id, deletedWith: cas) }) else { return }
        await handleCurrentItem(id)
    }

    // MARK: figures

    /// The database's bounded-metadata figures (`/_expvar`, `/_metrics`; ADRs 0145 and 0151), from the index.
    func storedFigures() -> MetadataFigures {
        index.withLock { idx in
            var f = MetadataFigures()
            f.docs = idx.docs.count
            for entry in idx.docs.values {
                if entry.deleted { f.tombstones += 1 }
                f.revisions += entry.revisions
                f.liveRevisions += entry.liveRevisions
                f.channelHistoryEntries += entry.removals.count
                f.oldBodies += entry.oldBodies
                f.oldBodyBytes += entry.oldBodyBytes
            }
            f.sessions = idx.sessionKeys.count
            f.checkpoints = idx.localKeys.count
            f.attachmentBlobs = idx.attachmentBytes.count
            f.attachmentBytes = idx.attachmentBytes.values.reduce(0, +)
            return f
        }
    }
}

/// What a gateway database keeps, counted (`GatewayDatabase.storedFigures`).
struct MetadataFigures: Sendable, Equatable {
    /// Documents indexed, tombstones included.
    var docs = 0
    /// Documents whose winner is deleted.
    var tombstones = 0
    /// Revisions the documents' trees keep.
    var revisions = 0
    /// Leaves that are not deletions (winners and live conflicting branches; ADR 0156).
    var liveRevisions = 0
    /// Channel removal entries the documents keep (`_sync.channels` members for channels left).
    var channelHistoryEntries = 0
    /// Bodies of revisions other than the winners (conflicting leaves, ancestors kept for replicators), and bytes.
    var oldBodies = 0
    var oldBodyBytes = 0
    /// Session items in the bucket (expired ones leave when the bucket expires them).
    var sessions = 0
    /// `_local` documents (replicators' checkpoints) in the bucket.
    var checkpoints = 0
    /// Attachment blobs in the bucket, and their bytes.
    var attachmentBlobs = 0
    var attachmentBytes = 0
}
