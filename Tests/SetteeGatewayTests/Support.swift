import Foundation
import Logging
import SetteeClient
import SetteeCore
import SetteeDocument
import SetteeGateway
import SetteeJSON
import SetteeSubdoc
import Synchronization

func quietLogger() -> Logger {
    var l = Logger(label: "settee.gateway.test")
    l.logLevel = .critical
    return l
}

func json(_ text: String) -> JSON { try! JSON.parse(text) }

/// An embedded walrus bucket and a database on it, closed by `close()`.
struct Fixture {
    let bucket: EmbeddedBucket
    let db: GatewayDatabase

    static func open(_ options: DatabaseOptions = DatabaseOptions(name: "db")) async throws -> Fixture {
        let bucket = try EmbeddedBucket(server: "walrus:", name: "test", logger: quietLogger())
        let db = try await GatewayDatabase(options: options, bucket: bucket, logger: quietLogger())
        return Fixture(bucket: bucket, db: db)
    }

    func close() async {
        await db.close()
        await bucket.close()
    }
}

/// Holds a bucket's change stream from the first entry of a chosen key until `release` (entries before it pass).
final class FeedGate: Sendable {
    private struct State {
        var keys: Set<String> = []
        var holding = false
    }
    private let state = Mutex(State())
    /// Holds the stream from the next entry of `key` on.
    func hold(at key: String) { state.withLock { _ = $0.keys.insert(key) } }
    func release() { state.withLock { $0 = State() } }
    /// Whether the stream is held now, at or after an entry of a held key.
    var isHolding: Bool { state.withLock { $0.holding } }
    /// Whether `m` waits: it is the held key's entry, or comes after one.
    func holds(_ m: BucketMutation) -> Bool {
        state.withLock { s in
            if s.keys.contains(m.key) { s.holding = true }
            return s.holding
        }
    }
}

