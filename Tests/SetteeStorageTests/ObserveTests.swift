import Foundation
import SetteeCore
import SetteeTestSupport
import Testing

@testable import SetteeStorage

/// OBSERVE (0x92) on the engine: a key's state on one copy and its CAS (`BucketEngine.observe`).
@Suite(.onTestThreads) struct ObserveTests {
    let dir = TemporaryDirectory("storage")

    /// A flusher that waits 30 s before writing plain mutations: a key's state stays "not persisted" until the test
    /// asks for persistence.
    func openLongWindow(clock: any WallClock = SystemWallClock()) throws -> BucketEngine {
        var options = testOptions()
        options.flusherMaxDelay = 30
        return try openEngine(dir, clock: clock, options: options)
    }

    /// A live key is "not persisted" with its CAS until its vBucket is persisted, then "persisted"; its deletion is
    /// "logically deleted" until that is persisted, then "not found"; a key never written is "not found" with CAS 0.
    @Test func aKeyGoesFromNotPersistedToPersistedAndItsDeletionToNotFound() throws {
        let e = try openLongWindow()
        defer { e.shutdown() }
        let k = key("observed")
        let vb = vbOf(k, e)
        let w = try e.store(.set, vb, k, value: bytes("v"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(try e.observe(vb, k) == KeyObservation(state: .notPersisted, cas: w.cas))
        #expect(isOK(waitPersisted(e, vb, w.token.seqno)))
        #expect(try e.observe(vb, k) == KeyObservation(state: .persisted, cas: w.cas))

        let d = try e.delete(vb, k, cas: .zero)
        #expect(try e.observe(vb, k) == KeyObservation(state: .deleted, cas: d.cas))
        #expect(isOK(waitPersisted(e, vb, d.token.seqno)))
        #expect(try e.observe(vb, k).state == .notFound)

        #expect(try e.observe(vb, key("never-written")) == KeyObservation(state: .notFound, cas: .zero))
    }

    /// A key of another vBucket than the one asked is not found there; a vBucket out of range or dead is not this
    /// node's; a replica copy answers; a key that is empty or too long is refused.
    @Test func vBucketsAndKeysAreChecked() throws {
        let e = try openLongWindow()
        defer { e.shutdown() }
        let k = key("k")
        let vb = vbOf(k, e)
        _ = try e.store(.set, vb, k, value: bytes("v"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        let other = VBucketID(UInt16((Int(vb.rawValue) + 1) % e.settings.numVBuckets))
        #expect(try e.observe(other, k).state == .notFound)
        #expect(throws: EngineError.notMyVBucket) { try e.observe(VBucketID(UInt16(e.settings.numVBuckets)), k) }
        #expect(throws: EngineError.invalidArguments) { try e.observe(vb, []) }
        #expect(throws: EngineError.invalidArguments) {
            try e.observe(vb, [UInt8](repeating: 0x61, count: Limits.maxKeyLength + 1))
        }
        e.setVBucketState(vb, .replica)
        #expect(try e.observe(vb, k).state == .notPersisted)
        e.setVBucketState(vb, .dead)
        #expect(throws: EngineError.notMyVBucket) { try e.observe(vb, k) }
    }

    /// A pending durable write is not observed: the committed version it shadows is, and a key whose first version
    /// is still a prepare is not found.
    @Test func aPendingDurableWriteShowsTheCommittedVersion() throws {
        let e = try openLongWindow()
        defer { e.shutdown() }
        let k = key("k")
        let vb = vbOf(k, e)
        let committed = try e.store(.set, vb, k, value: bytes("1"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(isOK(waitPersisted(e, vb, committed.token.seqno)))
        _ = try e.store(
            .set, vb, k, value: bytes("2"), flags: 0, expiry: 0, datatype: .raw, cas: .zero, syncWrite: true)
        #expect(try e.observe(vb, k) == KeyObservation(state: .persisted, cas: committed.cas))
        let fresh = key("fresh")
        _ = try e.store(
            .set, vbOf(fresh, e), fresh, value: bytes("1"), flags: 0, expiry: 0, datatype: .raw, cas: .zero,
            syncWrite: true)
        #expect(try e.observe(vbOf(fresh, e), fresh).state == .notFound)
    }

    /// A locked document's CAS is the lock's, which only its holder may learn: OBSERVE reports all ones, as GET does.
    @Test func aLockedDocumentsCASIsNotGivenAway() throws {
        let e = try openLongWindow()
        defer { e.shutdown() }
        let k = key("k")
        let vb = vbOf(k, e)
        _ = try e.store(.set, vb, k, value: bytes("v"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        let locked = try e.getAndLock(vb, k, lockSeconds: 15)
        let observed = try e.observe(vb, k)
        #expect(observed.cas == CAS(UInt64.max))
        #expect(observed.cas != locked.meta.cas)
    }

    /// An expired document whose value was evicted and which has XATTRs is fetched before it expires, as for GET_META:
    /// observing it never writes a tombstone without its system XATTRs.
    @Test func anEvictedExpiredDocumentKeepsItsSystemXattrsWhenObserved() throws {
        let clock = ManualWallClock()
        let e = try openEngine(dir, clock: clock)
        defer { e.shutdown() }
        let k = key("k")
        let vb = vbOf(k, e)
        let value = xattrValue([("_sync", #"{"rev":"3-c"}"#), ("app", "1")], body: #"{"a":1}"#)
        _ = try e.store(.set, vb, k, value: value, flags: 0, expiry: 100, datatype: [.json, .xattr], cas: .zero)
        try waitAllPersisted(e)
        #expect(evict(e, vb, k))
        clock.advance(seconds: 101)
        _ = try e.observe(vb, k)
        #expect(eventually { (try? e.getIncludingDeleted(vb, k))?.meta.deleted == true })
        #expect(try e.getIncludingDeleted(vb, k).value == xattrValue([("_sync", #"{"rev":"3-c"}"#)], body: ""))
        #expect([.deleted, .notFound].contains(try e.observe(vb, k).state))
    }

    /// An expired document expires when observed on the active copy, as a read makes it: it is a deletion not yet
    /// on disk.
    @Test func anExpiredDocumentIsADeletion() throws {
        let clock = ManualWallClock()
        let e = try openLongWindow(clock: clock)
        defer { e.shutdown() }
        let k = key("k")
        let vb = vbOf(k, e)
        let nowSeconds = UInt32(clock.nowNanoseconds() / 1_000_000_000)
        _ = try e.store(.set, vb, k, value: bytes("v"), flags: 0, expiry: nowSeconds + 10, datatype: .raw, cas: .zero)
        #expect(try e.observe(vb, k).state == .notPersisted)
        clock.advance(seconds: 20)
        #expect(try e.observe(vb, k).state == .deleted)
        #expect(throws: EngineError.keyNotFound) { try e.get(vb, k) }
    }
}
