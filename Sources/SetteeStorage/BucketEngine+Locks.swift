import SetteeCore
import Synchronization

/// A pessimistic lock on one document (GET_AND_LOCK), kept beside the hash table so `Item` stays as
/// it is. While it holds, the item's in-memory CAS is `cas`, a fresh CAS only the lock holder knows:
/// a mutation carrying it passes the ordinary CAS checks and releases the lock (`VBucketTable.write`).
struct DocumentLock {
    var cas: CAS
    /// Absolute Unix seconds at which the lock lapses.
    var until: UInt32
}

/// Locks outstanding in this process (an upper bound: lapsed locks are counted until seen), so the
/// protocol layer skips the lock lookup on every operation while no document is locked.
let outstandingLocks = Atomic<Int>(0)

/// Couchbase's lock timeouts (kv_engine `getl_default_timeout` / `getl_max_timeout`), in seconds.
public enum LockTimeout {
    /// 0 or more than `Limits.lockMaxSeconds` means `Limits.lockDefaultSeconds`, as kv_engine does.
    public static func effective(_ requested: UInt32) -> UInt32 {
        requested == 0 || requested > Limits.lockMaxSeconds ? Limits.lockDefaultSeconds : requested
    }
}

extension VBucketTable {
    /// The live lock on `key`, dropping a lapsed one.
    mutating func activeLock(_ key: [UInt8], nowSeconds: UInt32) -> DocumentLock? {
        guard !locks.isEmpty, let lock = locks[DocKey(key)] else { return nil }
        if lock.until > nowSeconds { return lock }
        locks[DocKey(key)] = nil
        outstandingLocks.wrappingSubtract(1, ordering: .relaxed)
        return nil
    }

    /// Called by `write`: any mutation of a key ends its lock (only the holder's CAS gets that far).
    mutating func releaseLock(_ key: [UInt8]) {
        if !locks.isEmpty, locks.removeValue(forKey: DocKey(key)) != nil {
            outstandingLocks.wrappingSubtract(1, ordering: .relaxed)
        }
    }
}

extension BucketEngine {
    /// Whether any document of any bucket may be locked: false lets callers skip `lockCAS`.
    public static var mayHaveLocks: Bool { outstandingLocks.load(ordering: .relaxed) > 0 }

    /// GET_AND_LOCK: the document, with its CAS replaced by a new lock CAS, locked for `lockSeconds`
    /// (see `LockTimeout.effective`). A document already locked throws `.locked`.
    public func getAndLock(_ vb: VBucketID, _ key: [UInt8], lockSeconds: UInt32) throws(EngineError) -> Document {
        let v = try lockVBucket(vb, key)
        let ns = core.clock.nowNanoseconds()
        let nowS = UInt32(truncatingIfNeeded: ns / 1_000_000_000)
        var fx = Effects()
        let r = v.table.withLock { t -> Result<Document, EngineError> in
            guard t.state == .active else { return .failure(.notMyVBucket) }
            // Locking takes a new CAS: a prepare's must stay the one its writer was given.
            if let refusal = t.refusal(key, syncWrite: false) { return .failure(refusal) }
            guard var item = t.live(key, nowSeconds: nowS, nowNanoseconds: ns, fx: &fx) else {
                return .failure(.keyNotFound)
            }
            if t.activeLock(key, nowSeconds: nowS) != nil { return .failure(.locked) }
            if item.corrupt { return .failure(.ioFailure("stored value failed its checksum")) }
            guard let value = item.value else { return .failure(.wouldBlock) }
            item.cas = t.hlc.next(nowNanoseconds: ns)
            item.referenced = true
            t.items[DocKey(key)] = item
            t.locks[DocKey(key)] = DocumentLock(cas: item.cas, until: nowS &+ LockTimeout.effective(lockSeconds))
            outstandingLocks.wrappingAdd(1, ordering: .relaxed)
            return .success(Document(value: value, meta: item.meta))
        }
        if fx.expiredAny { core.apply(fx, vb: vb) }
        return try r.get()
    }

    /// UNLOCK_KEY with the lock CAS. Throws `.keyNotFound`, `.locked` for a wrong CAS, and
    /// `.temporaryFailure` when the document is not locked (the protocol layer answers NOT_LOCKED).
    public func unlock(_ vb: VBucketID, _ key: [UInt8], cas: CAS) throws(EngineError) {
        let v = try lockVBucket(vb, key)
        let ns = core.clock.nowNanoseconds()
        let nowS = UInt32(truncatingIfNeeded: ns / 1_000_000_000)
        var fx = Effects()
        let r = v.table.withLock { t -> Result<Void, EngineError> in
            guard t.state == .active else { return .failure(.notMyVBucket) }
            guard t.live(key, nowSeconds: nowS, nowNanoseconds: ns, fx: &fx) != nil else {
                return .failure(.keyNotFound)
            }
            guard let lock = t.activeLock(key, nowSeconds: nowS) else { return .failure(.temporaryFailure) }
            guard lock.cas == cas else { return .failure(.locked) }
            t.releaseLock(key)
            return .success(())
        }
        if fx.expiredAny { core.apply(fx, vb: vb) }
        try r.get()
    }

    /// The lock CAS if `key` is locked now, else nil. Cheap, but takes the vBucket lock: check
    /// `mayHaveLocks` first.
    public func lockCAS(_ vb: VBucketID, _ key: [UInt8]) -> CAS? {
        guard vb.index < core.vbuckets.count else { return nil }
        let nowS = core.clock.nowSeconds()
        return core.vbuckets[vb.index].table.withLock { t in t.activeLock(key, nowSeconds: nowS)?.cas }
    }

    private func lockVBucket(_ vb: VBucketID, _ key: [UInt8]) throws(EngineError) -> VBucket {
        if key.isEmpty || key.count > Limits.maxKeyLength { throw .invalidArguments }
        guard vb.index < core.vbuckets.count else { throw .notMyVBucket }
        return core.vbuckets[vb.index]
    }
}
