import Foundation
import Logging
import SetteeCore
import SetteeSQLite
import SetteeStreams
import Synchronization

/// Tuning knobs of one engine; tests shrink them.
public struct EngineOptions: Sendable {
    /// How often the expiry pager scans (seconds).
    public var expiryPagerInterval: Double = 60
    /// The flusher's window once something is dirty (seconds, `Limits.flusherWindowMilliseconds`).
    public var flusherMaxDelay: Double = Double(Limits.flusherWindowMilliseconds) / 1_000
    public var flusherBatchMaxItems: Int = Limits.flusherBatchMaxItems
    /// Seqnos each vBucket remembers for change feeds (`Limits.recentChangesPerVBucket`); 0: every feed scans all
    /// items (tests compare the two).
    public var recentChanges: Int = Limits.recentChangesPerVBucket
    /// Uncompressed key + value bytes per flusher transaction.
    public var flusherBatchMaxBytes: Int = Limits.flusherBatchMaxBytes
    /// Queued dirty items beyond which mutations get `.temporaryFailure` (the flusher is behind).
    public var maxDirtyQueueItems: Int = Limits.maxDirtyQueueItems
    /// While the bucket cannot persist: unpersisted items past which mutations get TMPFAIL.
    public var maxUnpersistedItemsWhileFailing: Int = Limits.maxUnpersistedItemsWhileFailing
    /// Seconds a shutdown keeps retrying a failing disk before giving up on the dirty items.
    public var shutdownPersistTimeout: Double = Double(Limits.shutdownPersistRetrySeconds)
    /// The bucket's file must already exist with data (a bucket the node metadata lists): a missing,
    /// empty or foreign file fails the open instead of starting an empty bucket.
    public var expectExistingData: Bool = false
    /// Repair warmup (`settee-server --repair-bucket`): rows that fail verification are skipped, logged
    /// and deleted from the file; a data file SQLite cannot read is moved aside and the bucket starts empty.
    public var repair: Bool = false
    /// After an unclean shutdown, active vBuckets warm up held back (`heldVBuckets`) instead of starting a new
    /// failover-log entry at once: a clustered node's manager first checks that no replica holds writes this copy
    /// lost (`releaseHold`). Off for an engine nothing would release.
    public var holdAfterUncleanShutdown: Bool = false
    /// Run the collection purger's thread (ADR 0138); off, dropped collections' items stay until
    /// `runCollectionPurge` (tests that purge step by step).
    public var backgroundCollectionPurge: Bool = true
    /// Seconds the open spends at most checking an existing data file (`Limits.openIntegrityCheckSeconds`); 0 skips
    /// the check.
    public var openIntegrityCheckSeconds: Double = Double(Limits.openIntegrityCheckSeconds)
    public init() {}
}

/// One bucket on one node: 1024 vBuckets of in-RAM hash tables, persisted asynchronously to one
/// SQLite file by a flusher thread (see `Flusher`, docs/internals/storage-format.md).
///
/// Data operations run on the caller's thread and take one vBucket lock for a few hash-table
/// operations; they never do I/O. Operations that need a value evicted from memory throw
/// `.wouldBlock`: call `fetch(_:_:completion:)` and retry.
public final class BucketEngine: Sendable {
    public let settings: BucketSettings
    let core: EngineCore
    private let threads: [Latch]
    private let shutDown = Atomic<Bool>(false)
    private let path: String
    /// The real clock: `now()` reads it directly. Going through `core.clock` (an existential on an
    /// object both event loops share) cost a retain of that object per operation, a cache line the
    /// two cores kept taking from each other (`perf`: 4% of an event loop's samples at depth 16).
    private let systemClock: Bool

    /// Opens (creating if absent) the bucket's files under `directory`, warms up everything on disk
    /// into memory, and starts the flusher and the expiry pager. Blocks for the warmup: call it off
    /// any event loop.
    public init(
        settings: BucketSettings, directory: String, clock: any WallClock = SystemWallClock(),
        options: EngineOptions = EngineOptions(), logger: Logger = Logger(label: "settee.storage")
    ) throws {
        precondition(
            settings.numVBuckets > 0 && settings.numVBuckets <= Int(UInt16.max),
            "numVBuckets \(settings.numVBuckets) out of range")
        self.settings = settings
        self.systemClock = clock is SystemWallClock
        var logger = logger
        logger[metadataKey: "bucket"] = "\(settings.name)"
        func makeCore() -> EngineCore {
            var rng = SystemRandomNumberGenerator()
            let vbuckets = (0..<settings.numVBuckets).map { i in
                VBucket(
                    id: VBucketID(UInt16(i)),
                    table: VBucketTable(failoverLog: .fresh(using: &rng), recentChanges: options.recentChanges))
            }
            return EngineCore(
                settings: settings, options: options, clock: clock, logger: logger, directory: directory,
                vbuckets: vbuckets)
        }
        var opened = makeCore()
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let path = directory + "/" + StorageSchema.fileName
        self.path = path

        let existed = FileManager.default.fileExists(atPath: path)
        if options.expectExistingData && !existed && !options.repair {
            throw StorageOpenError("data file \(path) is missing")
        }
        var writer: Connection
        var outcome: Warmup.Outcome
        do {
            writer = try StorageSchema.openWriter(path: path)
            if existed { try Self.checkIntegrity(writer, options: options, logger: logger) }
            outcome = try Warmup.run(conn: writer, core: opened, path: path, existedBefore: existed)
        } catch {
            // Repair of a file SQLite cannot read or that holds no Settee data: keep it (moved aside, never
            // deleted) and start the bucket empty. Bad rows of a readable file were skipped in the warmup. Any other
            // failure (a full disk, a busy or locked file, too many open files, a newer format, a bad state row) is
            // not the file being unreadable, and setting it aside would start the bucket empty under a new history,
            // so every replica would roll back to 0: those fail the open, repair or not.
            guard options.repair, Self.isUnreadable(error) else {
                if options.repair {
                    logger.critical(
                        "repair: the data file was not set aside; the failure is not one repair fixes",
                        metadata: ["error": "\(error)", "path": "\(path)"])
                }
                throw error
            }
            let aside = try Self.moveAside(path, logger: logger)
            logger.critical(
                "repair: the data file could not be read; moved aside, the bucket starts empty",
                metadata: ["error": "\(error)", "movedTo": "\(aside)"])
            opened = makeCore()
            writer = try StorageSchema.openWriter(path: path)
            outcome = try Warmup.run(conn: writer, core: opened, path: path)
        }
        let core = opened
        self.core = core
        // What the manifest dropped is purged from warmup on, also after a restart mid-purge (ADR 0138).
        let dropped = DroppedCollections(settings.collections)
        core.droppedCollections.withLock { $0 = dropped }
        core.collectionsManifest.withLock { $0 = settings.collections }
        core.collectionItemsToPurge.store(dropped.isEmpty ? 0 : 1, ordering: .relaxed)
        core.commitWarmedPrepares()
        core.warmupItems.store(outcome.items, ordering: .relaxed)
        core.warmupNanos.store(Int(outcome.seconds * 1e9), ordering: .relaxed)
        var readerOptions = Connection.Options()
        readerOptions.readOnly = true
        let reader = try Connection(path: path, options: readerOptions)

        let flusher = ThreadHandoff(value: try Flusher(core: core, conn: writer))
        let fetcher = ThreadHandoff(value: try BackgroundFetcher(core: core, conn: reader))
        var threads = [
            startThread(name: "settee-flusher-\(settings.name)", background: true) { flusher.value.run() },
            startThread(name: "settee-bgfetch-\(settings.name)") { fetcher.value.run() },
            startThread(name: "settee-expiry-\(settings.name)", background: true) { ExpiryPager.loop(core) },
        ]
        if options.backgroundCollectionPurge {
            threads.append(
                startThread(name: "settee-colpurge-\(settings.name)", background: true) {
                    CollectionPurger.loop(core)
                })
        }
        self.threads = threads
    }

    deinit { stopThreads(.drain) }

    // MARK: reads

    public func get(_ vb: VBucketID, _ key: [UInt8]) throws(EngineError) -> Document {
        let v = try vbucket(vb, key)
        let (nowS, nowNs) = now()
        var fx = Effects()
        let r = v.table.withLock { t -> Result<Document, EngineError> in
            guard t.state == .active else { return .failure(.notMyVBucket) }
            if !t.pending.isEmpty {
                var doc: Document?
                let r = t.readCommitted(DocKey(key), nowSeconds: nowS, into: &doc) { v, m in
                    Document(value: Array(v), meta: m)
                }
                if let r { return r.flatMap { doc.map { .success($0) } ?? .failure(.keyNotFound) } }
            }
            guard let item = t.live(key, nowSeconds: nowS, nowNanoseconds: nowNs, fx: &fx) else {
                return .failure(.keyNotFound)
            }
            if item.corrupt { return .failure(Self.corruptError) }
            guard let value = item.value else { return .failure(.wouldBlock) }
            if !item.referenced { t.items[DocKey(key)]?.referenced = true }
            return .success(Document(value: value, meta: item.meta))
        }
        if fx.expiredAny { core.apply(fx, vb: vb) }
        return try r.get()
    }

