import SetteeBLIP
import SetteeClient
import SetteeCore
import SetteeSubdoc
import Synchronization
import Testing

@testable import SetteeGateway

/// A BLIP client's checkpoint never outlives the revisions before it: `setCheckpoint` makes every acknowledged write
/// durable first (`GatewayDatabase.ensureFullCommit`), as the REST replicator's `_ensure_full_commit` does.
@Suite struct BLIPCheckpointDurabilityTests {
    @Test func aCheckpointIsStoredOnlyAfterAFullCommit() async throws {
        // Proves: a revision pushed over BLIP is acknowledged, then the client's setCheckpoint runs a full commit of
        // the bucket before the checkpoint's `_local` document is written; a full commit that fails answers an
        // error (503, retryable) and stores no checkpoint, and the next attempt, once commits succeed, stores it.
        let inner = try EmbeddedBucket(server: "walrus:", name: "test", logger: quietLogger())
        let bucket = CommitOrderBucket(inner: inner)
        let db = try await GatewayDatabase(options: DatabaseOptions(name: "db"), bucket: bucket, logger: quietLogger())
        let h = BLIPSyncHandler(db: db, user: nil, subprotocol: .cbMobile3, logger: quietLogger())
        let peer = InMemoryBLIPPeer()
        let rev = await h.handle(
            .request("rev", [("id", "d1"), ("rev", "1-abc"), ("history", "")], body: #"{"v":1}"#), peer: peer)
        #expect(rev.type == .response, "\(rev.properties)")
        let checkpointKey = GatewayDatabase.localKey("checkpoint/cp-1")

        bucket.failCommits(true)
        let refused = await h.handle(.request("setCheckpoint", [("client", "cp-1")], body: #"{"local":1}"#), peer: peer)
        #expect(BLIPSyncHandlerTests.errorCode(refused) == 503, "\(refused.properties)")
        #expect(!bucket.events.contains("write \(checkpointKey)"), "\(bucket.events)")
        #expect(
            BLIPSyncHandlerTests.errorCode(await h.handle(.request("getCheckpoint", [("client", "cp-1")]), peer: peer))
                == 404)

        bucket.failCommits(false)
        let stored = await h.handle(.request("setCheckpoint", [("client", "cp-1")], body: #"{"local":1}"#), peer: peer)
        #expect(stored.type == .response, "\(stored.properties)")
        let events = bucket.events
        let commit = events.lastIndex(of: "fullCommit ok")
        let write = events.firstIndex(of: "write \(checkpointKey)")
        if let commit, let write {
            #expect(commit < write, "the checkpoint was written before the full commit: \(events)")
        } else {
            Issue.record("no full commit (\(commit == nil)) or no checkpoint write (\(write == nil)): \(events)")
        }
        await db.close()
        await inner.close()
    }
}

/// An embedded bucket that logs its full commits and writes in order, and can fail its full commits as a cluster
/// bucket does when a majority of a vBucket's copies does not persist in time (`.temporary`).
final class CommitOrderBucket: GatewayBucket, Sendable {
    let inner: EmbeddedBucket
    private let log = Mutex((events: [String](), failing: false))
    init(inner: EmbeddedBucket) { self.inner = inner }
    var events: [String] { log.withLock { $0.events } }
    func failCommits(_ fail: Bool) { log.withLock { $0.failing = fail } }
    private func note(_ event: String) { log.withLock { $0.events.append(event) } }

    var name: String { inner.name }
    func get(_ key: String) async throws(GatewayBucketError) -> BucketItem? { try await inner.get(key) }
    func insert(_ key: String, value: [UInt8], expiry: UInt32) async throws(GatewayBucketError) -> CAS {
        note("write \(key)")
        return try await inner.insert(key, value: value, expiry: expiry)
    }
    func replace(_ key: String, value: [UInt8], cas: CAS, expiry: UInt32) async throws(GatewayBucketError) -> CAS {
        note("write \(key)")
        return try await inner.replace(key, value: value, cas: cas, expiry: expiry)
    }
    func upsert(_ key: String, value: [UInt8], expiry: UInt32) async throws(GatewayBucketError) -> CAS {
        note("write \(key)")
        return try await inner.upsert(key, value: value, expiry: expiry)
    }
    func remove(_ key: String, cas: CAS) async throws(GatewayBucketError) -> CAS {
        note("write \(key)")
        return try await inner.remove(key, cas: cas)
    }
    func lookupIn(_ key: String, _ request: SubdocRequest) async throws(GatewayBucketError) -> LookupInResult? {
        try await inner.lookupIn(key, request)
    }
    func mutateIn(_ key: String, _ request: SubdocRequest, cas: CAS) async throws(GatewayBucketError) -> CAS {
        note("write \(key)")
        return try await inner.mutateIn(key, request, cas: cas)
    }
    func increment(_ key: String, delta: UInt64, initial: UInt64) async throws(GatewayBucketError) -> UInt64 {
        try await inner.increment(key, delta: delta, initial: initial)
    }
    func mutations() -> AsyncStream<BucketMutation> { inner.mutations() }
    func ensureFullCommit() async throws(GatewayBucketError) {
        if log.withLock({ $0.failing }) {
            note("fullCommit failed")
            throw .temporary("test: a majority did not persist in time")
        }
        try await inner.ensureFullCommit()
        note("fullCommit ok")
    }
    func close() async {}
}
