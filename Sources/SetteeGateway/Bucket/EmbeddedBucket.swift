import Foundation
import Logging
import SetteeClusterMap
import SetteeCore
import SetteeJSON
import SetteeStorage
import Synchronization

/// A bucket inside the gateway process, on the same storage engine as the data nodes: `"server":
/// "walrus:"` (a temporary directory removed at `close()`) or a directory path (persistent: the gateway
/// finds its documents, users and sequence counter there after a restart). No cluster is involved.
///
/// Engine calls are in-memory hash-table operations; an evicted value is fetched by the engine's
/// background reader and the call retried. The change stream scans the engine's change feed on a detached
/// task, woken by the engine's change observer (never polling).
public final class EmbeddedBucket: GatewayBucket, Sendable {
    public let name: String
    /// The engine, for tests and tools that write to the bucket as a KV client would.
    public let engine: BucketEngine

    /// The embedded engine's `purgeInterval` (its default when it names none).
    public var metadataPurgeIntervalDays: Double? {
        engine.settings.purgeInterval ?? Limits.defaultPurgeIntervalDays
    }
    let directory: String
    private let temporary: Bool
    private let feeds = Mutex<[UInt64: EmbeddedMutationFeed]>([:])
    private let nextFeed = Atomic<UInt64>(0)
    private let closed = Atomic<Bool>(false)

    /// Opens the bucket. `server` is `"walrus:"` (or `"walrus:anything"`, or nil) for an in-memory bucket
    /// backed by a temporary directory, else a directory path. Blocks for the engine's warmup: call it off
    /// event loops.
    public convenience init(server: String?, name: String, logger: Logger) throws {
        if let server, !server.hasPrefix("walrus:") {
            var path = server
            if path.hasPrefix("file://") { path.removeFirst("file://".count) }
            try self.init(directory: path + "/" + name, temporary: false, name: name, logger: logger)
        } else {
            let dir = NSTemporaryDirectory() + "settee-walrus-\(name)-\(UUID().uuidString)"
            try self.init(directory: dir, temporary: true, name: name, logger: logger)
        }
    }

