import Logging
import SetteeCore
import SetteeStreams
import Synchronization

/// One vBucket: its hash table, dirty queue, sequence numbers and persistence waiters behind one lock.
///
/// States of an item (see `Item`):
/// ```
///   (absent) --mutation--> dirty+queued --flusher takes--> dirty --commit, same seqno--> clean
///       clean --item pager--> evicted (value nil) --bg fetch--> clean
///       any --mutation--> dirty+queued (again)
/// ```
/// Invariants (hold whenever the lock is free):
/// 1. `highSeqno` ≥ every item's `bySeqno`; it never decreases, also across restarts and bucket flush,
///    except when a non-active vBucket is rolled back (to 0: it then holds nothing).
/// 2. `persistedSeqno` ≤ `highSeqno`, and every mutation with seqno ≤ `persistedSeqno` is committed
///    and fsynced (or superseded by a later committed version of the same key).
/// 3. `dirtyQueue` holds each queued key once, in the order they became queued; its entries' seqnos
///    increase. The first entry's seqno - 1 bounds what a partial flush may call persisted.
/// 4. `hlc.maxCAS` ≥ every item's CAS; each flushed batch persists it, in the state row or (ADR 0061) as the
///    CAS of the batch's newest item, which warmup observes.
/// 5. `memUsed`, `liveItems`, `nonResident` equal the sums over `items` (mirrored into the bucket's
///    `MemoryTracker` by the caller through `Effects`).
/// 6. Waiters all have seqno > `persistedSeqno` (the others were completed).
/// The lock is never held across I/O, LZ4, or a completion callback.
final class VBucket: Sendable {
    let id: VBucketID
    let table: Mutex<VBucketTable>

    init(id: VBucketID, table: consuming VBucketTable) {
        self.id = id
        self.table = Mutex(table)
    }
}

/// A durability waiter: completed once `seqno` is persisted (or the disk failed / bucket closed).
struct PersistenceWaiter {
    var seqno: SeqNo
    var completion: @Sendable (Result<Void, EngineError>) -> Void
}

/// One queued key: the item that was current when the key was queued, whose box gives the flusher the key's
/// bytes (no key allocation, 16 bytes an entry; ADR 0048). The flusher looks the key's current item up and drops
/// this reference before changing that item, so clearing `queued` never copies the box. A key replaced while
/// queued keeps its old box alive here until the flusher takes the key: at most one old box per queue entry.
struct DirtyEntry {
    /// Nil once the flusher has taken the entry (it releases the box before changing the table's item).
    var item: Item?
    /// The seqno that made the key queued (its first unflushed mutation).
    var seqno: SeqNo
}

/// Side effects of work done under a vBucket lock, applied to bucket-wide counters after it is released.
struct Effects {
    var memDelta = 0
    var enqueued = 0
    var expired = 0
    /// Expired items whose evicted value has XATTRs: fetched before they expire, so the tombstone keeps
    /// their system XATTRs (empty, and not allocated, almost always).
    var fetchBeforeExpiry: [[UInt8]] = []
    /// Something expired, or is to be fetched before it expires: the caller must `apply` these effects.
    var expiredAny: Bool { expired != 0 || !fetchBeforeExpiry.isEmpty }
    /// Highest seqno a mutation under the lock assigned (zero: none); change observers are told it.
    var lastSeqno: SeqNo = .zero
}

/// A purged tombstone's row, deleted by the flusher only while it still holds that version (`seqno`): a key written
/// again after the purge has a newer row, which stays.
struct PurgedRow {
    var key: DocKey
    var seqno: SeqNo
    /// A dropped collection's item (ADR 0138), deleted whether it is a tombstone or not; else a purged tombstone's.
    var droppedCollection = false
}

/// The vBucket's `vbucket_state` row as the flusher writes it.
struct StateRow {
    var vb: UInt16
    var state: VBucketState
    var highSeqno: SeqNo
    var maxCAS: CAS
    var purgeSeqno: SeqNo
    /// Encoded outside the lock (`FailoverLog.encoded`); the flusher keeps each vBucket's last encoding.
    var failoverLog: FailoverLog
}

