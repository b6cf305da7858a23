import SetteeCore
import Synchronization

/// A durable write applied to its vBucket but not committed yet: a *prepare* (docs/internals/sync-writes.md).
///
/// The prepared version sits in the hash table like any item (it has its seqno, is flushed, and replica
/// streams carry it), while readers are served `previous`, the committed version it replaced. Other writes
/// to the key are refused with `.syncWriteInProgress` until `commitSyncWrite` or `abortSyncWrite` runs.
struct PendingSyncWrite {
    /// The seqno the prepare took.
    var seqno: SeqNo
    /// The committed version readers see meanwhile: nil when the key had none, a tombstone when it was
    /// deleted. Always resident on an active (a durable write first fetches an evicted value back).
    var previous: Item?
    /// True when what the prepare shadows is unknown: a replica's prepare read back by warmup (the row it
    /// overwrote is gone). Readers then get `.wouldBlock` (TMPFAIL: ask another copy), never a wrong
    /// "not found" for a key that may have a committed version elsewhere.
    var shadowLost = false
    /// The durability level's wire value (`SyncWrite.level`), which replica streams carry in DCP_PREPARE so a
    /// replica waits for its disk before acknowledging only a persistToMajority prepare (ADR 0073). A prepare read
    /// back by warmup lost it: the strictest level, persistToMajority.
    var level: UInt8 = SyncWrite.persistToMajority
}

/// Whether a client mutation is a durable write, applied as a prepare, and its durability level as kv_engine's
/// wire value (1 majority, 2 majorityAndPersistOnMaster, 3 persistToMajority; 0: not a durable write). Storage
/// only keeps the level to hand it to replica streams (DCP_PREPARE's level byte, ADR 0073). `true` is a prepare
/// of the strictest level (persistToMajority), `false` a plain write.
public struct SyncWrite: Sendable, Hashable, ExpressibleByBooleanLiteral {
    public static let persistToMajority: UInt8 = 3
    /// The level byte; 0 for a plain write.
    public var level: UInt8

    /// A durable write of `level` (a wire value 1-3; callers validated it), or a plain write for 0.
    public init(level: UInt8) { self.level = level }

    public init(booleanLiteral isPrepare: Bool) { level = isPrepare ? Self.persistToMajority : 0 }

    public var isPrepare: Bool { level != 0 }
}

/// How a prepare is marked in the file: a bit of the stored datatype that Couchbase's datatypes (JSON 0x01,
/// Snappy 0x02, XATTR 0x04) never use, set by the flusher and stripped by warmup, so no format change is needed
/// and a prepare survives a restart as one (storage-format.md).
enum StoredPrepare {
    static let datatypeBit: UInt8 = 0x80

    /// `meta` as the flusher writes it for an item that is (`prepare`) or is not a prepare.
    @inline(__always)
    static func stored(_ meta: ItemMetadata, prepare: Bool) -> ItemMetadata {
        guard prepare else { return meta }
        var m = meta
        m.datatype = Datatype(rawValue: meta.datatype.rawValue | datatypeBit)
        return m
    }
}

extension VBucketTable {
    /// Why a mutation of `key` may not run now: a prepare of it is in flight (any write, durable or not),
    /// or, for a durable write, the committed value it would shadow is evicted (fetch it, then retry: readers
    /// are served that value from memory while the prepare waits).
    @inline(__always)
    func refusal(_ key: [UInt8], syncWrite: SyncWrite) -> EngineError? {
        if !pending.isEmpty, pending[DocKey(key)] != nil { return .syncWriteInProgress }
        if syncWrite.isPrepare, let e = items[DocKey(key)], !e.deleted, !e.hasValue { return .wouldBlock }
        return nil
    }

    /// Records the write just applied to `key` at `seqno` as a prepare of `level` that shadows `previous`.
    mutating func recordPrepare(_ key: [UInt8], previous: Item?, seqno: SeqNo, level: UInt8) {
        pending[DocKey(key)] = PendingSyncWrite(seqno: seqno, previous: previous, level: level)
    }

