import Logging
import SetteeCore
import SetteeSQLite
import Synchronization

/// One change of a vBucket as the change feed reports it: a key's latest version.
public struct ChangeRecord: Sendable, Equatable {
    public var key: [UInt8]
    /// The stored value: the XATTR section (datatype `.xattr`, ADR 0029) then the body; for a deletion the
    /// system XATTRs its tombstone kept, or empty. `body` strips the section.
    public var value: [UInt8]
    /// `meta.deleted` marks a deletion (tombstone); `meta.bySeqno` orders the feed.
    public var meta: ItemMetadata
    /// A durable write not committed yet (only in feeds with `includePrepares`: replica streams).
    public var prepare: Bool
    /// A prepare's durability level (`SyncWrite.level`: 1-3), as DCP_PREPARE carries it; 0 for other records. A
    /// prepare whose level is unknown (none given, or a wire value outside 1-3) is persistToMajority, the strictest.
    public var level: UInt8

    public init(key: [UInt8], value: [UInt8], meta: ItemMetadata, prepare: Bool = false, level: UInt8? = nil) {
        self.key = key
        self.value = value
        self.meta = meta
        self.prepare = prepare
        self.level = prepare ? (level.flatMap { (1...3).contains($0) ? $0 : nil } ?? SyncWrite.persistToMajority) : 0
    }

    /// A prepare a replica must persist before acknowledging it (persistToMajority): the others are acknowledged
    /// from memory (ADR 0073).
    public var needsReplicaPersistence: Bool {
        prepare && level == SyncWrite.persistToMajority
    }
}

/// The answer to one change-feed scan.
public struct ChangeBatch: Sendable {
    /// In increasing seqno order, each key once (its latest version), every seqno above the scan's `since`.
    public var records: [ChangeRecord]
    /// The vBucket's high seqno when it was scanned.
    public var highSeqno: SeqNo
    /// False when `limit` cut the batch short: scan again from `lastSeqno`.
    public var complete: Bool
    /// The batch covers every change in `(since, lastSeqno]` (deduplicated): `highSeqno` when complete,
    /// else the seqno of the last change the limit let in. The next scan's `since`.
    public var lastSeqno: SeqNo
    /// Complete, and no record was left out: applying `records` to a copy that held the vBucket as of
    /// `since` gives exactly the vBucket as of `highSeqno`. False when the limit cut the batch, or when an
    /// evicted value was replaced before it could be read (that key's newer version, above `highSeqno`,
    /// comes with a later scan). Replicas acknowledge durable writes only at the end of such a batch.
    public var consistent: Bool
    /// The vBucket's purge seqno when it was scanned (ADR 0095): tombstones at or below it may be gone.
    public var purgeSeqno: SeqNo

    public init(
        records: [ChangeRecord], highSeqno: SeqNo, complete: Bool, lastSeqno: SeqNo, consistent: Bool,
        purgeSeqno: SeqNo = .zero
    ) {
        self.records = records
        self.highSeqno = highSeqno
        self.complete = complete
        self.lastSeqno = lastSeqno
        self.consistent = consistent
        self.purgeSeqno = purgeSeqno
    }
}

extension ChangeRecord {
    /// The record as a reader of the default collection only sees it (ADR 0129, ADR 0138): itself when its key is
    /// a plain default-collection key; with the logical key when it is an escaped default key (`0xff 0x00 key`);
    /// nil for a named collection's record (or a malformed marked key). The one rule every default-collection feed
    /// applies: the DCP producer for consumers without HELLO Collections, the views, the gateway's embedded feed.
    @inline(__always)
    public func inDefaultCollection() -> ChangeRecord? {
        guard key.first == CollectionKey.engineMarker else { return self }
        guard let split = CollectionKey.split(engineKey: key),
            split.collection == CollectionsManifest.defaultCollectionID
        else { return nil }
        var unescaped = self
        unescaped.key = Array(split.logicalKey)
        return unescaped
    }
}