struct VBucketTable {
    // A read's fields first (`items`, `state`, `pending`): with the lock, in the vBucket object's first two cache
    // lines, which `BucketEngine.warm` loads ahead of a batch of look-ups (ADR 0114).
    var items = ItemTable()
    var state: VBucketState = .active
    /// Durable writes applied but not committed (prepares), with the committed version readers see
    /// meanwhile (BucketEngine+SyncWrites.swift); empty unless a durable write is in flight.
    var pending: [DocKey: PendingSyncWrite] = [:]
    var dirtyQueue: [DirtyEntry] = []
    var highSeqno: SeqNo = .zero
    var persistedSeqno: SeqNo = .zero
    var hlc = HybridLogicalClock()
    var failoverLog: FailoverLog
    /// The highest seqno of a tombstone purged from this vBucket (`purgeTombstones`, ADR 0095): a change feed from a
    /// position above 0 and below it may miss deletions and must roll back to 0. Persisted in the state row.
    var purgeSeqno: SeqNo = .zero
    /// Purged tombstones whose rows the flusher has not deleted yet (it takes them with its next batch).
    var purgedRows: [PurgedRow] = []
    /// The highest revision seqno of a purged tombstone: a key written again after its tombstone was purged
    /// continues from here, so its revision seqno never goes back (kv_engine's max deleted revision).
    var maxPurgedRev = RevSeqNo(0)
    /// The state row changed without a mutation (state change, new failover entry): flush it.
    var stateDirty = false
    /// Held back after an unclean shutdown (`BucketEngine.heldVBuckets`): an active copy that may have lost
    /// acknowledged writes its replicas still hold. It serves nothing (`state` is `.dead`) and keeps its failover
    /// log unbranched until `releaseHold`; its state row keeps saying active, so a second crash holds it again.
    var held = false
    /// This copy comes from an unclean shutdown and the cluster has not yet compared it with its replicas
    /// (`BucketEngine.settleUnclean`). Its state row may be behind what the node did: a takeover makes a copy active
    /// and it acknowledges writes before its new state reaches the file, so a row that says replica or pending may
    /// have been the active at the crash. Asked to become active or pending while unsettled, the copy is held
    /// instead, as an active row is at warmup.
    var unsettled = false

    /// The state the `vbucket_state` row records.
    var persistentState: VBucketState { held ? .active : state }
    var waiters: [PersistenceWaiter] = []
    var memUsed = 0
    var liveItems = 0
    /// Of `liveItems`, the collection and scope event items (`CollectionSystemEvent`, ADR 0143): never deleted or
    /// purged, left out of item counts (`curr_items`, per-collection counts), as kv_engine leaves its system events out.
    var systemItems = 0
    var nonResident = 0
    /// GET_AND_LOCK locks (BucketEngine+Locks.swift); empty almost always.
    var locks: [DocKey: DocumentLock] = [:]
    /// The latest seqnos with their keys: change feeds close behind `highSeqno` read what changed from here
    /// (`RecentChanges`, ADR 0077). Every seqno a write, an install or a restamp hands out is recorded.
    var recent: RecentChanges
    /// No live item expires before this (seconds; `.max`: none has an expiry), so a change feed's expiry pass over
    /// every item runs only once something may have expired (`expireDue`). Lowered by every version put in the
    /// table with an expiry; recomputed by the pass.
    var expiryDue: UInt32 = .max

    init(failoverLog: FailoverLog, recentChanges: Int = Limits.recentChangesPerVBucket) {
        self.failoverLog = failoverLog
        self.recent = RecentChanges(capacity: recentChanges)
    }

    /// `expiry` (absolute seconds, 0 for none) belongs to a version just put in the table.
    @inline(__always)
    mutating func noteExpiry(_ expiry: UInt32) {
        if expiry != 0 && expiry < expiryDue { expiryDue = expiry }
    }

    /// Whether an item may have expired by `nowSeconds` (`expireDue` would visit every item).
    func expiryIsDue(nowSeconds: UInt32) -> Bool { Expiry.isExpired(expiryDue, nowSeconds: nowSeconds) }