/// A bucket whose change stream never delivers anything (no `gate`): a database on it knows only its own
/// writes, as a gateway does while its stream lags behind another gateway's writes on the same bucket. With a
/// `gate`, the stream is the inner bucket's, held while the gate is.
struct StalledFeedBucket: GatewayBucket {
    let inner: EmbeddedBucket
    var gate: FeedGate? = nil
    /// When set, the change stream is this one, fed by the test (`gate` is then not used).
    var script: ScriptedFeed? = nil
    /// When set, reads of the keys it names fail as a node failing over answers (`.temporary`), as often as it says.
    var failingReads: FailingReads? = nil
    /// When set, every read and write of a document takes its delay and counts how many run at once.
    var slowCalls: SlowCalls? = nil
    /// When set, the actions it holds for a key run before that key's next read or removal.
    var hooks: BucketHooks? = nil
    var name: String { inner.name }
    func get(_ key: String) async throws(GatewayBucketError) -> BucketItem? {
        await hooks?.run(.get, key)
        if failingReads?.fails(key) == true { throw .temporary("test: read refused") }
        await slowCalls?.take()
        defer { slowCalls?.end() }
        return try await inner.get(key)
    }
    func insert(_ key: String, value: [UInt8], expiry: UInt32) async throws(GatewayBucketError) -> CAS {
        await slowCalls?.take()
        defer { slowCalls?.end() }
        return try await inner.insert(key, value: value, expiry: expiry)
    }
    func replace(_ key: String, value: [UInt8], cas: CAS, expiry: UInt32) async throws(GatewayBucketError) -> CAS {
        await slowCalls?.take()
        defer { slowCalls?.end() }
        return try await inner.replace(key, value: value, cas: cas, expiry: expiry)
    }
    func upsert(_ key: String, value: [UInt8], expiry: UInt32) async throws(GatewayBucketError) -> CAS {
        try await inner.upsert(key, value: value, expiry: expiry)
    }
    func remove(_ key: String, cas: CAS) async throws(GatewayBucketError) -> CAS {
        await hooks?.run(.remove, key)
        return try await inner.remove(key, cas: cas)
    }
    func lookupIn(_ key: String, _ request: SubdocRequest) async throws(GatewayBucketError) -> LookupInResult? {
        try await inner.lookupIn(key, request)
    }
    func mutateIn(_ key: String, _ request: SubdocRequest, cas: CAS) async throws(GatewayBucketError) -> CAS {
        try await inner.mutateIn(key, request, cas: cas)
    }
    func increment(_ key: String, delta: UInt64, initial: UInt64) async throws(GatewayBucketError) -> UInt64 {
        try await inner.increment(key, delta: delta, initial: initial)
    }
    func mutations() -> AsyncStream<BucketMutation> {
        if let script { return script.stream }
        guard let gate else { return AsyncStream { _ in } }
        let source = inner.mutations()
        return AsyncStream { continuation in
            let task = Task {
                for await m in source {
                    if gate.holds(m) {
                        while gate.isHolding, !Task.isCancelled { try? await Task.sleep(for: .milliseconds(2)) }
                    }
                    continuation.yield(m)
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
    func ensureFullCommit() async throws(GatewayBucketError) { try await inner.ensureFullCommit() }
    func close() async {}
}

/// One-shot actions a test runs inside a bucket call, before the call reaches the bucket
/// (`StalledFeedBucket.hooks`): another writer's work landing at exactly that point of a scan.
final class BucketHooks: Sendable {
    enum Call: Hashable, Sendable { case get, remove }
    private let actions = Mutex<[Call: [String: @Sendable () async -> Void]]>([:])
    /// Runs `action` once, before the next `call` of `key`.
    func on(_ call: Call, _ key: String, _ action: @escaping @Sendable () async -> Void) {
        actions.withLock { $0[call, default: [:]][key] = action }
    }
    func run(_ call: Call, _ key: String) async {
        guard let action = actions.withLock({ $0[call]?.removeValue(forKey: key) }) else { return }
        await action()
    }
}

/// A change stream whose entries the test yields (one consumer).
final class ScriptedFeed: Sendable {
    let stream: AsyncStream<BucketMutation>
    private let continuation: AsyncStream<BucketMutation>.Continuation
    init() { (stream, continuation) = AsyncStream.makeStream(of: BucketMutation.self) }
    func yield(_ m: BucketMutation) { continuation.yield(m) }
}

/// Bucket calls that each take `delay`, and the most of them that ran at once (`StalledFeedBucket.slowCalls`), as a
/// cluster bucket's calls are network round trips that overlap.
final class SlowCalls: Sendable {
    let delay: Duration
    private let state = Mutex((running: 0, most: 0, total: 0))
    init(delay: Duration) { self.delay = delay }
    /// Counts the call as running, then waits `delay`; pair with `end`.
    func take() async {
        state.withLock {
            $0.running += 1
            $0.total += 1
            $0.most = max($0.most, $0.running)
        }
        try? await Task.sleep(for: delay)
    }
    func end() { state.withLock { $0.running -= 1 } }
    /// The most calls that ran at once since the last `reset`.
    var most: Int { state.withLock { $0.most } }
    /// The calls made since the last `reset`.
    var total: Int { state.withLock { $0.total } }
    func reset() { state.withLock { $0 = (0, 0, 0) } }
}

/// Keys whose next reads fail, and how many of them (`StalledFeedBucket.failingReads`); only while not paused.
final class FailingReads: Sendable {
    private let state: Mutex<(paused: Bool, left: [String: Int])>
    init(_ counts: [String: Int]) { state = Mutex((false, counts)) }
    func pause() { state.withLock { $0.paused = true } }
    func resume() { state.withLock { $0.paused = false } }
    /// Whether this read of `key` fails (and counts it).
    func fails(_ key: String) -> Bool {
        state.withLock { s in
            guard !s.paused, let n = s.left[key], n > 0 else { return false }
            s.left[key] = n - 1
            return true
        }
    }
    var remaining: Int { state.withLock { $0.left.values.reduce(0, +) } }
}