/// What one feed following one vBucket keeps of its purges (ADR 0095), and the one rule that says when it may have
/// missed deletions. The floor is the purge seqno when the feed began: the vBucket's when a resumed feed was accepted
/// (then at most its position), raised by each read from 0. A tombstone purged before a feed read from 0 leaves
/// nothing behind for it (the key is absent from everything it was sent), so only a purge above both the floor and the
/// feed's position counts, and a read from 0 never misses anything. Such a feed must start again from 0, as a DCP
/// consumer told to roll back to 0 does. The DCP producer's streams, the view index's passes and the gateway's
/// embedded feed each keep one per vBucket they follow.
public struct PurgeFloor: Sendable, Equatable {
    public private(set) var seqno: SeqNo

    /// `seqno`: the vBucket's purge seqno when the feed began (0 for a feed that starts by reading from 0).
    public init(_ seqno: SeqNo = .zero) { self.seqno = seqno }

    /// Whether a read from `since` that found the vBucket's purge seqno at `purgeSeqno` may have missed deletions
    /// (the feed must start again from 0); a read from 0 raises the floor instead.
    public mutating func missesDeletions(since: SeqNo, purgeSeqno: SeqNo) -> Bool {
        if since == .zero {
            seqno = max(seqno, purgeSeqno)
            return false
        }
        return purgeSeqno > max(since, seqno)
    }
}

/// A registered change observer.
struct ChangeObserver: Sendable {
    var token: UInt64
    var callback: @Sendable (VBucketID, SeqNo) -> Void
}

/// A read-only connection for reading evicted values during change-feed scans. Used by one thread at a
/// time: it is either in `EngineCore.changeReaders` (idle) or held by exactly one scan.
final class ChangeReader: @unchecked Sendable {
    let conn: Connection
    let select: Statement

    init(path: String) throws(SQLiteError) {
        var options = Connection.Options()
        options.readOnly = true
        options.cacheSizeKiB = 2 * 1024
        conn = try Connection(path: path, options: options)
        select = try conn.prepare(StorageSchema.selectValue)
    }

    /// The stored value of `key` if the row on disk still holds version `seqno`; nil if it holds a newer version
    /// (or none): the item changed after the scan copied its metadata. An older version throws.
    func value(vb: UInt16, key: [UInt8], seqno: SeqNo) throws(EngineError) -> [UInt8]? {
        let select = self.select
        defer { select.reset() }
        let row: (SeqNo, Result<[UInt8], StorageCorruptionError>)?
        do {
            try select.bind(Int64(vb), at: 1)
            row = try select.withBlobBound(key, at: 2) {
                () throws(SQLiteError) -> (SeqNo, Result<[UInt8], StorageCorruptionError>)? in
                guard try select.step() else { return nil }
                let seq = SeqNo(UInt64(bitPattern: select.int64(at: 0)))
                guard seq == seqno else { return (seq, .success([])) }
                let codec = select.int64(at: 1)
                let vlen = select.int64(at: 2)
                let crc = select.int64(at: 3)
                let v = select.withBlob(at: 4) { stored in
                    Result { () throws(StorageCorruptionError) -> [UInt8] in
                        try LZ4Envelope.decode(
                            codec: codec, stored: stored, length: vlen, crc: crc, vb: vb, keyLength: key.count)
                    }
                }
                return (seq, v)
            }
        } catch {
            throw .ioFailure("change feed read failed: \(error)")
        }
        guard let (seq, result) = row, seq == seqno else {
            // The scan copied a clean item: its version is on disk, or a newer one replaced it. A row holding an
            // older version means what was counted as persisted is not there; reading on would leave the item out
            // of the stream (replicas, views and the gateway would never see it).
            if let (seq, _) = row, seq < seqno {
                throw .ioFailure("the stored row of a persisted item holds an older version (\(seq) < \(seqno))")
            }
            return nil
        }
        switch result {
        case .success(let v): return v
        case .failure: throw .ioFailure("stored value failed its checksum")
        }
    }
}

extension BucketEngine {
    /// The changes of `vb` after `since`: every key whose latest version has a seqno above `since`, in
    /// seqno order, at most `limit` of them (`complete == false` when more remain; continue from
    /// `lastSeqno`). Deletions appear as records with `meta.deleted` and as value the system XATTRs their
    /// tombstone kept (usually none). Values carry their XATTR section (`ChangeRecord.body` strips it). Works in any
    /// vBucket state. In an active vBucket, items whose expiry has passed are expired first (a deletion
    /// with a new seqno, as lazy expiry does); elsewhere they are reported as deletions at their seqno.
    ///
    /// Blocking (may read evicted values from disk): call off event loops.
    public func changes(_ vb: VBucketID, since: SeqNo, limit: Int) throws(EngineError) -> ChangeBatch {
        try changes(vb, since: since, limit: limit, maxBytes: Int.max)
    }