    /// Opens (creating) an engine under `directory`; `temporary` removes the directory at `close()`.
    public init(directory: String, temporary: Bool, name: String, logger: Logger) throws {
        self.name = name
        self.directory = directory
        self.temporary = temporary
        let uuid = RandomID.hex128()
        let settings = BucketSettings(
            name: name, uuid: uuid, ramQuotaMB: Limits.gatewayEmbeddedRamQuotaMB, replicaNumber: 0,
            flushEnabled: true, authType: .none, numVBuckets: Limits.gatewayEmbeddedVBuckets)
        var options = EngineOptions()
        options.flusherMaxDelay = 0.002
        // Documents, users' password hashes and sessions live here: owner only, whatever the umask.
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: directory)
        engine = try BucketEngine(settings: settings, directory: directory, options: options, logger: logger)
        for vb in 0..<settings.numVBuckets { engine.setVBucketState(VBucketID(UInt16(vb)), .active) }
    }

    func location(_ key: String) -> (VBucketID, [UInt8]) {
        let bytes = Array(key.utf8)
        return (VBucketHash.vbucket(forKey: bytes, count: engine.settings.numVBuckets), bytes)
    }

    /// Runs `op`, fetching an evicted value and retrying when the engine says it would block.
    func withFetch<T>(
        _ vb: VBucketID, _ key: [UInt8], _ op: () throws(EngineError) -> T
    ) async throws(GatewayBucketError) -> T {
        for _ in 0..<Limits.gatewayBucketFetchRetries {
            do { return try op() } catch {
                guard error == .wouldBlock else { throw Self.map(error) }
            }
            let engine = self.engine
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                engine.fetch(vb, key) { c.resume() }
            }
        }
        throw .temporary("value still evicted after fetching it")
    }

    static func map(_ error: EngineError) -> GatewayBucketError {
        switch error {
        case .keyNotFound: return .notFound
        case .keyExists: return .exists
        case .valueTooLarge: return .tooBig
        case .temporaryFailure, .wouldBlock, .locked, .syncWriteInProgress: return .temporary("\(error)")
        case .notStored: return .notFound
        case .deltaBadValue: return .failed("counter holds a value that is not a number")
        case .invalidArguments: return .failed("invalid key or arguments")
        case .notMyVBucket: return .temporary("vBucket not active")
        case .ioFailure(let m): return .failed(m)
        case .persistenceFailing(let m): return .temporary("the bucket cannot persist: \(m)")
        }
    }

    /// The JSON bit as the KV port sets it, from the bytes alone (`JSON.isWellFormed`, kv_engine's rule): a value
    /// that only starts like JSON (`{oops`) was flagged JSON before.
    private static func datatype(_ value: [UInt8]) -> Datatype {
        value.withUnsafeBytes { JSON.isWellFormed($0) } ? .json : .raw
    }

    public func get(_ key: String) async throws(GatewayBucketError) -> BucketItem? {
        let (vb, k) = location(key)
        let engine = self.engine
        do {
            let doc = try await withFetch(vb, k) { () throws(EngineError) -> Document in try engine.get(vb, k) }
            return BucketItem(value: doc.body, cas: doc.meta.cas)
        } catch .notFound {
            return nil
        }
    }

    public func insert(_ key: String, value: [UInt8], expiry: UInt32) async throws(GatewayBucketError) -> CAS {
        let (vb, k) = location(key)
        do {
            return try engine.store(
                .add, vb, k, value: value, flags: 0, expiry: expiry, datatype: Self.datatype(value), cas: .zero
            ).cas
        } catch { throw Self.map(error) }
    }

    public func replace(_ key: String, value: [UInt8], cas: CAS, expiry: UInt32) async throws(GatewayBucketError)
        -> CAS
    {
        let (vb, k) = location(key)
        let engine = self.engine
        return try await withFetch(vb, k) { () throws(EngineError) -> CAS in
            try engine.store(
                .replace, vb, k, value: value, flags: 0, expiry: expiry, datatype: Self.datatype(value), cas: cas
            ).cas
        }
    }

    public func upsert(_ key: String, value: [UInt8], expiry: UInt32) async throws(GatewayBucketError) -> CAS {
        let (vb, k) = location(key)
        do {
            return try engine.store(
                .set, vb, k, value: value, flags: 0, expiry: expiry, datatype: Self.datatype(value), cas: .zero
            ).cas
        } catch { throw Self.map(error) }
    }

    public func touch(_ key: String, expiry: UInt32) async throws(GatewayBucketError) {
        let (vb, k) = location(key)
        let engine = self.engine
        try await withFetch(vb, k) { () throws(EngineError) in _ = try engine.touch(vb, k, expiry: expiry) }
    }

    @discardableResult public func remove(_ key: String, cas: CAS) async throws(GatewayBucketError) -> CAS {
        let (vb, k) = location(key)
        do { return try engine.delete(vb, k, cas: cas).cas } catch { throw Self.map(error) }
    }

    public func increment(_ key: String, delta: UInt64, initial: UInt64) async throws(GatewayBucketError) -> UInt64 {
        let (vb, k) = location(key)
        let engine = self.engine
        return try await withFetch(vb, k) { () throws(EngineError) -> UInt64 in
            try engine.arithmetic(vb, k, delta: delta, initial: initial, expiry: 0, increment: true, cas: .zero).value
        }
    }

    public func mutations() -> AsyncStream<BucketMutation> {
        let (stream, continuation) = AsyncStream.makeStream(of: BucketMutation.self, bufferingPolicy: .unbounded)
        if closed.load(ordering: .acquiring) {
            continuation.finish()
            return stream
        }
        let feed = EmbeddedMutationFeed(engine: engine, continuation: continuation)
        let id = nextFeed.wrappingAdd(1, ordering: .relaxed).oldValue
        feeds.withLock { $0[id] = feed }
        let engine = self.engine
        let token = engine.addChangeObserver { vb, _ in feed.mark(vb) }
        let task = Task.detached { await feed.run() }
        continuation.onTermination = { [weak self] _ in
            task.cancel()
            engine.removeChangeObserver(token)
            feed.stop()
            _ = self?.feeds.withLock { $0.removeValue(forKey: id) }
        }
        return stream
    }

    public func close() async {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let open = feeds.withLock { f -> [EmbeddedMutationFeed] in
            defer { f.removeAll() }
            return Array(f.values)
        }
        for feed in open { feed.finish() }
        engine.shutdown()
        if temporary { try? FileManager.default.removeItem(atPath: directory) }
    }
}

