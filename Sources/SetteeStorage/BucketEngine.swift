import Logging
import SetteeCore
import Synchronization

/// Tuning knobs of one engine; tests shrink them.
public struct EngineOptions: Sendable {
    /// How often the expiry pager scans (seconds).
    public var expiryPagerInterval: Double = 60
    /// Longest the flusher waits to gather a batch once something is dirty (seconds).
    public var flusherMaxDelay: Double = 0.005
    public var flusherBatchMaxItems: Int = Limits.flusherBatchMaxItems
    public init() {}
}

/// PLACEHOLDER (in-memory only) with the final public API; replaced by the real engine.
/// One bucket on one node: 1024 vBuckets of in-RAM hash tables, persisted asynchronously.
public final class BucketEngine: Sendable {
    public let settings: BucketSettings
    private let clock: any WallClock
    private struct State {
        var items: [[[UInt8]: Document]]
        var seqnos: [SeqNo]
        var hlc = HybridLogicalClock()
    }
    private let state: Mutex<State>

    /// Opens (creating if absent) the bucket's files under `directory`, warms up everything on disk
    /// into memory, and starts the flusher and the expiry pager. Blocks for the warmup: call it off
    /// any event loop.
    public init(
        settings: BucketSettings, directory: String, clock: any WallClock = SystemWallClock(),
        options: EngineOptions = EngineOptions(), logger: Logger = Logger(label: "settee.storage")
    ) throws {
        self.settings = settings
        self.clock = clock
        self.state = Mutex(
            State(
                items: Array(repeating: [:], count: settings.numVBuckets),
                seqnos: Array(repeating: .zero, count: settings.numVBuckets)))
    }

    public func get(_ vb: VBucketID, _ key: [UInt8]) throws(EngineError) -> Document {
        let now = clock.nowSeconds()
        let doc = state.withLock { $0.items[vb.index][key] }
        guard let doc, !doc.meta.deleted, !Expiry.isExpired(doc.meta.expiry, nowSeconds: now) else {
            throw .keyNotFound
        }
        return doc
    }

    public func getMeta(_ vb: VBucketID, _ key: [UInt8]) throws(EngineError) -> ItemMetadata {
        guard let doc = state.withLock({ $0.items[vb.index][key] }) else { throw .keyNotFound }
        return doc.meta
    }

    public func getAndTouch(_ vb: VBucketID, _ key: [UInt8], expiry: UInt32) throws(EngineError) -> Document {
        _ = try touch(vb, key, expiry: expiry)
        return try get(vb, key)
    }

    public func touch(_ vb: VBucketID, _ key: [UInt8], expiry: UInt32) throws(EngineError) -> MutationResult {
        let doc = try get(vb, key)
        return try store(
            .set, vb, key, value: doc.value, flags: doc.meta.flags, expiry: expiry, datatype: doc.meta.datatype,
            cas: .zero)
    }

    public func store(
        _ op: StoreOperation, _ vb: VBucketID, _ key: [UInt8], value: [UInt8], flags: UInt32, expiry: UInt32,
        datatype: Datatype, cas: CAS, preserveExpiry: Bool = false
    ) throws(EngineError) -> MutationResult {
        if value.count > Limits.maxValueSize { throw .valueTooLarge }
        let now = clock.nowNanoseconds()
        let nowS = UInt32(truncatingIfNeeded: now / 1_000_000_000)
        let result: Result<MutationResult, EngineError> = state.withLock { s in
            let old = s.items[vb.index][key]
            let live = old.flatMap { !$0.meta.deleted && !Expiry.isExpired($0.meta.expiry, nowSeconds: nowS) ? $0 : nil }
            switch op {
            case .add: if live != nil { return .failure(.keyExists) }
            case .replace: if live == nil { return .failure(.keyNotFound) }
            case .set: if !cas.isZero && live == nil { return .failure(.keyNotFound) }
            }
            if !cas.isZero, let live, live.meta.cas != cas { return .failure(.keyExists) }
            let seq = s.seqnos[vb.index].next
            s.seqnos[vb.index] = seq
            let newCAS = s.hlc.next(nowNanoseconds: now)
            let exp = preserveExpiry && live != nil ? live!.meta.expiry : Expiry.absolute(expiry, nowSeconds: nowS)
            s.items[vb.index][key] = Document(
                value: value,
                meta: ItemMetadata(
                    cas: newCAS, revSeqno: (old?.meta.revSeqno ?? RevSeqNo(0)).next, bySeqno: seq, flags: flags,
                    expiry: exp, datatype: datatype, deleted: false))
            return .success(
                MutationResult(cas: newCAS, token: MutationToken(vbucket: vb, uuid: VBucketUUID(1), seqno: seq)))
        }
        return try result.get()
    }

