import Logging
import SetteeCore
import Synchronization

/// The named collections a manifest has dropped (ADR 0138): every id from `CollectionsManifest.firstUserID` below its
/// `nextCollectionID` that it no longer lists (ids are never reused). Derived from the manifest alone, which every
/// node persists with its bucket, so a node that restarts mid-purge knows at warmup what is left to purge, and an id
/// the node's manifest has not reached yet (a replica that received a new collection's items before the manifest
/// that created it) is never taken for dropped. Pure value.
public struct DroppedCollections: Sendable, Equatable {
    /// The manifest's `nextCollectionID`: ids at or above it were never handed out.
    public var below: UInt32
    /// The named collections the manifest lists.
    public var live: Set<UInt32>

    /// Nothing dropped (a bucket without collections).
    public static let none = DroppedCollections(below: CollectionsManifest.firstUserID, live: [])

    public init(below: UInt32, live: Set<UInt32>) {
        self.below = below
        self.live = live
    }

    /// `manifest`'s dropped collections (none for nil: a bucket made before collections).
    public init(_ manifest: CollectionsManifest?) {
        guard let manifest else {
            self = .none
            return
        }
        var live = Set<UInt32>()
        for scope in manifest.scopes {
            for c in scope.collections where c.id >= CollectionsManifest.firstUserID { live.insert(c.id) }
        }
        self.init(below: manifest.nextCollectionID, live: live)
    }

    /// Whether items of collection `id` are to be purged.
    @inline(__always)
    public func contains(_ id: UInt32) -> Bool {
        id >= CollectionsManifest.firstUserID && id < below && !live.contains(id)
    }

    /// No collection was ever dropped.
    public var isEmpty: Bool { Int(below) - Int(CollectionsManifest.firstUserID) <= live.count }
}

/// Removes dropped collections' items from every vBucket (active, replica, pending, dead alike: each copy purges its
/// own) in memory and, through the flusher, from disk (ADR 0138), as kv_engine purges a dropped collection in the
/// background. No tombstones and no new seqnos: reads of a dropped collection already answer UnknownCollection, and
/// DCP already leaves its items out, so nothing downstream needs to see the removal; the vBucket's purge seqno is
/// not raised (no consumer must roll back).
///
/// Bounded: each hold of a vBucket's lock removes at most `Limits.collectionPurgeBatchItems` items (a pass over its
/// table), so writers to the bucket wait at most one such batch. An item with an unflushed version (dirty or queued),
/// a pending durable write or a lock is left for the next pass: its row would otherwise be written after its delete.
/// The thread runs passes while items are left (`Limits.collectionPurgeRetryMilliseconds` apart when a pass could
/// not take them all), then every `expiryPagerInterval` while anything was ever dropped (items a replica received
/// late from a producer with an older manifest), and otherwise sleeps until the next manifest change.
enum CollectionPurger {
    static func loop(_ core: EngineCore) {
        var eventsWrittenFor: (generation: UInt64, stateEpoch: UInt64)?
        while core.stop == .running {
            let generation = core.collectionPurgeGeneration.load(ordering: .acquiring)
            // Collection and scope events (ADR 0143) after a manifest change, or a vBucket state change since the
            // last pass (a vBucket that became active writes those its old active did not).
            let stateEpoch = core.stateEpoch.load(ordering: .acquiring)
            if eventsWrittenFor?.generation != generation || eventsWrittenFor?.stateEpoch != stateEpoch {
                if let manifest = core.collectionsManifest.withLock({ $0 }) {
                    CollectionEvents.reconcile(core, manifest)
                }
                eventsWrittenFor = (generation, stateEpoch)
            }
            let dropped = core.droppedCollections.withLock { $0 }
            let left = dropped.isEmpty ? 0 : pass(core, dropped, maxPerLock: Limits.collectionPurgeBatchItems).left
            core.collectionItemsToPurge.store(left, ordering: .relaxed)
            core.purgeWakeup.locked {
                guard core.stop == .running,
                    core.collectionPurgeGeneration.load(ordering: .acquiring) == generation
                else { return }
                if left > 0 {
                    core.purgeWakeup.waitLocked(seconds: Double(Limits.collectionPurgeRetryMilliseconds) / 1_000)
                } else if !dropped.isEmpty {
                    // Items of a dropped collection may still come from a producer with an older manifest (a
                    // replica's): look again at the expiry pager's pace.
                    core.purgeWakeup.waitLocked(seconds: core.options.expiryPagerInterval)
                } else {
                    core.purgeWakeup.waitLocked(seconds: Wakeup.maxWaitSeconds)
                }
            }
        }
    }

