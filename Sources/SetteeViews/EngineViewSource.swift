import SetteeClusterMap
import SetteeCore
import SetteeStorage
import SetteeStreams

#if canImport(Glibc)
    import Glibc
#endif

/// `ViewDataSource` over this node's `BucketEngine`: the engine's per-vBucket change stream,
/// vBucket states and reads.
public final class EngineViewSource: ViewDataSource {
    public let engine: BucketEngine
    let clock: any WallClock

    /// `clock` must be the engine's own (tests inject a manual one into both).
    public init(engine: BucketEngine, clock: any WallClock = SystemWallClock()) {
        self.engine = engine
        self.clock = clock
    }

    public func nowSeconds() -> UInt32 { clock.nowSeconds() }

    public var vbucketCount: Int { engine.settings.numVBuckets }

    public func activeHistory(_ vb: VBucketID) -> (log: FailoverLog, highSeqno: SeqNo, purgeSeqno: SeqNo)? {
        let (state, log, high, purge) = engine.streamHistory(vb)
        return state == .active ? (log, high, purge) : nil
    }

    public func isActive(_ vb: VBucketID) -> Bool { engine.vbucketState(vb) == .active }

    public func isHeld(_ vb: VBucketID) -> Bool { engine.isHeld(vb) }

    public var stateEpoch: UInt64? { engine.stateEpoch }

    public func changes(_ vb: VBucketID, since: SeqNo, limit: Int) throws -> (
        records: [ChangeRecord], highSeqno: SeqNo, purgeSeqno: SeqNo
    ) {
        // Bounded in bytes too: 5,000 changes of 20 MiB documents were 100 GB in one batch, and the pipeline holds
        // several batches with their bodies.
        var batch = try engine.changes(vb, since: since, limit: limit, maxBytes: Limits.viewIndexBatchBytes)
        // Views index the default collection only, as Couchbase's do: named collections' documents are left out
        // (`ChangeRecord.inDefaultCollection`, ADR 0129); the batch still covers their seqnos. A default-collection key
        // stored escaped (it starts with the marker) is indexed under its own key.
        if batch.records.contains(where: { $0.key.first == CollectionKey.engineMarker }) {
            batch.records = batch.records.compactMap { $0.inDefaultCollection() }
        }
        // The batch covers (since, lastSeqno]: the vBucket's high seqno when complete, else the last record.
        // Map functions see bodies: XATTR sections stay out (ADR 0029).
        guard batch.records.contains(where: { $0.meta.datatype.contains(.xattr) }) else {
            return (batch.records, batch.lastSeqno, batch.purgeSeqno)
        }
        let bodies = batch.records.map { r in
            var b = r
            b.value = r.body
            b.meta.datatype.remove(.xattr)
            return b
        }
        return (bodies, batch.lastSeqno, batch.purgeSeqno)
    }

    public func document(_ key: [UInt8]) -> (value: [UInt8], meta: ItemMetadata)? {
        let vb = VBucketHash.vbucket(forKey: key, count: engine.settings.numVBuckets)
        for _ in 0..<Limits.backgroundFetchAttempts {
            do {
                let d = try engine.get(vb, key)
                var meta = d.meta
                meta.datatype.remove(.xattr)
                return (d.body, meta)
            } catch .wouldBlock {
                // Evicted: fetch from disk and retry (we are on a blocking thread).
                let done = Semaphore()
                engine.fetch(vb, key) { done.signal() }
                done.wait()
            } catch {
                return nil
            }
        }
        return nil
    }

    public func addObserver(_ observer: @escaping @Sendable (VBucketID, SeqNo) -> Void) -> UInt64 {
        engine.addChangeObserver(observer)
    }

    public func removeObserver(_ token: UInt64) { engine.removeChangeObserver(token) }
}

/// A one-shot POSIX semaphore for a blocking thread to wait on a callback.
final class Semaphore: @unchecked Sendable {
    private var sem = sem_t()
    init() { sem_init(&sem, 0, 0) }
    deinit { sem_destroy(&sem) }
    func signal() { sem_post(&sem) }
    func wait() { while sem_wait(&sem) != 0 {} }
}