    /// Expires (turns into tombstones at new seqnos, as `live` does) every live item whose expiry passed, when
    /// `expiryDue` says one may have: a change feed then reports them as deletions. Visits every item only then,
    /// and sets `expiryDue` to the earliest expiry left.
    mutating func expireDue(nowSeconds: UInt32, nowNanoseconds: UInt64, fx: inout Effects) {
        guard expiryIsDue(nowSeconds: nowSeconds) else { return }
        var expiredKeys: [[UInt8]] = []
        var next = UInt32.max
        for (key, item) in items where !item.deleted && item.expiry != 0 {
            if Expiry.isExpired(item.expiry, nowSeconds: nowSeconds) {
                expiredKeys.append(key.bytes)
            } else if item.expiry < next {
                next = item.expiry
            }
        }
        for key in expiredKeys {
            _ = live(key, nowSeconds: nowSeconds, nowNanoseconds: nowNanoseconds, fx: &fx)
            // Still live (a prepare's key, or a value to fetch before it expires): the next pass looks again.
            if let item = items[DocKey(key)], !item.deleted, item.expiry != 0, item.expiry < next { next = item.expiry }
        }
        expiryDue = next
    }

    /// The item if it is alive. An expired item is turned into a tombstone (a deletion with its own
    /// seqno and CAS, queued for the flusher) and reported absent: lazy expiry. An expired item whose
    /// value was evicted and has XATTRs is reported absent and left for `fetchBeforeExpiry` (kv_engine
    /// fetches it too): its tombstone must keep the system XATTRs only the value holds. With
    /// `fetchEvicted` false (the fetch came back without a value) it expires without them.
    mutating func live(
        _ key: [UInt8], nowSeconds: UInt32, nowNanoseconds: UInt64, fx: inout Effects, fetchEvicted: Bool = true
    ) -> Item? {
        live(
            slot(key), key, nowSeconds: nowSeconds, nowNanoseconds: nowNanoseconds, fx: &fx, fetchEvicted: fetchEvicted)
    }

    /// Where a key is in `items`, found with one hash of the key: a mutation looks its key up once and writes the new
    /// version at the same place (`items[at:]` replaces an item in place without hashing the key again).
    /// Valid until an item is inserted into or removed from `items`.
    struct Slot {
        let key: DocKey
        let index: Int?
    }

    func slot(_ key: [UInt8]) -> Slot {
        let k = DocKey(key)
        return Slot(key: k, index: items.index(forKey: k))
    }

    /// The item at `slot`, a tombstone included; nil when the key has none.
    func item(at slot: Slot) -> Item? { slot.index.map { items[at: $0] } }

    /// `live` for a key already looked up; an expired item becomes its tombstone at the same place.
    mutating func live(
        _ slot: Slot, _ key: [UInt8], nowSeconds: UInt32, nowNanoseconds: UInt64, fx: inout Effects,
        fetchEvicted: Bool = true
    ) -> Item? {
        guard let item = item(at: slot), !item.deleted else { return nil }
        // A prepare is never expired under its writer: its commit or abort decides what stays.
        if !pending.isEmpty, pending[slot.key] != nil { return item }
        if Expiry.isExpired(item.expiry, nowSeconds: nowSeconds) {
            if !item.hasValue, item.datatype.contains(.xattr), fetchEvicted, !item.corrupt {
                fx.fetchBeforeExpiry.append(key)
                return nil
            }
            // The tombstone keeps the system XATTRs of a resident value (ADR 0029).
            let kept = item.datatype.contains(.xattr) ? XattrSection.systemOnly(item.value ?? []) : []
            _ = write(
                key: key, existing: item, value: kept, flags: item.flags, expiry: 0,
                datatype: kept.isEmpty ? .raw : .xattr, deleted: true, nowNanoseconds: nowNanoseconds, fx: &fx,
                at: slot)
            fx.expired += 1
            return nil
        }
        return item
    }

    /// Applies one mutation: next seqno, next CAS, bumped revSeqno, dirty, queued once. `slot`, when given, is
    /// `key`'s place found by the caller (`existing` is the item there): the new version replaces it without a
    /// second hash.
    mutating func write(
        key: [UInt8], existing: Item?, value: [UInt8], flags: UInt32, expiry: UInt32, datatype: Datatype,
        deleted: Bool, nowNanoseconds: UInt64, fx: inout Effects, at slot: Slot? = nil
    ) -> (cas: CAS, seqno: SeqNo) {
        value.withUnsafeBytes {
            write(
                key: key, existing: existing, value: $0, flags: flags, expiry: expiry, datatype: datatype,
                deleted: deleted, nowNanoseconds: nowNanoseconds, fx: &fx, at: slot)
        }
    }