    /// One pass over every vBucket: removes what may be removed, in batches of at most `maxPerLock` per lock hold
    /// (at most `maxPerLock` per vBucket when `once`). Returns the items removed and those left.
    @discardableResult
    static func pass(
        _ core: EngineCore, _ dropped: DroppedCollections, maxPerLock: Int, once: Bool = false
    ) -> (purged: Int, left: Int) {
        var purged = 0
        var left = 0
        for vb in core.vbuckets {
            while true {
                let r = vb.table.withLock { $0.purgeCollections(dropped, max: max(1, maxPerLock)) }
                if r.purged > 0 {
                    purged += r.purged
                    core.memory.add(-r.freed)
                    core.stateRowChanged(vb.id)
                }
                if !r.more || once || core.stop != .running {
                    left += r.left
                    break
                }
            }
        }
        if purged > 0 {
            core.collectionItemsPurged.wrappingAdd(purged, ordering: .relaxed)
            core.wakeFlusherIfIdle()
            core.logger.debug("collection purger removed items", metadata: ["count": "\(purged)", "left": "\(left)"])
        }
        return (purged, left)
    }
}

extension BucketEngine {
    /// Live items (tombstones and prepares not counted) per collection in vBucket `vb` when it is active, nil
    /// otherwise: the named collections by the id their engine keys carry (dropped ones not purged yet included),
    /// the default collection (escaped keys included) under 0. One pass over the vBucket's table under its lock, as
    /// the tombstone purger's: STATS `collections` reads it on demand (ADR 0138), no counter is kept per write.
    public func collectionItemCounts(_ vb: VBucketID) -> [UInt32: Int]? {
        guard vb.index < core.vbuckets.count else { return nil }
        return core.vbuckets[vb.index].table.withLock { t -> [UInt32: Int]? in
            guard t.state == .active else { return nil }
            var counts: [UInt32: Int] = [:]
            var named = 0
            for (key, item) in t.items where !item.deleted {
                let id: UInt32? = key.withUnsafeBytes { raw in
                    guard raw.first == CollectionKey.engineMarker else { return nil }
                    return CollectionKey.decodePrefix(raw.dropFirst())?.id
                }
                guard let id, id != CollectionsManifest.defaultCollectionID,
                    id != CollectionSystemEvent.systemCollectionID
                else { continue }
                counts[id, default: 0] += 1
                named += 1
            }
            // Collection and scope event items (ADR 0143) are no collection's items.
            counts[CollectionsManifest.defaultCollectionID] = t.liveItems - named - t.systemItems
            return counts
        }
    }
}

extension VBucketTable {
    /// Removes up to `max` items of `dropped` collections that no unflushed version, prepare or lock holds; their
    /// rows go to `purgedRows` for the flusher (deleted while they still hold that version). `left`: the dropped
    /// collections' items still here afterwards; `more`: the batch was full (call again).
    mutating func purgeCollections(
        _ dropped: DroppedCollections, max: Int
    ) -> (freed: Int, purged: Int, left: Int, more: Bool) {
        var doomed: [DocKey] = []
        var matching = 0
        var more = false
        for (key, item) in items {
            let id: UInt32? = key.withUnsafeBytes { raw in
                guard raw.first == CollectionKey.engineMarker else { return nil }
                return CollectionKey.decodePrefix(raw.dropFirst())?.id
            }
            guard let id, dropped.contains(id) else { continue }
            matching += 1
            guard !more, !item.dirty, !item.queued, pending.isEmpty || pending[key] == nil,
                locks.isEmpty || locks[key] == nil
            else { continue }
            doomed.append(key)
            if doomed.count >= max { more = true }
        }
        var freed = 0
        for key in doomed {
            guard let item = items[key] else { continue }
            items[key] = nil
            let bytes = item.memoryFootprint(keyLength: key.count)
            memUsed -= bytes
            freed += bytes
            if !item.deleted { liveItems -= 1 }
            if !item.hasValue { nonResident -= 1 }
            purgedRows.append(PurgedRow(key: key, seqno: item.bySeqno, droppedCollection: true))
        }
        if !doomed.isEmpty {
            stateDirty = true
            items.shrinkIfSparse()
        }
        return (freed, doomed.count, matching - doomed.count, more)
    }
}