    /// A read of a key with a prepare in flight, served from the committed version; nil when `key` has none.
    mutating func readCommitted<R>(
        _ key: DocKey, nowSeconds: UInt32, into out: inout R?, _ body: (UnsafeRawBufferPointer, ItemMetadata) -> R
    ) -> Result<Void, EngineError>? {
        guard let p = pending[key] else { return nil }
        guard var item = p.previous else { return .failure(p.shadowLost ? .wouldBlock : .keyNotFound) }
        switch item.readiness(nowSeconds: nowSeconds) {
        case .ready:
            out = item.withValue(body)
            return .success(())
        case .absent, .expired: return .failure(.keyNotFound)
        case .corrupt: return .failure(.ioFailure("stored value failed its checksum"))
        case .evicted: return .failure(.wouldBlock)
        }
    }

    /// The committed version's metadata (tombstones included) of a key with a prepare in flight: `.some(nil)`
    /// when it has none; nil when `key` has no prepare.
    func committedMeta(_ key: DocKey) -> ItemMetadata?? {
        guard let p = pending[key] else { return nil }
        return .some(p.previous?.meta)
    }

    /// Whether `item` (at `key`) is a prepare that readers must not see.
    @inline(__always)
    func isPrepare(_ key: DocKey) -> Bool { !pending.isEmpty && pending[key] != nil }

    /// Gives the current version of `key` (whose value must be resident) a new seqno and makes it dirty
    /// and queued once, keeping its CAS and revSeqno.
    mutating func restamp(_ key: [UInt8], _ item: inout Item, fx: inout Effects) {
        let seq = highSeqno.next
        highSeqno = seq
        fx.lastSeqno = seq
        item.bySeqno = seq
        recent.record(seq, DocKey(key))
        item.dirty = true
        item.referenced = true
        if !item.queued {
            item.queued = true
            dirtyQueue.append(DirtyEntry(item: item, seqno: seq))
            fx.enqueued += 1
        }
    }

    /// Whether the current version of `key` (at `seqno`) is a prepare: the flusher marks it so in the file.
    @inline(__always)
    func isPrepare(_ key: DocKey, seqno: SeqNo) -> Bool {
        !pending.isEmpty && pending[key]?.seqno == seqno
    }

    /// A row warmup read with the prepare bit: the bit is dropped from the item and the prepare recorded. What
    /// it shadowed is gone from the file (the row was overwritten), so what it shadows is unknown: a replica
    /// answers GET_REPLICA of the key with TMPFAIL until its commit arrives; an active commits it right after
    /// warmup (warmup always loads a prepare's value, so the commit can re-queue it at a new seqno).
    mutating func loadedPrepare(_ key: [UInt8], _ item: inout Item) {
        guard item.datatype.rawValue & StoredPrepare.datatypeBit != 0 else { return }
        item.datatype = Datatype(rawValue: item.datatype.rawValue & ~StoredPrepare.datatypeBit)
        pending[DocKey(key)] = PendingSyncWrite(seqno: item.bySeqno, previous: nil, shadowLost: true)
    }

    /// Installs one replicated change (replica vBucket): a prepare is held with the version it shadows, so
    /// GET_REPLICA keeps serving that one; any other change of the key (its commit, its abort's restored
    /// version) ends the prepare.
    mutating func installReplicated(_ r: ChangeRecord, fx: inout Effects) {
        let k = DocKey(r.key)
        if r.prepare {
            let held = pending[k]
            let previous = held.map(\.previous) ?? items[k]
            install(key: r.key, value: r.value, meta: r.meta, fx: &fx)
            pending[k] = PendingSyncWrite(
                seqno: r.meta.bySeqno, previous: previous, shadowLost: held?.shadowLost ?? false, level: r.level)
        } else {
            if !pending.isEmpty { pending[k] = nil }
            install(key: r.key, value: r.value, meta: r.meta, fx: &fx)
        }
    }

    /// Commits every prepare this copy holds, in seqno order, at new seqnos (it just became active: the
    /// recovery rule of sync-writes.md), so change feeds that left them out deliver them now.
    /// Returns how many it made visible.
    @discardableResult
    mutating func commitAllPrepares(fx: inout Effects) -> Int {
        guard !pending.isEmpty else { return 0 }
        var committed = 0
        for (k, p) in pending.sorted(by: { $0.value.seqno < $1.value.seqno }) {
            guard var item = items[k], item.bySeqno == p.seqno, item.hasValue else { continue }
            restamp(k.bytes, &item, fx: &fx)
            items[k] = item
            committed += 1
        }
        pending = [:]
        return committed
    }