    /// `write` of borrowed bytes (a client SET's request frame, in place): they are copied into the new item's
    /// box during the call and not referenced after it.
    mutating func write(
        key: [UInt8], existing: Item?, value: UnsafeRawBufferPointer, flags: UInt32, expiry: UInt32,
        datatype: Datatype, deleted: Bool, nowNanoseconds: UInt64, fx: inout Effects, at slot: Slot? = nil
    ) -> (cas: CAS, seqno: SeqNo) {
        releaseLock(key)
        let seq = highSeqno.next
        highSeqno = seq
        fx.lastSeqno = seq
        let cas = hlc.next(nowNanoseconds: nowNanoseconds)
        let item = Item(
            key: key, valueBytes: value, cas: cas, revSeqno: existing.map { $0.revSeqno.next } ?? maxPurgedRev.next,
            bySeqno: seq, flags: flags, expiry: expiry, datatype: datatype, deleted: deleted, dirty: true,
            queued: true, referenced: true, corrupt: false)
        place(item, key: key, replacing: existing, at: slot ?? Slot(key: DocKey(key), index: nil), fx: &fx)
        return (cas, seq)
    }

    /// Applies a SET_WITH_META / DEL_WITH_META: next seqno, but the given CAS (or, with `regenerateCAS`, the next
    /// one), revSeqno, flags, expiry and datatype; the hybrid clock moves past the CAS so later local writes still
    /// get larger ones. Dirty, queued once, replicated as any mutation.
    mutating func writeWithMeta(
        key: [UInt8], existing: Item?, value: [UInt8], meta: IncomingMeta, regenerateCAS: Bool, nowNanoseconds: UInt64,
        fx: inout Effects, at slot: Slot
    ) -> (cas: CAS, seqno: SeqNo) {
        releaseLock(key)
        let seq = highSeqno.next
        highSeqno = seq
        fx.lastSeqno = seq
        let cas: CAS
        if regenerateCAS {
            cas = hlc.next(nowNanoseconds: nowNanoseconds)
        } else {
            cas = meta.cas
            hlc.observe(meta.cas)
        }
        let item = Item(
            key: key, value: value, cas: cas, revSeqno: meta.revSeqno, bySeqno: seq, flags: meta.flags,
            expiry: meta.deleted ? 0 : meta.expiry, datatype: meta.datatype, deleted: meta.deleted, dirty: true,
            queued: true, referenced: true, corrupt: false)
        place(item, key: key, replacing: existing, at: slot, fx: &fx)
        return (cas, seq)
    }

    /// Puts a new dirty version of `key` (built with `queued` set) in place of `existing` (the item at `slot`, nil
    /// if none): queued for the flusher once, memory and live/resident counts moved by the difference. What a client
    /// write and a replicated install share.
    @inline(__always)
    private mutating func place(
        _ new: Item, key: [UInt8], replacing existing: Item?, at slot: Slot, fx: inout Effects
    ) {
        // `new` comes queued: setting the bit here would copy its box (the caller still holds it).
        let item = new
        if !(existing?.queued ?? false) {
            dirtyQueue.append(DirtyEntry(item: item, seqno: item.bySeqno))
            fx.enqueued += 1
        }
        let delta = item.memoryFootprint(keyLength: key.count) - (existing?.memoryFootprint(keyLength: key.count) ?? 0)
        memUsed += delta
        fx.memDelta += delta
        if let existing {
            if !existing.deleted { liveItems -= 1 }
            if !existing.hasValue { nonResident -= 1 }
        }
        if !item.deleted { liveItems += 1 }
        // A new key's first byte: 0xff only for named collections' keys, and then one more byte.
        if existing == nil, CollectionSystemEvent.isSystemKey(key) { systemItems += 1 }
        recent.record(item.bySeqno, slot.key)
        noteExpiry(item.expiry)
        if let index = slot.index {
            items[at: index] = item
        } else {
            items[slot.key] = item
        }
    }

    /// Installs a replicated version with the producer's metadata (no new seqno or CAS): dirty, queued
    /// once. The caller moves `highSeqno` (to the snapshot's end).
    mutating func install(key: [UInt8], value: [UInt8], meta: ItemMetadata, fx: inout Effects) {
        let here = self.slot(key)
        let existing = self.item(at: here)
        hlc.observe(meta.cas)
        // A tombstone keeps only the XATTRs its producer kept on it.
        let tombstoneXattrs = meta.deleted && meta.datatype.contains(.xattr) && !value.isEmpty
        let item = Item(
            key: key, value: meta.deleted && !tombstoneXattrs ? [] : value, cas: meta.cas, revSeqno: meta.revSeqno,
            bySeqno: meta.bySeqno, flags: meta.flags, expiry: meta.expiry,
            datatype: meta.deleted ? (tombstoneXattrs ? .xattr : .raw) : meta.datatype,
            deleted: meta.deleted, dirty: true, queued: true, referenced: true, corrupt: false)
        place(item, key: key, replacing: existing, at: here, fx: &fx)
    }