    /// Hands a live document's value bytes and metadata to `body` under the vBucket lock, in place: no copy
    /// of the item and no retain of the value buffer (an item copy cost about 8% of a GET in `perf`). The GET
    /// hot path writes its response from inside `body`; `body` must not block. Same errors as `get`.
    public func withDocument<R>(
        _ vb: VBucketID, _ key: [UInt8], _ body: (UnsafeRawBufferPointer, ItemMetadata) -> R
    ) throws(EngineError) -> R {
        try withDocument(vb, DocKey(key), keyCount: key.count, key: { key }, body)
    }

    /// The same with the key in place (a frame's bytes): a GET hit allocates nothing for its key. Not generic: the
    /// node's GET calls it from another module, where a generic one ran unspecialized (a runtime metadata lookup
    /// and value-witness copies of the result on every GET, ADR 0087); `body` writes its answer where it needs it.
    public func withDocument(
        _ vb: VBucketID, keyBytes: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer, ItemMetadata) -> Void
    ) throws(EngineError) {
        try withDocument(vb, DocKey(keyBytes), keyCount: keyBytes.count, key: { Array(keyBytes) }, body)
    }

    @inline(__always)
    private func withDocument<R>(
        _ vb: VBucketID, _ docKey: DocKey, keyCount: Int, key: () -> [UInt8],
        _ body: (UnsafeRawBufferPointer, ItemMetadata) -> R
    ) throws(EngineError) -> R {
        let v = try vbucket(vb, keyCount: keyCount)
        // A read needs whole seconds (expiry), so the coarse clock; the precise one only if an item expires here.
        let nowS = systemClock ? SystemWallClock().nowSecondsCoarse() : now().0
        var fx = Effects()
        var out: R?
        let r = v.table.withLock { t -> Result<Void, EngineError> in
            guard t.state == .active else { return .failure(.notMyVBucket) }
            if !t.pending.isEmpty, let r = t.readCommitted(docKey, nowSeconds: nowS, into: &out, body) { return r }
            guard let i = t.items.index(forKey: docKey) else { return .failure(.keyNotFound) }
            switch t.items.readiness(at: i, nowSeconds: nowS) {
            case .ready:
                out = t.items.withValue(at: i, body)
                return .success(())
            case .absent: return .failure(.keyNotFound)
            case .corrupt: return .failure(Self.corruptError)
            case .evicted: return .failure(.wouldBlock)
            case .expired:
                // Turns it into a tombstone, judged and stamped by one reading of the precise clock (at or after
                // the coarse second that found it expired, so it is expired there too).
                let (s, ns) = now()
                _ = t.live(key(), nowSeconds: s, nowNanoseconds: ns, fx: &fx)
                return .failure(.keyNotFound)
            }
        }
        if fx.expiredAny { core.apply(fx, vb: vb) }
        try r.get()
        return out!
    }

    /// Metadata of a document, tombstones included (`deleted` set). Never needs the value.
    public func getMeta(_ vb: VBucketID, _ key: [UInt8]) throws(EngineError) -> ItemMetadata {
        let v = try vbucket(vb, key)
        let (nowS, nowNs) = now()
        var fx = Effects()
        let r = v.table.withLock { t -> Result<ItemMetadata, EngineError> in
            guard t.state == .active else { return .failure(.notMyVBucket) }
            if let committed = t.committedMeta(DocKey(key)) {
                return committed.map { .success($0) } ?? .failure(.keyNotFound)
            }
            _ = t.live(key, nowSeconds: nowS, nowNanoseconds: nowNs, fx: &fx)
            guard let item = t.items[DocKey(key)] else { return .failure(.keyNotFound) }
            return .success(item.meta)
        }
        if fx.expiredAny { core.apply(fx, vb: vb) }
        return try r.get()
    }

    /// OBSERVE (0x92): `key`'s state on this copy of `vb` (active or replica) and its CAS. A pending durable write is
    /// not observed: the committed version it shadows is (readers see that one too). On an active copy an expired
    /// document expires here, as a read would make it. A locked document's CAS is the lock's, which only its holder
    /// may learn: it is reported as all ones, as GET reports it.
    public func observe(_ vb: VBucketID, _ key: [UInt8]) throws(EngineError) -> KeyObservation {
        let v = try vbucket(vb, key)
        let (nowS, nowNs) = now()
        var fx = Effects()
        let r = v.table.withLock { t -> Result<KeyObservation, EngineError> in
            guard t.state == .active || t.state == .replica else { return .failure(.notMyVBucket) }
            // As GET_META: an evicted expired document with XATTRs is fetched first, so its tombstone keeps the
            // system XATTRs (ADR 0029); until then it is observed as it is.
            if t.state == .active { _ = t.live(key, nowSeconds: nowS, nowNanoseconds: nowNs, fx: &fx) }
            let k = DocKey(key)
            let item: Item?
            if !t.pending.isEmpty, let p = t.pending[k] {
                // What a warmed-up replica prepare shadowed is unknown: ask another copy, as a read would.
                if p.shadowLost { return .failure(.temporaryFailure) }
                item = p.previous
            } else {
                item = t.items[k]
            }
            guard let item else { return .success(KeyObservation(state: .notFound, cas: .zero)) }
            let persisted = !item.dirty || item.bySeqno <= t.persistedSeqno
            let locked = t.state == .active && t.activeLock(key, nowSeconds: nowS) != nil
            let cas = locked ? CAS(UInt64.max) : item.cas
            if item.deleted { return .success(KeyObservation(state: persisted ? .notFound : .deleted, cas: cas)) }
            return .success(KeyObservation(state: persisted ? .persisted : .notPersisted, cas: cas))
        }
        if fx.expiredAny { core.apply(fx, vb: vb) }
        return try r.get()
    }

    public func getAndTouch(_ vb: VBucketID, _ key: [UInt8], expiry: UInt32) throws(EngineError) -> Document {
        try touchImpl(vb, key, expiry: expiry).doc
    }

    public func touch(_ vb: VBucketID, _ key: [UInt8], expiry: UInt32) throws(EngineError) -> MutationResult {
        try touchImpl(vb, key, expiry: expiry).result
    }

    private func touchImpl(
        _ vb: VBucketID, _ key: [UInt8], expiry: UInt32
    ) throws(EngineError) -> (doc: Document, result: MutationResult) {
        return try clientMutation(vb, key, syncWrite: false, admit: admitMutation) {
            t, nowS, nowNs, fx -> Result<(Document, MutationResult), EngineError> in
            let slot = t.slot(key)
            guard let item = t.live(slot, key, nowSeconds: nowS, nowNanoseconds: nowNs, fx: &fx) else {
                return .failure(.keyNotFound)
            }
            if item.corrupt { return .failure(Self.corruptError) }
            // The flusher writes whole rows, so a touched item needs its value in memory.
            guard let value = item.value else { return .failure(.wouldBlock) }
            let exp = Expiry.absolute(expiry, nowSeconds: nowS)
            let (cas, seq) = t.write(
                key: key, existing: item, value: value, flags: item.flags, expiry: exp, datatype: item.datatype,
                deleted: false, nowNanoseconds: nowNs, fx: &fx, at: slot)
            // The new version is at `slot`: `live` found the item there.
            guard let meta = t.item(at: slot)?.meta else { return .failure(.keyNotFound) }
            return .success(
                (Document(value: value, meta: meta), Self.result(vb, t, cas, seq)))
        }
    }

    // MARK: writes

    /// The frame every client mutation shares: the vBucket (a missing one throws), `admit` (the memory and queue
    /// bounds, or a deletion's own), the clock, then `body` under the vBucket lock once the copy is active and no
    /// prepare holds the key (`refusal`); the effects (dirty queue, memory, expiries) are applied after the lock.
    @inline(__always)
    private func clientMutation<T>(
        _ vb: VBucketID, _ key: [UInt8], syncWrite: SyncWrite, admit: () throws(EngineError) -> Void,
        _ body: (inout VBucketTable, _ nowS: UInt32, _ nowNs: UInt64, inout Effects) -> Result<T, EngineError>
    ) throws(EngineError) -> T {
        let v = try vbucket(vb, key)
        try admit()
        let (nowS, nowNs) = now()
        var fx = Effects()
        let r = v.table.withLock { t -> Result<T, EngineError> in
            guard t.state == .active else { return .failure(.notMyVBucket) }
            if let refusal = t.refusal(key, syncWrite: syncWrite) { return .failure(refusal) }
            // An item keeps its seqno in 48 bits (ADR 0048): a vBucket at the cap takes no more client writes.
            if t.highSeqno.rawValue >= Limits.maxSeqno { return .failure(Self.seqnoSpaceExhausted) }
            return body(&t, nowS, nowNs, &fx)
        }
        core.apply(fx, vb: vb)
        let result = try r.get()
        if syncWrite.isPrepare { core.syncWritesAccepted.wrappingAdd(1, ordering: .relaxed) }
        return result
    }

    /// SET / ADD / REPLACE. A non-zero `cas` must match the live document's (else `.keyExists`) and
    /// requires one to exist (else `.keyNotFound`). Clients never send ADD with a CAS (memcached's validators,
    /// `RequestShape`, reject it); a non-zero `cas` with ADD names the tombstone a sub-document recreation or
    /// revive read, and any other version of the key since (or none) is `.keyExists`.
    /// `preserveExpiry` keeps a live document's expiry instead of applying `expiry`.
    ///
    /// Extended attributes (ADR 0029): with `preserveXattrs` (a plain SET / ADD / REPLACE of a body) the live
    /// document's XATTR section is kept in front of the new body, as kv_engine does; an evicted value with
    /// one is `.wouldBlock`. Without it `value` is the whole stored value (a sub-document mutation, or a SET
    /// whose datatype has the XATTR bit). `keepSystemXattrs` (such a SET from a user without SystemXattrWrite)
    /// keeps the live document's system attributes in front of the value's own (`XattrSection.keepingSystem`).
    /// `macros` are filled in with the new CAS and seqno.
    public func store(
        _ op: StoreOperation, _ vb: VBucketID, _ key: [UInt8], value: [UInt8], flags: UInt32, expiry: UInt32,
        datatype: Datatype, cas: CAS, preserveExpiry: Bool = false, syncWrite: SyncWrite = false,
        preserveXattrs: Bool = true, keepSystemXattrs: Bool = false, macros: [MutationMacro] = []
    ) throws(EngineError) -> MutationResult {
        let r = value.withUnsafeBytes { bytes in
            Result { () throws(EngineError) in
                try store(
                    op, vb, key, valueBytes: bytes, flags: flags, expiry: expiry, datatype: datatype, cas: cas,
                    preserveExpiry: preserveExpiry, syncWrite: syncWrite, preserveXattrs: preserveXattrs,
                    keepSystemXattrs: keepSystemXattrs, macros: macros)
            }
        }
        return try r.get()
    }

    /// `store` of borrowed bytes: a client SET passes its request frame's value in place. The bytes are read only
    /// during the call (copied once, into the new item's box: no intermediate array) and never referenced after
    /// it returns, so the caller may reuse or free the buffer at once.
    public func store(
        _ op: StoreOperation, _ vb: VBucketID, _ key: [UInt8], valueBytes value: UnsafeRawBufferPointer,
        flags: UInt32, expiry: UInt32, datatype: Datatype, cas: CAS, preserveExpiry: Bool = false,
        syncWrite: SyncWrite = false, preserveXattrs: Bool = true, keepSystemXattrs: Bool = false,
        macros: [MutationMacro] = []
    ) throws(EngineError) -> MutationResult {
        // A value with an XATTR section (rare) is handled as an array; a plain body is never copied out.
        let xattrValue: [UInt8]? = datatype.contains(.xattr) ? Array(value) : nil
        let bodyCount = xattrValue.map { $0.count - (XattrSection.length(of: $0) ?? 0) } ?? value.count
        return try clientMutation(
            vb, key, syncWrite: syncWrite,
            admit: { () throws(EngineError) in
                if bodyCount > Limits.maxValueSize { throw .valueTooLarge }
                try admitMutation()
            }
        ) { t, nowS, nowNs, fx -> Result<MutationResult, EngineError> in
            let slot = t.slot(key)
            let live = t.live(slot, key, nowSeconds: nowS, nowNanoseconds: nowNs, fx: &fx)
            switch op {
            case .add:
                if live != nil { return .failure(.keyExists) }
                if !cas.isZero && t.item(at: slot)?.cas != cas { return .failure(.keyExists) }
            case .replace: if live == nil { return .failure(.keyNotFound) }
            case .set: if !cas.isZero && live == nil { return .failure(.keyNotFound) }
            }
            if !cas.isZero, let live, live.cas != cas { return .failure(.keyExists) }
            let exp =
                preserveExpiry
                ? (live?.expiry ?? Expiry.absolute(expiry, nowSeconds: nowS))
                : Expiry.absolute(expiry, nowSeconds: nowS)
            // A new array only when XATTRs are merged; else the borrowed bytes go straight into the box.
            var merged: [UInt8]? = nil
            var storedType = datatype
            if preserveXattrs, let live, live.datatype.contains(.xattr) {
                guard let old = live.value else { return .failure(.wouldBlock) }
                merged = Array(XattrSection.section(of: old)) + value
                storedType.insert(.xattr)
            } else if keepSystemXattrs, let xattrValue, let live, live.datatype.contains(.xattr) {
                guard let old = live.value else { return .failure(.wouldBlock) }
                merged = XattrSection.keepingSystem(of: old, in: xattrValue)
            }
            // `live` is the table's item when there is one; else a tombstone or nothing.
            let previous = live ?? t.item(at: slot)
            return .success(
                Self.withBytes(merged, else: value) { stored in
                    t.mutate(
                        vb, key: key, at: slot, existing: previous, value: stored, flags: flags, expiry: exp,
                        datatype: storedType, deleted: false, nowNanoseconds: nowNs, fx: &fx, macros: macros,
                        syncWrite: syncWrite)
                })
        }
    }

    /// `body` with the bytes of `array`, or `raw` when there is none.
    @inline(__always)
    private static func withBytes<R>(
        _ array: [UInt8]?, else raw: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) -> R
    ) -> R {
        if let array { return array.withUnsafeBytes(body) }
        return body(raw)
    }

    /// Deletes a live document, leaving a tombstone (key + metadata, new seqno) for the change feeds.
    ///
    /// The tombstone keeps the document's system XATTRs (names starting with `_`), as kv_engine does; an
    /// evicted value with XATTRs is `.wouldBlock`. `tombstoneXattrs` (a sub-document delete that edited them)
    /// is the section to keep instead, with `macros` filled in.
    public func delete(
        _ vb: VBucketID, _ key: [UInt8], cas: CAS, syncWrite: SyncWrite = false, tombstoneXattrs: [UInt8]? = nil,
        macros: [MutationMacro] = []
    ) throws(EngineError) -> MutationResult {
        return try clientMutation(
            vb, key, syncWrite: syncWrite,
            admit: { () throws(EngineError) in
                // No memory check: a deletion frees memory. The queue bounds still apply.
                if core.dirtyCount.load(ordering: .relaxed) >= core.options.maxDirtyQueueItems || core.stop != .running
                {
                    throw .temporaryFailure
                }
                try admitWhileFailing()
            }
        ) { t, nowS, nowNs, fx -> Result<MutationResult, EngineError> in
            let slot = t.slot(key)
            guard let live = t.live(slot, key, nowSeconds: nowS, nowNanoseconds: nowNs, fx: &fx) else {
                return .failure(.keyNotFound)
            }
            if !cas.isZero && live.cas != cas { return .failure(.keyExists) }
            var kept = tombstoneXattrs ?? []
            if tombstoneXattrs == nil && live.datatype.contains(.xattr) {
                guard let old = live.value else { return .failure(.wouldBlock) }
                kept = XattrSection.systemOnly(old)
            }
            return .success(
                t.mutate(
                    vb, key: key, at: slot, existing: live, value: kept, flags: live.flags, expiry: 0,
                    datatype: kept.isEmpty ? .raw : .xattr, deleted: true, nowNanoseconds: nowNs, fx: &fx,
                    macros: kept.isEmpty ? [] : macros, syncWrite: syncWrite))
        }
    }

    /// A document or its tombstone (`meta.deleted`, the value then holds the system XATTRs it kept): what a
    /// sub-document request with the ACCESS_DELETED flag reads. With a prepare in flight, the committed
    /// version. Same errors as `get`.
    public func getIncludingDeleted(_ vb: VBucketID, _ key: [UInt8]) throws(EngineError) -> Document {
        let v = try vbucket(vb, key)
        let (nowS, nowNs) = now()
        var fx = Effects()
        let r = v.table.withLock { t -> Result<Document, EngineError> in
            guard t.state == .active else { return .failure(.notMyVBucket) }
            let k = DocKey(key)
            let item: Item
            if !t.pending.isEmpty, let p = t.pending[k] {
                guard let previous = p.previous else { return .failure(p.shadowLost ? .wouldBlock : .keyNotFound) }
                item = previous
            } else {
                _ = t.live(key, nowSeconds: nowS, nowNanoseconds: nowNs, fx: &fx)  // an expired one becomes a tombstone
                guard let found = t.items[k] else { return .failure(.keyNotFound) }
                item = found
            }
            if item.deleted { return .success(Document(value: item.value ?? [], meta: item.meta)) }
            if Expiry.isExpired(item.expiry, nowSeconds: nowS) { return .failure(.keyNotFound) }
            if item.corrupt { return .failure(Self.corruptError) }
            guard let value = item.value else { return .failure(.wouldBlock) }
            return .success(Document(value: value, meta: item.meta))
        }
        if fx.lastSeqno != .zero || fx.expiredAny { core.apply(fx, vb: vb) }
        return try r.get()
    }

    /// Replaces the XATTRs a tombstone keeps (a sub-document XATTR mutation with ACCESS_DELETED): it stays
    /// deleted, with a new seqno and CAS. `cas` (non-zero) must be the tombstone's; a live document is
    /// `.keyExists` (it was recreated since it was read), no item at all `.keyNotFound`.
    ///
    /// `create` (CREATE_AS_DELETED on a missing document): there must be no item at all (else `.keyExists`, the
    /// caller rereads), and the tombstone is created holding `xattrs`, revSeqno 1, as kv_engine does.
    public func updateTombstone(
        _ vb: VBucketID, _ key: [UInt8], xattrs: [UInt8], cas: CAS, syncWrite: SyncWrite = false,
        macros: [MutationMacro] = [], create: Bool = false
    ) throws(EngineError) -> MutationResult {
        return try clientMutation(
            vb, key, syncWrite: syncWrite,
            admit: { () throws(EngineError) in
                if xattrs.count > Limits.subdocMaxXattrSize + 4 { throw .valueTooLarge }
                try admitMutation()
            }
        ) { t, nowS, nowNs, fx -> Result<MutationResult, EngineError> in
            let slot = t.slot(key)
            if t.live(slot, key, nowSeconds: nowS, nowNanoseconds: nowNs, fx: &fx) != nil {
                return .failure(.keyExists)
            }
            if create {
                if t.item(at: slot) != nil { return .failure(.keyExists) }
                return .success(
                    t.mutate(
                        vb, key: key, at: slot, existing: nil, value: xattrs, flags: 0, expiry: 0,
                        datatype: xattrs.isEmpty ? .raw : .xattr, deleted: true, nowNanoseconds: nowNs, fx: &fx,
                        macros: macros, syncWrite: syncWrite))
            }
            guard let tombstone = t.item(at: slot) else { return .failure(.keyNotFound) }
            if !cas.isZero && tombstone.cas != cas { return .failure(.keyExists) }
            return .success(
                t.mutate(
                    vb, key: key, at: slot, existing: tombstone, value: xattrs, flags: tombstone.flags, expiry: 0,
                    datatype: xattrs.isEmpty ? .raw : .xattr, deleted: true, nowNanoseconds: nowNs, fx: &fx,
                    macros: macros, syncWrite: syncWrite))
        }
    }

    /// SET_WITH_META / DEL_WITH_META (ADR 0147): installs `meta`'s version of `key` with a new seqno but the given
    /// CAS, revSeqno, flags, expiry and datatype (`regenerateCAS`: a fresh CAS instead), as XDCR and restore do;
    /// the vBucket's hybrid clock moves past that CAS. A deletion (`meta.deleted`) leaves a tombstone holding
    /// `value` (the XATTRs it keeps; empty for none). Replicated and persisted as any mutation.
    ///
    /// `guardCAS` (non-zero, the request header's) must be the stored version's, live or tombstone (else
    /// `.keyExists`; no version at all `.keyNotFound`); a locked document takes only its lock's CAS (`.locked`).
    /// Then `conflict` decides (a loss is `.keyExists`). Throws `.invalidArguments` for a zero CAS without
    /// `regenerateCAS`, a CAS at or above 2^63, a revSeqno above `Limits.maxRevSeqno` or a deletion whose value
    /// is not an XATTR section; `.valueTooLarge` past `Limits.maxValueSize`.
    public func writeWithMeta(
        _ vb: VBucketID, _ key: [UInt8], value: [UInt8], meta: IncomingMeta, guardCAS: CAS = .zero,
        conflict: WithMetaConflict, regenerateCAS: Bool = false
    ) throws(EngineError) -> MutationResult {
        return try clientMutation(
            vb, key, syncWrite: false,
            admit: { () throws(EngineError) in
                if meta.cas.rawValue >= 1 << 63 || (meta.cas.isZero && !regenerateCAS) { throw .invalidArguments }
                if meta.revSeqno.rawValue > Limits.maxRevSeqno { throw .invalidArguments }
                if meta.deleted && !value.isEmpty
                    && (!meta.datatype.contains(.xattr) || XattrSection.length(of: value) != value.count)
                {
                    throw .invalidArguments
                }
                if value.count > Limits.maxValueSize { throw .valueTooLarge }
                try admitMutation()
            }
        ) { t, nowS, nowNs, fx -> Result<MutationResult, EngineError> in
            let slot = t.slot(key)
            let live = t.live(slot, key, nowSeconds: nowS, nowNanoseconds: nowNs, fx: &fx)
            let stored = live ?? t.item(at: slot)
            if let lock = t.activeLock(key, nowSeconds: nowS), lock.cas != guardCAS { return .failure(.locked) }
            if !guardCAS.isZero {
                guard let stored else { return .failure(.keyNotFound) }
                if stored.cas != guardCAS && t.activeLock(key, nowSeconds: nowS)?.cas != guardCAS {
                    return .failure(.keyExists)
                }
            }
            switch conflict {
            case .skip: break
            case .onlyIfAbsent: if live != nil { return .failure(.keyExists) }
            case .revSeqnoThenCAS:
                if let stored,
                    !meta.winsBySeqno(
                        storedRevSeqno: stored.revSeqno, storedCAS: stored.cas, storedExpiry: stored.expiry,
                        storedFlags: stored.flags)
                {
                    return .failure(.keyExists)
                }
            }
            var installed = meta
            if meta.deleted { installed.datatype = value.isEmpty ? .raw : .xattr }
            let (cas, seq) = t.writeWithMeta(
                key: key, existing: stored, value: value, meta: installed, regenerateCAS: regenerateCAS,
                nowNanoseconds: nowNs, fx: &fx, at: slot)
            return .success(Self.result(vb, t, cas, seq))
        }
    }

    /// INCREMENT/DECREMENT. `expiry == 0xffffffff` means "do not create". Returns the new value.
    /// Increment wraps at 2^64, decrement stops at 0; the stored value is ASCII decimal (JSON).
    public func arithmetic(
        _ vb: VBucketID, _ key: [UInt8], delta: UInt64, initial: UInt64, expiry: UInt32, increment: Bool, cas: CAS,
        syncWrite: SyncWrite = false
    ) throws(EngineError) -> (value: UInt64, result: MutationResult) {
        return try clientMutation(vb, key, syncWrite: syncWrite, admit: admitMutation) {
            t, nowS, nowNs, fx -> Result<(UInt64, MutationResult), EngineError> in
            let slot = t.slot(key)
            if let live = t.live(slot, key, nowSeconds: nowS, nowNanoseconds: nowNs, fx: &fx) {
                if !cas.isZero && live.cas != cas { return .failure(.keyExists) }
                if live.corrupt { return .failure(Self.corruptError) }
                guard let value = live.value else { return .failure(.wouldBlock) }
                // XATTRs stay in front of the number (kv_engine keeps them on arithmetic too).
                let hasXattrs = live.datatype.contains(.xattr)
                let section = hasXattrs ? Array(XattrSection.section(of: value)) : []
                guard let old = Self.parseDecimal(XattrSection.body(of: value, hasXattrs: hasXattrs)) else {
                    return .failure(.deltaBadValue)
                }
                let new = increment ? old &+ delta : (delta > old ? 0 : old - delta)
                let result = t.mutate(
                    vb, key: key, at: slot, existing: live, value: section + Array(String(new).utf8), flags: live.flags,
                    expiry: live.expiry, datatype: hasXattrs ? [.json, .xattr] : .json, deleted: false,
                    nowNanoseconds: nowNs, fx: &fx, syncWrite: syncWrite)
                return .success((new, result))
            }
            if expiry == 0xffff_ffff || !cas.isZero { return .failure(.keyNotFound) }
            let previous = t.item(at: slot)
            let result = t.mutate(
                vb, key: key, at: slot, existing: previous, value: Array(String(initial).utf8), flags: 0,
                expiry: Expiry.absolute(expiry, nowSeconds: nowS), datatype: .json, deleted: false,
                nowNanoseconds: nowNs, fx: &fx, syncWrite: syncWrite)
            return .success((initial, result))
        }
    }

    /// APPEND/PREPEND: keeps flags and expiry. The result's JSON bit is recomputed from its body, as kv_engine
    /// does: `isJSON` is asked about the concatenated body (without the XATTR section) under the vBucket's lock, so
    /// `{"a":` appended with `1}` is JSON and `{}` appended with `{}` is not. The default says no (the bit dropped).
    public func concat(
        _ op: ConcatOperation, _ vb: VBucketID, _ key: [UInt8], value: [UInt8], cas: CAS, syncWrite: SyncWrite = false,
        isJSON: (UnsafeRawBufferPointer) -> Bool = { _ in false }
    ) throws(EngineError) -> MutationResult {
        return try clientMutation(vb, key, syncWrite: syncWrite, admit: admitMutation) {
            t, nowS, nowNs, fx -> Result<MutationResult, EngineError> in
            let slot = t.slot(key)
            guard let live = t.live(slot, key, nowSeconds: nowS, nowNanoseconds: nowNs, fx: &fx) else {
                return .failure(.notStored)
            }
            if !cas.isZero && live.cas != cas { return .failure(.keyExists) }
            if live.corrupt { return .failure(Self.corruptError) }
            guard let old = live.value else { return .failure(.wouldBlock) }
            // The body is concatenated; an XATTR section stays in front.
            let n = live.datatype.contains(.xattr) ? XattrSection.length(of: old) ?? 0 : 0
            if old.count - n + value.count > Limits.maxValueSize { return .failure(.valueTooLarge) }
            let merged = Array(old[..<n]) + (op == .append ? old[n...] + value : value + old[n...])
            var datatype = live.datatype
            datatype.remove(.json)
            if merged[n...].withUnsafeBytes(isJSON) { datatype.insert(.json) }
            return .success(
                t.mutate(
                    vb, key: key, at: slot, existing: live, value: merged, flags: live.flags, expiry: live.expiry,
                    datatype: datatype, deleted: false, nowNanoseconds: nowNs, fx: &fx, syncWrite: syncWrite))
        }
    }

    // MARK: background fetch, persistence

    /// Brings an evicted value back into memory on a storage thread, then calls `completion`
    /// (on that thread). The caller retries its operation then. Completes inline when there is
    /// nothing to fetch (value resident, key absent or deleted).
    public func fetch(_ vb: VBucketID, _ key: [UInt8], completion: @escaping @Sendable () -> Void) {
        guard vb.index < core.vbuckets.count, !key.isEmpty, key.count <= Limits.maxKeyLength else {
            completion()
            return
        }
        let needed = core.vbuckets[vb.index].table.withLock { t -> Bool in
            guard let item = t.items[DocKey(key)] else { return false }
            return !item.hasValue && !item.deleted
        }
        guard needed, core.stop == .running else {
            completion()
            return
        }
        core.fetchQueue.withLock { $0.append(FetchRequest(vb: vb.rawValue, key: key, completion: completion)) }
        core.fetchWakeup.broadcast()
    }

    /// Calls `completion` once `seqno` of `vb` is committed and fsynced (inline if it already is),
    /// or with an error if the bucket's disk failed or it shut down.
    public func waitForPersistence(
        _ vb: VBucketID, _ seqno: SeqNo, completion: @escaping @Sendable (Result<Void, EngineError>) -> Void
    ) {
        guard vb.index < core.vbuckets.count else {
            completion(.failure(.notMyVBucket))
            return
        }
        let core = self.core
        let immediate = core.vbuckets[vb.index].table.withLock { t -> Result<Void, EngineError>? in
            // Checked under the lock: failDisk / shutdown set their flag, then drain each vb's waiters
            // under its lock, so a waiter is either drained or sees the flag.
            if core.diskFailed.load(ordering: .sequentiallyConsistent) {
                return .failure(.persistenceFailing(core.diskFailureMessage ?? "disk failed"))
            }
            if seqno <= t.persistedSeqno { return .success(()) }
            if core.closed.load(ordering: .sequentiallyConsistent) {
                return .failure(.ioFailure("bucket shut down before seqno \(seqno) was persisted"))
            }
            t.waiters.append(PersistenceWaiter(seqno: seqno, completion: completion))
            return nil
        }
        if let immediate {
            completion(immediate)
            return
        }
        core.persistSoon(vb.index)
    }

    /// Somebody polls for `vb`'s persistence (OBSERVE_SEQNO found it behind): its queued rows go in the flusher's
    /// next express batch instead of waiting for the end of the window (ADR 0107).
    public func persistSoon(_ vb: VBucketID) {
        guard vb.index < core.vbuckets.count else { return }
        core.persistSoon(vb.index)
    }

    public func seqnoInfo(_ vb: VBucketID) -> VBucketSeqnoInfo {
        precondition(vb.index < core.vbuckets.count, "\(vb) out of range for \(core.vbuckets.count) vBuckets")
        return core.vbuckets[vb.index].table.withLock { t in
            VBucketSeqnoInfo(
                vbucket: vb, state: t.state, uuid: t.failoverLog.current, highSeqno: t.highSeqno,
                persistedSeqno: t.persistedSeqno)
        }
    }

    public func vbucketState(_ vb: VBucketID) -> VBucketState {
        guard vb.index < core.vbuckets.count else { return .dead }
        return core.vbuckets[vb.index].table.withLock { $0.state }
    }

    /// Changes a vBucket's state (rebalance, failover). Data operations on a non-active vBucket throw
    /// `.notMyVBucket`. Becoming active starts a new failover-log entry at the current high seqno.
    /// The new state is persisted by the flusher's next batch. Change observers are called (with the
    /// current high seqno), so streams of a vBucket that stopped being active notice at once.
    ///
    /// A held vBucket (`heldVBuckets`) stays held and dead when asked to become active or pending (only
    /// `releaseHold` lets it serve); becoming a replica or dead ends the hold without a new history entry (the
    /// copy follows another active now, or is not wanted here). An unsettled copy (an unclean shutdown the cluster
    /// has not compared yet, `settleUnclean`) asked to become active or pending is held, whatever its row said.
    public func setVBucketState(_ vb: VBucketID, _ state: VBucketState) {
        precondition(vb.index < core.vbuckets.count, "\(vb) out of range for \(core.vbuckets.count) vBuckets")
        var fx = Effects()
        var committed = 0
        let high = core.vbuckets[vb.index].table.withLock { t -> SeqNo? in
            if t.unsettled && !t.held && (state == .active || state == .pending) {
                // Its row may predate a takeover: this copy may have acknowledged writes as the active that its
                // replicas hold and the file lacks. Held like an active row at warmup (ADR 0033).
                t.held = true
                t.state = .dead
                t.stateDirty = true
                return t.highSeqno
            }
            var unheld = false
            if t.held {
                if state == .active || state == .pending { return nil }
                t.held = false
                t.stateDirty = true
                unheld = true
            }
            guard t.state != state else { return unheld ? t.highSeqno : nil }
            if state == .active {
                var rng = SystemRandomNumberGenerator()
                t.failoverLog.branch(at: t.highSeqno, using: &rng)
            }
            t.state = state
            t.stateDirty = true
            // A copy that becomes active commits the prepares it holds (sync-writes.md, Recovery).
            if state == .active { committed = t.commitAllPrepares(fx: &fx) }
            return t.highSeqno
        }
        if committed != 0 { core.syncWritesCommitted.wrappingAdd(committed, ordering: .relaxed) }
        guard let high else { return }
        core.stateEpoch.wrappingAdd(1, ordering: .releasing)
        if fx.enqueued != 0 || fx.memDelta != 0 { core.apply(fx, vb: vb) }
        core.stateRowChanged(vb)
        core.flusherWakeup.broadcast()
        if core.observerCount.load(ordering: .relaxed) > 0 { core.notify(vb, high) }
    }

    /// A number raised after every change of a vBucket's state or hold: equal readings mean no state changed in
    /// between, so what was derived from the states still holds (the view index's query filter, ADR 0097).
    public var stateEpoch: UInt64 { core.stateEpoch.load(ordering: .acquiring) }

    /// Whether `vb` is held back after an unclean shutdown (`heldVBuckets`): dead until the cluster releases it or
    /// gives it to another copy.
    public func isHeld(_ vb: VBucketID) -> Bool {
        guard vb.index < core.vbuckets.count else { return false }
        return core.vbuckets[vb.index].table.withLock { $0.held }
    }

    /// vBuckets held back after an unclean shutdown (`EngineOptions.holdAfterUncleanShutdown`), with their high
    /// seqnos: active copies that serve nothing until `releaseHold`.
    public func heldVBuckets() -> [(vb: VBucketID, high: SeqNo)] {
        var out: [(vb: VBucketID, high: SeqNo)] = []
        for (i, v) in core.vbuckets.enumerated() {
            if let high = v.table.withLock({ $0.held ? $0.highSeqno : nil }) {
                out.append((VBucketID(UInt16(i)), high))
            }
        }
        return out
    }

    /// Ends the hold of `vb` and gives it `state` (`.active` starts a new failover-log entry at its high seqno,
    /// as after any unclean shutdown): no replica is ahead of it. False when it was not held.
    @discardableResult
    public func releaseHold(_ vb: VBucketID, becoming state: VBucketState) -> Bool {
        guard vb.index < core.vbuckets.count else { return false }
        let was = core.vbuckets[vb.index].table.withLock { t -> Bool in
            guard t.held else { return false }
            t.held = false
            t.unsettled = false
            t.stateDirty = true
            return true
        }
        guard was else { return false }
        core.stateEpoch.wrappingAdd(1, ordering: .releasing)
        setVBucketState(vb, state)
        core.stateRowChanged(vb)
        core.flusherWakeup.broadcast()
        return true
    }

    /// How many vBuckets are held (not served: ADR 0033) and how many are unsettled after an unclean shutdown (held
    /// ones included), for `/metrics`.
    public func unsettledCounts() -> (held: Int, unsettled: Int) {
        var held = 0
        var unsettled = 0
        for v in core.vbuckets {
            let (h, u) = v.table.withLock { ($0.held, $0.unsettled) }
            if h { held += 1 }
            if u { unsettled += 1 }
        }
        return (held, unsettled)
    }

    /// Whether any vBucket is still unsettled after an unclean shutdown (held ones included): the cluster has not
    /// compared it with its replicas yet, so becoming active holds it.
    public var hasUnsettledVBuckets: Bool {
        core.vbuckets.contains { v in v.table.withLock { $0.unsettled } }
    }

    /// Ends the unclean-shutdown suspicion of every vBucket not held for which `settled(vb)` is true: the cluster's
    /// current map makes this copy a replica or nothing, so it follows another active's history from now on (a
    /// failover that promotes it later is an ordinary promotion). Returns how many were settled.
    @discardableResult
    public func settleUnclean(where settled: (VBucketID) -> Bool) -> Int {
        var count = 0
        for (i, v) in core.vbuckets.enumerated() {
            guard settled(VBucketID(UInt16(i))) else { continue }
            let done = v.table.withLock { t -> Bool in
                guard t.unsettled && !t.held else { return false }
                t.unsettled = false
                return true
            }
            if done { count += 1 }
        }
        return count
    }

    /// The failover log of `vb`, newest entry first: (uuid, seqno) pairs.
    public func failoverLog(_ vb: VBucketID) -> [(uuid: VBucketUUID, seqno: SeqNo)] {
        precondition(vb.index < core.vbuckets.count, "\(vb) out of range for \(core.vbuckets.count) vBuckets")
        return core.vbuckets[vb.index].table.withLock { t in t.failoverLog.entries.map { ($0.uuid, $0.seqno) } }
    }

    /// Removes every document (bucket flush), in memory and on disk. Blocks: call off event loops.
    public func flushAll() throws(EngineError) {
        try onFlusher { .flushAll(done: $0) }
    }

    /// Queues the command `make` builds for the flusher, wakes it and waits for the command's answer (it runs between
    /// two batches). Throws `.temporaryFailure` while shutting down (a command queued as the flusher exits is answered
    /// so too), else what the command answered.
    private func onFlusher<T: Sendable>(
        _ make: (@escaping @Sendable (Result<T, EngineError>) -> Void) -> FlusherCommand
    ) throws(EngineError) -> T {
        if core.stop != .running { throw .temporaryFailure }
        let latch = Latch()
        let outcome = Mutex<Result<T, EngineError>>(.failure(.temporaryFailure))
        let command = make { r in
            outcome.withLock { $0 = r }
            latch.open()
        }
        core.commands.withLock { $0.append(command) }
        core.flusherWakeup.broadcast()
        latch.wait()
        return try outcome.withLock { $0 }.get()
    }

    /// One step of a compaction of the bucket's data file (ADR 0154): at most `maxPages` (`Limits.compactionPagesPerStep`)
    /// free pages given back to the file system, run by the flusher between two batches (so writes wait at most one
    /// step; reads never do). Blocks for the step: call off event loops. Throws `.temporaryFailure` while shutting
    /// down, the disk errors while the disk fails. Answers the pages given back and the free pages left.
    /// The step that leaves no free page checkpoints the WAL: truncating it to nothing, or with `keepsWAL` leaving
    /// it at the size it has (at most its limit, `StorageSchema.openWriter`) for the writes to reuse (ADR 0159: an
    /// auto-compaction under writes, whose WAL would grow back within seconds).
    public func compactStep(
        maxPages: Int = Limits.compactionPagesPerStep, keepsWAL: Bool = false
    ) throws(EngineError) -> (released: Int, remaining: Int) {
        let step = try onFlusher { .compactStep(maxPages: maxPages, keepsWAL: keepsWAL, done: $0) }
        return (step.released, step.remaining)
    }

    /// One repack step of the data file (ADR 0158), on the flusher between two batches: at most `maxRows` rows with
    /// rowids in `(after, upTo]` moved to the end of the table (`upTo` nil on the first step: the table's end now).
    /// Blocking: off event loops. Throws `temporaryFailure` while the engine stops, and the disk's failure.
    /// Returns the rows moved, the last rowid covered (the next step's `after`) and the repack's end.
    public func repackStep(after: Int64, upTo: Int64?, maxRows: Int = Limits.compactionRowsPerStep)
        throws(EngineError) -> (moved: Int, through: Int64, upTo: Int64)
    {
        let step = try onFlusher { .repackStep(after: after, upTo: upTo, maxRows: maxRows, done: $0) }
        return (step.moved, step.through, step.upTo)
    }

    /// Unused bytes' share of the data file's item pages, percent (`Connection.tableFill`, from a short-lived
    /// read-only connection: it reads every page of the table). Blocking. Nil when the file or `dbstat` cannot be read.
    public func itemsUnusedPercent() -> Int? { itemsFill()?.unusedPercent }

    func itemsFill() -> TableFill? {
        var options = Connection.Options()
        options.readOnly = true
        options.cacheSizeKiB = 64
        guard let conn = try? Connection(path: path, options: options) else { return nil }
        defer { conn.close() }
        return conn.tableFill("items")
    }

    /// The data file's figures (`couch_docs_data_size`, `couch_docs_actual_disk_size`, `couch_docs_fragmentation`,
    /// ADR 0154): pages from a short-lived read-only connection (the last committed state), bytes on disk from the
    /// file and its WAL. Blocking (a file open): off event loops. Nil when the file cannot be read.
    public func diskFigures() -> DiskFigures? {
        var options = Connection.Options()
        options.readOnly = true
        options.cacheSizeKiB = 64
        guard let conn = try? Connection(path: path, options: options) else { return nil }
        defer { conn.close() }
        guard let pages = try? conn.pageFigures() else { return nil }
        return DiskFigures(
            dataSize: pages.usedBytes, actualDiskSize: Self.fileBytes(path) + Self.fileBytes(path + "-wal"),
            pages: pages.pageCount, freePages: pages.freePages)
    }

    /// Bytes of the file at `path` on disk; 0 when absent.
    static func fileBytes(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.intValue ?? 0
    }

    /// The bucket's collections manifest changed (or was adopted from the cluster document): the items of the
    /// collections it dropped are purged in the background from memory and disk (`CollectionPurger`, ADR 0138), and
    /// each active vBucket gets the collection and scope events it calls for (`CollectionEvents`, ADR 0143), on the
    /// purger's thread. Returns at once.
    public func setCollections(_ manifest: CollectionsManifest?) {
        let dropped = DroppedCollections(manifest)
        let droppedChanged = core.droppedCollections.withLock { d in
            defer { d = dropped }
            return d != dropped
        }
        // Any edit (a scope created, a maxTTL) changes the event items active vBuckets hold (ADR 0143).
        let manifestChanged = core.collectionsManifest.withLock { m in
            defer { m = manifest }
            return m != manifest
        }
        guard droppedChanged || manifestChanged else { return }
        core.purgeWakeup.locked { _ = core.collectionPurgeGeneration.wrappingAdd(1, ordering: .releasing) }
        core.purgeWakeup.broadcast()
    }

    /// One purge pass now, at most `maxPerVBucket` items per vBucket (what the purger's thread does in a loop;
    /// tests and engines opened with `backgroundCollectionPurge` off). Returns the items removed and those left.
    @discardableResult
    public func runCollectionPurge(maxPerVBucket: Int = Limits.collectionPurgeBatchItems) -> (purged: Int, left: Int) {
        let dropped = core.droppedCollections.withLock { $0 }
        let r = CollectionPurger.pass(core, dropped, maxPerLock: maxPerVBucket, once: true)
        core.collectionItemsToPurge.store(r.left, ordering: .relaxed)
        return r
    }

    /// Dropped collections' items not purged yet, as of the purger's last pass.
    public var collectionItemsToPurge: Int { core.collectionItemsToPurge.load(ordering: .relaxed) }

    /// Scans for expired items now (what the expiry pager does every `expiryPagerInterval`).
    /// Returns how many were expired.
    @discardableResult
    public func runExpiryPager() -> Int { ExpiryPager.scan(core) }

    /// Purges the tombstones older than the bucket's purge interval now (what the expiry pager's thread does after
    /// each expiry pass). Returns how many were purged; the flusher deletes their rows with its next batch.
    @discardableResult
    public func runTombstonePurger() -> Int { TombstonePurger.scan(core) }

    /// Sets the bucket's purge interval in days (nil: the default) for the purges from now on; an edit of the bucket
    /// calls it, so the change needs no restart.
    public func setPurgeInterval(days: Double?) {
        core.purgeAgeNanoseconds.store(BucketSettings.purgeAgeNanoseconds(days: days), ordering: .relaxed)
    }

    /// How old a tombstone must be for the purger to take it, in nanoseconds (the purge interval in force).
    public var purgeAgeNanoseconds: UInt64 { core.purgeAgeNanoseconds.load(ordering: .relaxed) }

    /// The highest seqno of a tombstone purged from `vb` (0: none): a change feed at a position above 0 and below it
    /// may have missed deletions and must start again from 0 (`ChangeBatch.purgeSeqno`, DCP's rollback rule).
    public func purgeSeqno(_ vb: VBucketID) -> SeqNo {
        guard vb.index < core.vbuckets.count else { return .zero }
        return core.vbuckets[vb.index].table.withLock { $0.purgeSeqno }
    }

    public func stats() -> EngineStats {
        var st = EngineStats()
        for vb in core.vbuckets {
            vb.table.withLock { t in
                guard t.state == .active else { return }
                st.vbActiveNum += 1
                st.currItems += t.liveItems - t.systemItems
                st.tombstones += t.items.count - t.liveItems
                st.nonResidentItems += t.nonResident
            }
        }
        st.memUsed = core.memory.current
        st.memQuota = settings.ramQuotaBytes
        let queued = core.dirtyCount.load(ordering: .relaxed)
        st.queueSize = queued
        st.flusherTodo = queued + core.inFlight.load(ordering: .relaxed)
        st.totalPersisted = core.totalPersisted.load(ordering: .relaxed)
        st.flusherCommits = core.flusherCommits.load(ordering: .relaxed)
        st.stateRowsSkipped = core.stateRowsSkipped.load(ordering: .relaxed)
        st.bgFetched = core.bgFetched.load(ordering: .relaxed)
        st.evictions = core.evictions.load(ordering: .relaxed)
        st.expired = core.expired.load(ordering: .relaxed)
        st.tombstonesPurged = core.tombstonesPurged.load(ordering: .relaxed)
        st.collectionItemsToPurge = core.collectionItemsToPurge.load(ordering: .relaxed)
        st.collectionItemsPurged = core.collectionItemsPurged.load(ordering: .relaxed)
        st.diskUsed = [path, path + "-wal", path + "-shm"].reduce(0) { $0 + Self.fileSize($1) }
        st.warmupItems = core.warmupItems.load(ordering: .relaxed)
        st.warmupSeconds = Double(core.warmupNanos.load(ordering: .relaxed)) / 1e9
        st.diskFailure = core.diskFailureMessage
        st.persistFailures = core.persistFailures.load(ordering: .relaxed)
        let since = core.failingSince.load(ordering: .relaxed)
        st.persistFailingSeconds = since == 0 ? 0 : Double(monotonicNanos() &- since) / 1e9
        st.repairedRows = core.repairedRows.load(ordering: .relaxed)
        st.syncWrites.accepted = core.syncWritesAccepted.load(ordering: .relaxed)
        st.syncWrites.committed = core.syncWritesCommitted.load(ordering: .relaxed)
        st.syncWrites.aborted = core.syncWritesAborted.load(ordering: .relaxed)
        st.syncWrites.replicaAccepted = core.replicaPreparesAccepted.load(ordering: .relaxed)
        return st
    }

    /// Why the bucket cannot persist right now, nil while it can (one atomic load when healthy).
    public var persistenceFailure: String? {
        core.diskFailed.load(ordering: .relaxed) ? core.diskFailureMessage : nil
    }

    /// Flushes everything dirty, stops the background threads and closes the files. Blocks: while the
    /// disk fails, for up to `EngineOptions.shutdownPersistTimeout`. Returns how many unpersisted items
    /// were given up (0 after a clean shutdown).
    @discardableResult
    public func shutdown() -> Int {
        stopThreads(.drain)
        return core.lostAtShutdown.load(ordering: .sequentiallyConsistent)
    }

    /// Shuts down and deletes the bucket's files (bucket deletion). Blocks.
    public func destroy() throws(EngineError) {
        shutdown()
        for p in [path, path + "-wal", path + "-shm"] where FileManager.default.fileExists(atPath: p) {
            do { try FileManager.default.removeItem(atPath: p) } catch {
                throw .ioFailure("removing \(p): \(error)")
            }
        }
        // The directory is ours only if nothing else is left in it.
        if (try? FileManager.default.contentsOfDirectory(atPath: core.directory))?.isEmpty == true {
            try? FileManager.default.removeItem(atPath: core.directory)
        }
    }

    /// Stops the threads. `.drain` writes everything first (shutdown); `.abandon` writes nothing more,
    /// which leaves the file as a crash would (tests).
    func stopThreads(_ mode: StopMode) {
        guard !shutDown.exchange(true, ordering: .sequentiallyConsistent) else { return }
        core.stopMode.store(mode.rawValue, ordering: .sequentiallyConsistent)
        core.flusherWakeup.broadcast()
        core.fetchWakeup.broadcast()
        core.pagerWakeup.broadcast()
        core.purgeWakeup.broadcast()
        for t in threads { t.wait() }
        core.closed.store(true, ordering: .sequentiallyConsistent)
        for r in core.changeReaders.withLock({ pool in
            let x = pool
            pool = []
            return x
        }) { r.conn.close() }
        core.failAllWaiters(.ioFailure("bucket shut down"))
        // Fetches queued after the reader exited: let their callers retry (and see the shutdown).
        let orphans = core.fetchQueue.withLock { q in
            let x = q
            q = []
            return x
        }
        for r in orphans { r.completion() }
        // Commands queued after the flusher exited.
        let cmds = core.commands.withLock { c in
            let x = c
            c = []
            return x
        }
        for cmd in cmds {
            switch cmd {
            case .flushAll(let done), .resetVBucket(_, let done): done(.failure(.temporaryFailure))
            case .compactStep(_, _, let done): done(.failure(.temporaryFailure))
            case .repackStep(_, _, _, let done): done(.failure(.temporaryFailure))
            }
        }
    }

    // MARK: test hooks

    /// Test hook: holds the flusher back. Returns once the flusher is parked (not inside a batch), so
    /// nothing written after this call is persisted until `resumeFlusher()`.
    func pauseFlusher() {
        core.flusherPaused.store(true, ordering: .sequentiallyConsistent)
        core.flusherWakeup.broadcast()
        // Idle is only announced from `waitForWork`, after which the loop re-reads the pause flag.
        while !core.flusherIdle.load(ordering: .sequentiallyConsistent) { usleep(1000) }
    }

    /// Test hook: lets the flusher run again and wakes it.
    func resumeFlusher() {
        core.flusherPaused.store(false, ordering: .sequentiallyConsistent)
        core.flusherWakeup.broadcast()
    }

    // MARK: helpers

    private static let corruptError = EngineError.ioFailure("stored value failed its checksum")
    /// A client write to a vBucket whose high seqno is `Limits.maxSeqno` (an item keeps 48 bits of it).
    static let seqnoSpaceExhausted = EngineError.ioFailure("vBucket seqno space exhausted (Limits.maxSeqno)")

    @inline(__always)
    private func vbucket(_ vb: VBucketID, _ key: [UInt8]) throws(EngineError) -> VBucket {
        try vbucket(vb, keyCount: key.count)
    }

    @inline(__always)
    private func vbucket(_ vb: VBucketID, keyCount: Int) throws(EngineError) -> VBucket {
        if keyCount == 0 || keyCount > Limits.maxKeyLength { throw .invalidArguments }
        guard vb.index < core.vbuckets.count else { throw .notMyVBucket }
        return core.vbuckets[vb.index]
    }

    /// Refuses mutations the bucket cannot absorb: flusher too far behind, or memory past the
    /// mutation limit (the item pager is woken; the client retries on TMPFAIL).
    @inline(__always)
    private func admitMutation() throws(EngineError) {
        if core.dirtyCount.load(ordering: .relaxed) >= core.options.maxDirtyQueueItems { throw .temporaryFailure }
        if core.memory.aboveMutationLimit {
            core.wakeFlusherIfIdle()
            throw .temporaryFailure
        }
        if core.stop != .running { throw .temporaryFailure }
        try admitWhileFailing()
    }

    /// While the bucket cannot persist, refuses mutations once the unpersisted backlog passes its bound.
    @inline(__always)
    private func admitWhileFailing() throws(EngineError) {
        guard core.diskFailed.load(ordering: .relaxed) else { return }
        let backlog = core.dirtyCount.load(ordering: .relaxed) + core.inFlight.load(ordering: .relaxed)
        if backlog >= core.options.maxUnpersistedItemsWhileFailing {
            throw .persistenceFailing(core.diskFailureMessage ?? "disk failed")
        }
    }

    @inline(__always)
    private func now() -> (UInt32, UInt64) {
        let ns = systemClock ? SystemWallClock().nowNanoseconds() : core.clock.nowNanoseconds()
        return (UInt32(truncatingIfNeeded: ns / 1_000_000_000), ns)
    }

    @inline(__always)
    fileprivate static func result(_ vb: VBucketID, _ t: VBucketTable, _ cas: CAS, _ seq: SeqNo) -> MutationResult {
        MutationResult(cas: cas, token: MutationToken(vbucket: vb, uuid: t.failoverLog.current, seqno: seq))
    }

    /// ASCII decimal u64 without sign or spaces, as memcached's incr/decr require.
    static func parseDecimal(_ bytes: [UInt8]) -> UInt64? {
        guard !bytes.isEmpty, bytes.count <= 20 else { return nil }
        var v: UInt64 = 0
        for b in bytes {
            guard b >= 0x30 && b <= 0x39 else { return nil }
            let (m, o1) = v.multipliedReportingOverflow(by: 10)
            let (a, o2) = m.addingReportingOverflow(UInt64(b - 0x30))
            if o1 || o2 { return nil }
            v = a
        }
        return v
    }

    /// Whether an open failed because the file cannot be read as a Settee file (SQLite calls it corrupt or not a
    /// database, or it holds no Settee data): the only failures repair sets a file aside for.
    static func isUnreadable(_ error: any Error) -> Bool {
        switch error {
        case let e as SQLiteError: return e.isUnreadableFile
        case let e as StorageOpenError: return e.notSetteeData
        // Warmup's schema and state-row work runs in transactions, which wrap what they throw.
        case let e as TransactionError<SQLiteError>:
            switch e {
            case .sqlite(let inner), .body(let inner): return inner.isUnreadableFile
            }
        case let e as TransactionError<any Error>:
            switch e {
            case .sqlite(let inner): return inner.isUnreadableFile
            case .body(let inner): return isUnreadable(inner)
            }
        default: return false
        }
    }

    /// Checks an existing data file before warmup (`Connection.checkIntegrity`, at most
    /// `options.openIntegrityCheckSeconds`): a damaged page, b-tree or index fails the open with `SQLITE_CORRUPT`,
    /// as a row failing its checksum fails warmup, instead of opening and later answering a lookup that misses a
    /// damaged index's row "not found" (issue 72: 2 of 5,000 documents). A repair rebuilds the indexes (`REINDEX`,
    /// the table rows are the data) and checks again; what is still damaged is unreadable, and repair sets the
    /// file aside. A check that runs out of time is logged and the open goes on.
    static func checkIntegrity(_ conn: Connection, options: EngineOptions, logger: Logger) throws {
        guard options.openIntegrityCheckSeconds > 0 else { return }
        var result = try conn.checkIntegrity(seconds: options.openIntegrityCheckSeconds)
        if case .damaged(let problems) = result, options.repair {
            logger.critical(
                "repair: the data file failed its integrity check; rebuilding its indexes",
                metadata: ["problems": "\(problems.joined(separator: "; "))"])
            try conn.execute("REINDEX")
            result = try conn.checkIntegrity(seconds: options.openIntegrityCheckSeconds)
        }
        switch result {
        case .ok: return
        case .unfinished:
            logger.warning(
                "the data file's integrity check ran out of time; damage is detected at first use",
                metadata: ["seconds": "\(options.openIntegrityCheckSeconds)"])
        case .damaged(let problems):
            throw SQLiteError.corrupt(problems.joined(separator: "; "), context: "integrity_check of \(conn.path)")
        }
    }

    /// Renames the data file and its WAL/SHM to `<name>.corrupt-<unix seconds>*`; returns the new name. Throws when
    /// the data file itself stays in place: the bucket must not then write its tables into it.
    private static func moveAside(_ path: String, logger: Logger) throws -> String {
        let target = path + ".corrupt-\(Int64(time(nil)))"
        // The data file first: when it cannot move, its WAL stays beside it (a file without its WAL loses the
        // transactions still in it).
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: path + suffix) {
            do { try FileManager.default.moveItem(atPath: path + suffix, toPath: target + suffix) } catch {
                logger.error("repair: cannot move a data file aside", metadata: ["error": "\(error)"])
                if suffix.isEmpty {
                    throw StorageOpenError("repair: cannot move \(path) aside (\(error)); it was left as it is")
                }
            }
        }
        return target
    }

    private static func fileSize(_ path: String) -> Int {
        var st = stat()
        return stat(path, &st) == 0 ? Int(st.st_size) : 0
    }
}