/// One consumer of `EmbeddedBucket.mutations()`: scans every vBucket from seqno 0, then re-scans the
/// vBuckets the engine's observer marked, from where the last scan ended.
final class EmbeddedMutationFeed: Sendable {
    private struct State {
        var dirty = Set<VBucketID>()
        var waiter: CheckedContinuation<Void, Never>?
        var stopped = false
    }
    private let engine: BucketEngine
    private let continuation: AsyncStream<BucketMutation>.Continuation
    private let state = Mutex(State())

    init(engine: BucketEngine, continuation: AsyncStream<BucketMutation>.Continuation) {
        self.engine = engine
        self.continuation = continuation
    }

    /// Called by the engine's observer (any thread, must not block).
    func mark(_ vb: VBucketID) {
        let w = state.withLock { s -> CheckedContinuation<Void, Never>? in
            s.dirty.insert(vb)
            defer { s.waiter = nil }
            return s.waiter
        }
        w?.resume()
    }

    func stop() {
        let w = state.withLock { s -> CheckedContinuation<Void, Never>? in
            s.stopped = true
            defer { s.waiter = nil }
            return s.waiter
        }
        w?.resume()
    }

    func finish() {
        stop()
        continuation.finish()
    }

    private func nextDirty() async -> Set<VBucketID>? {
        while true {
            let ready = state.withLock { s -> Set<VBucketID>?? in
                if s.stopped { return .some(nil) }
                if !s.dirty.isEmpty {
                    defer { s.dirty.removeAll() }
                    return .some(s.dirty)
                }
                return nil
            }
            if let ready { return ready }
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { s -> Bool in
                    if s.stopped || !s.dirty.isEmpty { return true }
                    s.waiter = c
                    return false
                }
                if resumeNow { c.resume() }
            }
        }
    }

    func run() async {
        let count = engine.settings.numVBuckets
        var since = [SeqNo](repeating: .zero, count: count)
        var purgeFloor = [PurgeFloor](repeating: PurgeFloor(), count: count)
        var pending = Set((0..<count).map { VBucketID(UInt16($0)) })
        while !Task.isCancelled {
            for vb in pending.sorted() {
                while true {
                    let batch: ChangeBatch
                    do {
                        batch = try engine.changes(vb, since: since[vb.index], limit: Limits.gatewayMutationScanBatch)
                    } catch {
                        // Shut down (or a disk failure, which the engine reports elsewhere): stop the stream.
                        continuation.finish()
                        return
                    }
                    if purgeFloor[vb.index].missesDeletions(since: since[vb.index], purgeSeqno: batch.purgeSeqno) {
                        // Tombstones above this feed's position were purged (ADR 0095): read the vBucket again from
                        // 0, as a DCP consumer told to roll back to 0 does, and say so first (ADR 0096).
                        since[vb.index] = .zero
                        continuation.yield(.restart(vb, vbucketCount: count))
                        continue
                    }
                    // Named collections' documents (ADR 0129) are not the gateway's, which serves the default one
                    // (`ChangeRecord.inDefaultCollection`, the rule the DCP producer applies for RemoteBucket's feed); nor
                    // are binary keys starting with 0xff (stored escaped), which no UTF-8 document ID can name.
                    for r in batch.records where r.key.first != CollectionKey.engineMarker {
                        // A deletion's value is the XATTR section its tombstone kept (ADR 0029).
                        let (body, sync, purged) = BucketMutation.split(
                            r.value, hasXattrs: r.meta.datatype.contains(.xattr))
                        continuation.yield(
                            BucketMutation(
                                key: String(decoding: r.key, as: UTF8.self), value: r.meta.deleted ? [] : body,
                                cas: r.meta.cas, deleted: r.meta.deleted, vbucket: vb, seqno: r.meta.bySeqno,
                                syncXattr: sync, purged: purged))
                    }
                    since[vb.index] = batch.lastSeqno
                    if batch.complete { break }
                }
            }
            guard let next = await nextDirty() else { break }
            pending = next
        }
        continuation.finish()
    }
}