    /// `changes(_:since:limit:)` that also stops once the records' keys and values reach `maxBytes`
    /// (at least one record is returned): a producer bounds the memory one batch holds.
    ///
    /// Durable writes not committed yet (prepares) are left out unless `includePrepares` (replica streams
    /// only): everyone else gets such a document at its commit's seqno, or never if it is aborted.
    public func changes(
        _ vb: VBucketID, since: SeqNo, limit: Int, maxBytes: Int, includePrepares: Bool = false
    ) throws(EngineError) -> ChangeBatch {
        let batch = try changes(
            vb, since: since, limit: limit, maxBytes: maxBytes, includePrepares: includePrepares, memoryOnly: false)
        // Only a memory-only read gives up.
        guard let batch else { throw .ioFailure("change feed gave up without a memory-only read") }
        return batch
    }

    /// The same batch as `changes(_:since:limit:maxBytes:includePrepares:)`, or nil when answering would take more
    /// than a short walk of memory: `since` is below the vBucket's recent seqnos (the feed would visit every
    /// item), an active vBucket has items whose expiry passed (the expiry pass visits every item), or a value to
    /// send is evicted (a disk read). What it reads is bounded by `Limits.recentChangesPerVBucket` entries, so a
    /// DCP producer may call it on its event loop (ADR 0079); on nil it runs `changes` on the scan pool. Nothing
    /// in the engine changes when it answers nil.
    public func changesInMemory(
        _ vb: VBucketID, since: SeqNo, limit: Int, maxBytes: Int, includePrepares: Bool = false
    ) throws(EngineError) -> ChangeBatch? {
        try changes(
            vb, since: since, limit: limit, maxBytes: maxBytes, includePrepares: includePrepares, memoryOnly: true)
    }

