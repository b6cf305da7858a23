import SetteeCore
import Synchronization

/// Writes the collection and scope event items (`CollectionSystemEvent`, ADR 0143) that bring each active vBucket to
/// the bucket's manifest, as kv_engine's `VB::Manifest::update` does on every active vBucket when a manifest arrives.
/// Each event is a mutation with its own seqno and CAS, queued for the flusher and seen by DCP like any item, so
/// replicas receive it with the engine's keys (replication's `engine` key mode) and warmup reloads it. Replica and
/// pending vBuckets write nothing: they get their events from their active.
///
/// Run by the collection purger's thread after every manifest change and every vBucket state change (a promoted
/// replica whose active died before writing an event writes it then), never on an event loop: it passes over each
/// active vBucket's table once, under its lock, to find the event items it holds (as the purger's own pass does).
enum CollectionEvents {
    /// Writes the missing events of every active vBucket; returns how many were written. Nothing when the manifest
    /// never named a scope or collection, or while the disk has failed (no write is acknowledged then).
    @discardableResult
    static func reconcile(_ core: EngineCore, _ manifest: CollectionsManifest) -> Int {
        guard
            manifest.nextScopeID > CollectionsManifest.firstUserID
                || manifest.nextCollectionID > CollectionsManifest.firstUserID
        else { return 0 }
        guard !core.diskFailed.load(ordering: .relaxed) else { return 0 }
        var written = 0
        for vb in core.vbuckets {
            if core.stop != .running { break }
            let nowNs = core.clock.nowNanoseconds()
            var fx = Effects()
            written += vb.table.withLock { t -> Int in
                guard t.state == .active, !t.held else { return 0 }
                return t.writeCollectionEvents(manifest, nowNanoseconds: nowNs, fx: &fx)
            }
            if fx.lastSeqno != .zero { core.apply(fx, vb: vb.id) }
        }
        return written
    }
}

extension VBucketTable {
    /// The event items this vBucket holds, by engine key, and the newest manifest uid they carry. An item whose value
    /// was evicted or does not read as an event is in `unreadable`: left alone, neither rewritten nor ended.
    func collectionEventItems() -> (events: [[UInt8]: CollectionSystemEvent], uid: UInt64, unreadable: Set<[UInt8]>) {
        var events: [[UInt8]: CollectionSystemEvent] = [:]
        var unreadable = Set<[UInt8]>()
        var uid: UInt64 = 0
        guard systemItems > 0 else { return (events, uid, unreadable) }
        for (key, item) in items where !item.deleted && key.withUnsafeBytes({ CollectionSystemEvent.isSystemKey($0) }) {
            let k = key.bytes
            guard let value = item.value, let e = CollectionSystemEvent.decode(value) else {
                unreadable.insert(k)
                continue
            }
            events[k] = e
            uid = max(uid, e.manifestUID)
        }
        return (events, uid, unreadable)
    }

    /// Writes the events `CollectionSystemEvent.changes` gives for this vBucket and `manifest`; returns how many.
    mutating func writeCollectionEvents(
        _ manifest: CollectionsManifest, nowNanoseconds: UInt64, fx: inout Effects
    ) -> Int {
        let held = collectionEventItems()
        var changes = CollectionSystemEvent.changes(existing: held.events, to: manifest, previousUID: held.uid)
        if !held.unreadable.isEmpty { changes.removeAll { held.unreadable.contains($0.engineKey) } }
        for event in changes {
            let key = event.engineKey
            let here = slot(key)
            _ = write(
                key: key, existing: item(at: here), value: event.encoded, flags: 0, expiry: 0, datatype: .raw,
                deleted: false, nowNanoseconds: nowNanoseconds, fx: &fx, at: here)
        }
        return changes.count
    }
}

extension BucketEngine {
    /// Writes the collection and scope events the bucket's manifest calls for in every active vBucket now (what the
    /// purger's thread does after each manifest or vBucket state change; tests and engines opened with
    /// `backgroundCollectionPurge` off). Returns how many were written.
    @discardableResult
    public func writeCollectionEvents() -> Int {
        guard let manifest = core.collectionsManifest.withLock({ $0 }) else { return 0 }
        return CollectionEvents.reconcile(core, manifest)
    }
}