extension VBucketTable {
    /// A client mutation under the vBucket lock at `slot`, the key's place looked up once: `write` (new seqno and CAS), then `macros` filled in with them, and
    /// for a sync write the version it replaces (`existing`) kept until the prepare commits or aborts. Returns what
    /// the client is answered.
    fileprivate mutating func mutate(
        _ vb: VBucketID, key: [UInt8], at slot: Slot, existing: Item?, value: [UInt8], flags: UInt32, expiry: UInt32,
        datatype: Datatype, deleted: Bool, nowNanoseconds: UInt64, fx: inout Effects, macros: [MutationMacro] = [],
        syncWrite: SyncWrite
    ) -> MutationResult {
        value.withUnsafeBytes {
            mutate(
                vb, key: key, at: slot, existing: existing, value: $0, flags: flags, expiry: expiry, datatype: datatype,
                deleted: deleted, nowNanoseconds: nowNanoseconds, fx: &fx, macros: macros, syncWrite: syncWrite)
        }
    }

    /// `mutate` of borrowed bytes, copied into the new item's box during the call (a client SET's frame).
    fileprivate mutating func mutate(
        _ vb: VBucketID, key: [UInt8], at slot: Slot, existing: Item?, value: UnsafeRawBufferPointer, flags: UInt32,
        expiry: UInt32, datatype: Datatype, deleted: Bool, nowNanoseconds: UInt64, fx: inout Effects,
        macros: [MutationMacro] = [], syncWrite: SyncWrite
    ) -> MutationResult {
        let (cas, seq) = write(
            key: key, existing: existing, value: value, flags: flags, expiry: expiry, datatype: datatype,
            deleted: deleted, nowNanoseconds: nowNanoseconds, fx: &fx, at: slot)
        if !macros.isEmpty { fillMacros(at: slot, macros, cas: cas, seqno: seq) }
        if syncWrite.isPrepare { recordPrepare(key, previous: existing, seqno: seq, level: syncWrite.level) }
        return BucketEngine.result(vb, self, cas, seq)
    }
}