    /// Puts `previous` back in place of the aborted prepare `current`, at a new seqno, with its own CAS
    /// and revSeqno: to readers nothing changed.
    mutating func reinstate(_ key: [UInt8], previous: Item, current: Item, fx: inout Effects) {
        var item = previous
        item.queued = current.queued
        restamp(key, &item, fx: &fx)
        if !item.deleted { noteExpiry(item.expiry) }
        hlc.observe(item.cas)
        let delta = item.memoryFootprint(keyLength: key.count) - current.memoryFootprint(keyLength: key.count)
        memUsed += delta
        fx.memDelta += delta
        if !current.deleted { liveItems -= 1 }
        if !current.hasValue { nonResident -= 1 }
        if !item.deleted { liveItems += 1 }
        items[DocKey(key)] = item
    }
}

extension EngineCore {
    /// After warmup: every active vBucket commits the prepares it persisted (the recovery rule), at new seqnos
    /// so feeds that left them out deliver them; replicas keep theirs until the active's commit arrives.
    func commitWarmedPrepares() {
        for (i, v) in vbuckets.enumerated() {
            var fx = Effects()
            let committed = v.table.withLock { t in t.state == .active ? t.commitAllPrepares(fx: &fx) : 0 }
            if committed != 0 { syncWritesCommitted.wrappingAdd(committed, ordering: .relaxed) }
            if fx.enqueued != 0 || fx.lastSeqno != .zero { apply(fx, vb: VBucketID(UInt16(i))) }
        }
    }
}

extension BucketEngine {
    /// Makes the prepare of `key` at `seqno` visible (its durability level was met). The committed item
    /// keeps the prepare's CAS and revSeqno and takes a new seqno, so change feeds that leave prepares out
    /// deliver it now. False when that prepare is gone (the vBucket stopped being active, the bucket was
    /// flushed): the caller cannot tell the client it committed.
    public func commitSyncWrite(_ vb: VBucketID, _ key: [UInt8], seqno: SeqNo) -> Bool {
        guard vb.index < core.vbuckets.count, !key.isEmpty else { return false }
        var fx = Effects()
        let done = core.vbuckets[vb.index].table.withLock { t -> Bool in
            let k = DocKey(key)
            guard t.state == .active, let p = t.pending[k], p.seqno == seqno else { return false }
            t.pending[k] = nil
            guard var item = t.items[k], item.bySeqno == seqno else { return false }
            // A prepare is never evicted (the item pager skips it), so its value is here to re-queue.
            guard item.hasValue else { return true }
            t.restamp(key, &item, fx: &fx)
            t.items[k] = item
            return true
        }
        core.apply(fx, vb: vb)
        if done { core.syncWritesCommitted.wrappingAdd(1, ordering: .relaxed) }
        return done
    }

    /// Drops the prepare of `key` at `seqno` (timed out, or its persistence failed): the committed version
    /// it shadowed is put back at a new seqno (a tombstone when there was none), so replicas and change
    /// feeds converge on it. In a vBucket no longer active only the record goes: the new active decides.
    /// False when that prepare was already gone.
    @discardableResult
    public func abortSyncWrite(_ vb: VBucketID, _ key: [UInt8], seqno: SeqNo) -> Bool {
        guard vb.index < core.vbuckets.count, !key.isEmpty else { return false }
        let nowNs = core.clock.nowNanoseconds()
        var fx = Effects()
        var onActive = false
        let done = core.vbuckets[vb.index].table.withLock { t -> Bool in
            let k = DocKey(key)
            guard let p = t.pending[k], p.seqno == seqno else { return false }
            t.pending[k] = nil
            onActive = t.state == .active
            guard onActive, let current = t.items[k], current.bySeqno == seqno else { return true }
            if let previous = p.previous {
                t.reinstate(key, previous: previous, current: current, fx: &fx)
            } else {
                _ = t.write(
                    key: key, existing: current, value: [], flags: current.flags, expiry: 0, datatype: .raw,
                    deleted: true, nowNanoseconds: nowNs, fx: &fx)
            }
            return true
        }
        core.apply(fx, vb: vb)
        if onActive { core.syncWritesAborted.wrappingAdd(1, ordering: .relaxed) }
        return done
    }

    /// Prepares in flight in `vb` (tests, stats).
    public func pendingSyncWrites(_ vb: VBucketID) -> Int {
        guard vb.index < core.vbuckets.count else { return 0 }
        return core.vbuckets[vb.index].table.withLock { $0.pending.count }
    }
}