    /// Installs an item read from disk (warmup). Returns the change in accounted bytes.
    mutating func load(key: [UInt8], item: Item) -> Int {
        precondition(!item.dirty && !item.queued, "warmup loads clean items only")
        var item = item
        loadedPrepare(key, &item)
        var delta = 0
        let replacing = items[DocKey(key)] != nil
        if let old = items[DocKey(key)] {
            // The unique index makes this impossible on a sound file; keep the newer one anyway.
            guard old.bySeqno < item.bySeqno else { return 0 }
            delta -= old.memoryFootprint(keyLength: key.count)
            memUsed -= old.memoryFootprint(keyLength: key.count)
            if !old.deleted { liveItems -= 1 }
            if !old.hasValue { nonResident -= 1 }
        }
        let bytes = item.memoryFootprint(keyLength: key.count)
        items[DocKey(key)] = item
        memUsed += bytes
        if !item.deleted { liveItems += 1 }
        if !item.hasValue { nonResident += 1 }
        if !replacing, CollectionSystemEvent.isSystemKey(key) { systemItems += 1 }
        if item.bySeqno > highSeqno { highSeqno = item.bySeqno }
        recent.cover(through: item.bySeqno)
        if !item.deleted { noteExpiry(item.expiry) }
        hlc.observe(item.cas)
        return delta + bytes
    }

    /// Purges the tombstones deleted at or before `cutoffNanoseconds` (their CAS, the hybrid clock's time of the
    /// deletion) that are persisted (clean), have no durable write in flight and no lock: each leaves the table, its
    /// row is queued for deletion by the flusher (`purgedRows`), and `purgeSeqno` and `maxPurgedRev` rise to cover
    /// it; the state row is marked for the flusher. Returns the bytes freed and the tombstones purged (ADR 0095).
    ///
    /// The tombstone at the vBucket's high seqno is kept, as couch-kvstore's compaction keeps the deleted item at the
    /// file's last sequence (ADR 0161): a change feed's last snapshot ends at the high seqno, and a consumer that
    /// completes a snapshot when its last item arrives would otherwise wait for the vBucket's next write.
    mutating func purgeTombstones(cutoffNanoseconds: UInt64) -> (freed: Int, purged: Int) {
        guard liveItems < items.count else { return (0, 0) }  // no tombstone at all
        var doomed: [DocKey] = []
        for (key, item) in items
        where item.deleted && !item.dirty && !item.queued && item.cas.rawValue <= cutoffNanoseconds
            && item.bySeqno != highSeqno
            && (pending.isEmpty || pending[key] == nil) && (locks.isEmpty || locks[key] == nil)
        {
            doomed.append(key)
        }
        var freed = 0
        for key in doomed {
            guard let item = items[key] else { continue }
            items[key] = nil
            let bytes = item.memoryFootprint(keyLength: key.bytes.count)
            memUsed -= bytes
            freed += bytes
            purgedRows.append(PurgedRow(key: key, seqno: item.bySeqno))
            if item.bySeqno > purgeSeqno { purgeSeqno = item.bySeqno }
            if item.revSeqno > maxPurgedRev { maxPurgedRev = item.revSeqno }
        }
        if !doomed.isEmpty {
            stateDirty = true
            items.shrinkIfSparse()
        }
        return (freed, doomed.count)
    }

    /// Drops every item (bucket flush); seqnos and CAS keep counting. Returns the memory freed and the
    /// number of queue entries dropped.
    mutating func removeAll() -> (freed: Int, dequeued: Int) {
        let freed = memUsed
        let dequeued = dirtyQueue.count
        items = ItemTable()
        purgedRows = []
        pending = [:]
        recent = RecentChanges(capacity: recent.capacity)
        expiryDue = .max
        dirtyQueue = []
        memUsed = 0
        liveItems = 0
        systemItems = 0
        nonResident = 0
        stateDirty = true
        return (freed, dequeued)
    }
}