    private func changes(
        _ vb: VBucketID, since: SeqNo, limit: Int, maxBytes: Int, includePrepares: Bool, memoryOnly: Bool
    ) throws(EngineError) -> ChangeBatch? {
        guard vb.index < core.vbuckets.count else { throw .notMyVBucket }
        guard limit > 0 && limit <= Limits.changeFeedMaxBatch else { throw .invalidArguments }
        let nowNs = core.clock.nowNanoseconds()
        let nowS = UInt32(truncatingIfNeeded: nowNs / 1_000_000_000)
        var fx = Effects()
        // Copy out under the lock: keys and values are shared copy-on-write, not copied.
        var prepares: [SeqNo: UInt8] = [:]  // seqno → level
        var purgeSeqno = SeqNo.zero
        let scanned = core.vbuckets[vb.index].table.withLock { t -> ([(DocKey, Item)], SeqNo)? in
            if memoryOnly {
                // Before anything changes: a memory-only answer leaves the table as it found it when it gives up.
                guard t.recent.covers(since) else { return nil }
                if t.state == .active && t.expiryIsDue(nowSeconds: nowS) { return nil }
            }
            // An active copy reports what expired as deletions (new seqnos, so above `since`).
            if t.state == .active { t.expireDue(nowSeconds: nowS, nowNanoseconds: nowNs, fx: &fx) }
            purgeSeqno = t.purgeSeqno
            var out: [(DocKey, Item)] = []
            let hidePrepares = !includePrepares && !t.pending.isEmpty
            func consider(_ key: DocKey, _ item: Item) {
                if !t.pending.isEmpty, let p = t.pending[key], p.seqno == item.bySeqno {
                    if hidePrepares { return }
                    prepares[item.bySeqno] = p.level
                }
                out.append((key, item))
            }
            if t.recent.covers(since) {
                // Close behind: only the keys recorded above `since`; an entry whose key moved on is stale (the
                // key's newer seqno has its own entry), so each key is taken once, at its current version.
                var i = t.recent.firstIndex(after: since)
                while i < t.recent.count {
                    let e = t.recent[i]
                    i += 1
                    if let item = t.items[e.key], item.bySeqno == e.seqno { consider(e.key, item) }
                }
            } else {
                for (key, item) in t.items where item.bySeqno > since { consider(key, item) }
            }
            return (out, t.highSeqno)
        }
        guard let (candidates, high) = scanned else { return nil }
        if fx.lastSeqno != .zero || fx.memDelta != 0 || fx.expiredAny { core.apply(fx, vb: vb) }

        var sorted = candidates
        sorted.sort { $0.1.bySeqno < $1.1.bySeqno }
        var complete = sorted.count <= limit
        if !complete { sorted.removeLast(sorted.count - limit) }
        var lastSeqno = complete ? max(high, since) : sorted[sorted.count - 1].1.bySeqno
        var bytes = 0

        var records: [ChangeRecord] = []
        records.reserveCapacity(sorted.count)
        var skipped = false
        var reader: ChangeReader?
        defer { if let reader { returnReader(reader) } }
        for (key, item) in sorted {
            if bytes >= maxBytes {
                // The byte budget cut it: the batch covers everything up to the last record taken.
                complete = false
                lastSeqno = records.last?.meta.bySeqno ?? since
                break
            }
            var meta = item.meta
            var value: [UInt8]
            if item.deleted {
                value = item.value ?? []
            } else if Expiry.isExpired(item.expiry, nowSeconds: nowS) {
                // Only in a non-active vBucket (an active one expired it above): never report it live.
                meta.deleted = true
                meta.expiry = 0
                meta.datatype = .raw
                value = []
            } else if let v = item.value {
                value = v
            } else {
                if memoryOnly { return nil }
                if reader == nil { reader = try takeReader() }
                // Nil: a newer version replaced it after the scan; that version's seqno is above `high`,
                // so a later scan reports it. Skip this one.
                guard let v = try reader!.value(vb: vb.rawValue, key: key.bytes, seqno: item.bySeqno) else {
                    skipped = true
                    continue
                }
                value = v
            }
            bytes += key.bytes.count + value.count
            let level = prepares.isEmpty ? nil : prepares[meta.bySeqno]
            records.append(
                ChangeRecord(
                    key: key.bytes, value: value, meta: meta, prepare: level != nil, level: level))
        }
        return ChangeBatch(
            records: records, highSeqno: high, complete: complete, lastSeqno: lastSeqno,
            consistent: complete && !skipped, purgeSeqno: purgeSeqno)
    }

    /// Registers `observer`, called after every mutation of any vBucket (client write, expiry, replicated
    /// item) with the vBucket and the new high seqno, on the mutating thread and after the vBucket lock is
    /// released. Must not block. Calls for one vBucket may arrive out of seqno order when two threads
    /// mutate it at once: treat a call as "the high seqno is at least this". Returns a token for
    /// `removeChangeObserver`.
    public func addChangeObserver(_ observer: @escaping @Sendable (VBucketID, SeqNo) -> Void) -> UInt64 {
        let token = core.nextObserverToken.wrappingAdd(1, ordering: .relaxed).oldValue
        core.observers.withLock {
            $0.append(ChangeObserver(token: token, callback: observer))
            core.observerCount.store($0.count, ordering: .relaxed)
        }
        return token
    }

    /// Unregisters an observer. Calls already under way may still complete after this returns.
    public func removeChangeObserver(_ token: UInt64) {
        core.observers.withLock {
            $0.removeAll { $0.token == token }
            core.observerCount.store($0.count, ordering: .relaxed)
        }
    }

    private func takeReader() throws(EngineError) -> ChangeReader {
        if core.closed.load(ordering: .sequentiallyConsistent) { throw .temporaryFailure }
        if let r = core.changeReaders.withLock({ $0.popLast() }) { return r }
        do { return try ChangeReader(path: core.directory + "/" + StorageSchema.fileName) } catch {
            throw .ioFailure("opening a change-feed reader: \(error)")
        }
    }

    private func returnReader(_ r: ChangeReader) {
        let kept = core.changeReaders.withLock { pool -> Bool in
            guard pool.count < Limits.changeFeedReaders, !core.closed.load(ordering: .sequentiallyConsistent) else {
                return false
            }
            pool.append(r)
            return true
        }
        if !kept { r.conn.close() }
    }
}