    public func delete(_ vb: VBucketID, _ key: [UInt8], cas: CAS) throws(EngineError) -> MutationResult {
        let doc = try get(vb, key)
        if !cas.isZero && doc.meta.cas != cas { throw .keyExists }
        let now = clock.nowNanoseconds()
        return state.withLock { s in
            let seq = s.seqnos[vb.index].next
            s.seqnos[vb.index] = seq
            let newCAS = s.hlc.next(nowNanoseconds: now)
            var meta = doc.meta
            meta.deleted = true
            meta.cas = newCAS
            meta.bySeqno = seq
            meta.revSeqno = meta.revSeqno.next
            s.items[vb.index][key] = Document(value: [], meta: meta)
            return MutationResult(cas: newCAS, token: MutationToken(vbucket: vb, uuid: VBucketUUID(1), seqno: seq))
        }
    }

    /// INCREMENT/DECREMENT. `expiry == 0xffffffff` means "do not create". Returns the new value.
    public func arithmetic(
        _ vb: VBucketID, _ key: [UInt8], delta: UInt64, initial: UInt64, expiry: UInt32, increment: Bool, cas: CAS
    ) throws(EngineError) -> (value: UInt64, result: MutationResult) {
        let current: Document
        do { current = try get(vb, key) } catch {
            if expiry == 0xffff_ffff { throw .keyNotFound }
            let r = try store(
                .add, vb, key, value: Array(String(initial).utf8), flags: 0, expiry: expiry, datatype: .json,
                cas: .zero)
            return (initial, r)
        }
        guard let old = UInt64(String(decoding: current.value, as: UTF8.self)) else { throw .deltaBadValue }
        let new = increment ? old &+ delta : (delta > old ? 0 : old - delta)
        let r = try store(
            .set, vb, key, value: Array(String(new).utf8), flags: current.meta.flags, expiry: 0,
            datatype: current.meta.datatype, cas: cas.isZero ? current.meta.cas : cas, preserveExpiry: true)
        return (new, r)
    }

    public func concat(
        _ op: ConcatOperation, _ vb: VBucketID, _ key: [UInt8], value: [UInt8], cas: CAS
    ) throws(EngineError) -> MutationResult {
        let current: Document
        do { current = try get(vb, key) } catch { throw .notStored }
        let merged = op == .append ? current.value + value : value + current.value
        return try store(
            .set, vb, key, value: merged, flags: current.meta.flags, expiry: 0, datatype: current.meta.datatype,
            cas: cas.isZero ? current.meta.cas : cas, preserveExpiry: true)
    }

    /// Brings an evicted value back into memory on a storage thread, then calls `completion`
    /// (on that thread). The caller retries its operation then.
    public func fetch(_ vb: VBucketID, _ key: [UInt8], completion: @escaping @Sendable () -> Void) {
        completion()
    }

    /// Calls `completion` once `seqno` of `vb` is committed and fsynced (inline if it already is),
    /// or with an error if the bucket's disk failed or it shut down.
    public func waitForPersistence(
        _ vb: VBucketID, _ seqno: SeqNo, completion: @escaping @Sendable (Result<Void, EngineError>) -> Void
    ) {
        completion(.success(()))
    }

    public func seqnoInfo(_ vb: VBucketID) -> VBucketSeqnoInfo {
        let high = state.withLock { $0.seqnos[vb.index] }
        return VBucketSeqnoInfo(vbucket: vb, state: .active, uuid: VBucketUUID(1), highSeqno: high, persistedSeqno: high)
    }

    public func vbucketState(_ vb: VBucketID) -> VBucketState { .active }

    /// Removes every document (bucket flush), in memory and on disk. Blocks: call off event loops.
    public func flushAll() throws(EngineError) {
        state.withLock { s in for i in s.items.indices { s.items[i].removeAll() } }
    }

    public func stats() -> EngineStats {
        var st = EngineStats()
        st.currItems = state.withLock { s in s.items.reduce(0) { $0 + $1.values.filter { !$0.meta.deleted }.count } }
        st.vbActiveNum = settings.numVBuckets
        st.memQuota = settings.ramQuotaBytes
        return st
    }

    /// Flushes everything dirty, stops the background threads and closes the files. Blocks.
    public func shutdown() {}

    /// Shuts down and deletes the bucket's files (bucket deletion). Blocks.
    public func destroy() throws(EngineError) {}
}
