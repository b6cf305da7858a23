import Foundation
import SetteeCore
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeStorage

@Suite(.onTestThreads) struct MemoryAndExpiryTests {
    let dir = TemporaryDirectory("storage")

    /// Over the high watermark the item pager evicts clean values (keys + metadata stay); a read of an
    /// evicted value throws wouldBlock, `fetch` brings it back, and the retried read returns it intact.
    @Test func evictionAndBackgroundFetch() throws {
        let e = try openEngine(dir, quotaMB: 1)
        defer { e.shutdown() }
        var values: [[UInt8]: [UInt8]] = [:]
        var i = 0
        // Write ~1.2 MB through a 1 MiB quota, retrying TMPFAIL while the pager catches up.
        let deadline = Date().addingTimeInterval(20)
        while i < 1000 && Date() < deadline {
            let k = key("ev\(i)")
            let v = jsonDoc(i, size: 1000)
            switch attempt({ () throws(EngineError) in
                try e.store(.set, vbOf(k, e), k, value: v, flags: UInt32(i), expiry: 0, datatype: .json, cas: .zero)
            }) {
            case .success:
                values[k] = v
                i += 1
            case .failure(let err):
                #expect(err == .temporaryFailure)
                usleep(5_000)
            }
        }
        #expect(i == 1000)
        try waitAllPersisted(e)
        #expect(eventually { e.stats().nonResidentItems > 0 })
        let st = e.stats()
        #expect(st.evictions > 0 && st.currItems == 1000)
        #expect(st.memUsed <= st.memQuota)
        var checked = 0
        for (k, v) in values {
            let vb = vbOf(k, e)
            if case .failure(.wouldBlock) = attempt({ () throws(EngineError) in try e.get(vb, k) }) {
                #expect(try e.getMeta(vb, k).flags == UInt32(String(decoding: k.dropFirst(2), as: UTF8.self))!)
                #expect(fetchSync(e, vb, k))
                #expect(try e.get(vb, k).value == v)
                checked += 1
                if checked == 20 { break }
            }
        }
        #expect(checked == 20)
        #expect(e.stats().bgFetched >= 20)
    }

    /// With every item dirty (flusher held back) nothing is evictable: past the mutation limit writes
    /// fail with temporaryFailure instead of growing memory; once flushed and evicted they succeed again.
    @Test func overQuotaAllDirtyIsTemporaryFailure() throws {
        let e = try openEngine(dir, quotaMB: 1)
        defer { e.shutdown() }
        e.pauseFlusher()
        var failedAt: Int?
        for i in 0..<2000 {
            let k = key("d\(i)")
            let r = attempt { () throws(EngineError) in
                try e.store(
                    .set, vbOf(k, e), k, value: jsonDoc(i, size: 1000), flags: 0, expiry: 0, datatype: .json, cas: .zero
                )
            }
            if case .failure(let err) = r {
                #expect(err == .temporaryFailure)
                failedAt = i
                break
            }
        }
        #expect(failedAt != nil)
        let st = e.stats()
        #expect(st.memUsed <= st.memQuota)
        #expect(st.nonResidentItems == 0)
        e.resumeFlusher()
        let k = key("later")
        #expect(
            eventually {
                (try? e.store(.set, vbOf(k, e), k, value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)) != nil
            })
    }

    /// Lazy expiry: with the manual clock past its expiry a document reads as missing, becomes a
    /// tombstone with a new seqno, and is counted; ADD then succeeds on the key.
    @Test func lazyExpiry() throws {
        let clock = ManualWallClock()
        let e = try openEngine(dir, clock: clock)
        defer { e.shutdown() }
        let k = key("ttl")
        let vb = vbOf(k, e)
        let s = try e.store(.set, vb, k, value: [1], flags: 0, expiry: 10, datatype: .raw, cas: .zero)
        clock.advance(seconds: 9)
        #expect(try e.get(vb, k).value == [1])
        clock.advance(seconds: 1)
        #expect(throws: EngineError.keyNotFound) { try e.get(vb, k) }
        let m = try e.getMeta(vb, k)
        #expect(m.deleted && m.bySeqno == s.token.seqno.next)
        #expect(e.stats().expired == 1 && e.stats().currItems == 0)
        #expect(throws: EngineError.keyNotFound) { try e.touch(vb, k, expiry: 0) }
        _ = try e.store(.add, vb, k, value: [2], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(try e.get(vb, k).value == [2])
    }

    /// The in-place read (`withDocument`, the GET hot path) agrees with `get`: same bytes and metadata for a
    /// live document, keyNotFound for a missing, deleted or expired one, and an expired one becomes a
    /// tombstone exactly as a lazy-expiry `get` makes it.
    @Test func inPlaceReadMatchesGet() throws {
        let clock = ManualWallClock()
        let e = try openEngine(dir, clock: clock)
        defer { e.shutdown() }
        let k = key("inplace")
        let vb = vbOf(k, e)
        #expect(throws: EngineError.keyNotFound) { try e.withDocument(vb, k) { v, _ in v.count } }
        let s = try e.store(.set, vb, k, value: bytes("hello"), flags: 3, expiry: 10, datatype: .raw, cas: .zero)
        let (value, meta) = try e.withDocument(vb, k) { v, m in (Array(v), m) }
        let d = try e.get(vb, k)
        #expect(value == d.value && meta == d.meta && meta.cas == s.cas && meta.flags == 3)
        clock.advance(seconds: 10)
        #expect(throws: EngineError.keyNotFound) { try e.withDocument(vb, k) { v, _ in v.count } }
        let m = try e.getMeta(vb, k)
        #expect(m.deleted && m.bySeqno == s.token.seqno.next)
        #expect(e.stats().expired == 1)
        let k2 = key("deleted")
        _ = try e.store(.set, vbOf(k2, e), k2, value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        _ = try e.delete(vbOf(k2, e), k2, cas: .zero)
        #expect(throws: EngineError.keyNotFound) { try e.withDocument(vbOf(k2, e), k2) { v, _ in v.count } }
    }

    /// The key-in-place read (`withDocument(_:keyBytes:_:)`, what the node's GET calls with the frame's bytes)
    /// agrees with the array form for a short (inline) and a long key: same bytes and metadata, and an expired
    /// document becomes the same tombstone (the key is only made into an array on that path).
    @Test func keyBytesReadMatchesArrayRead() throws {
        let clock = ManualWallClock()
        let e = try openEngine(dir, clock: clock)
        defer { e.shutdown() }
        for k in [key("short::1"), key(String(repeating: "long-key-", count: 8))] {
            let vb = vbOf(k, e)
            let s = try e.store(.set, vb, k, value: bytes("v"), flags: 7, expiry: 10, datatype: .raw, cas: .zero)
            let viaArray = try e.withDocument(vb, k) { v, m in (Array(v), m) }
            var viaBytes: ([UInt8], ItemMetadata)?
            try k.withUnsafeBytes { kb in try e.withDocument(vb, keyBytes: kb) { v, m in viaBytes = (Array(v), m) } }
            #expect(viaBytes?.0 == viaArray.0 && viaBytes?.1 == viaArray.1 && viaBytes?.1.flags == 7)
            clock.advance(seconds: 10)
            #expect(throws: EngineError.keyNotFound) {
                try k.withUnsafeBytes { kb in try e.withDocument(vb, keyBytes: kb) { _, _ in } }
            }
            let m = try e.getMeta(vb, k)
            #expect(m.deleted && m.bySeqno == s.token.seqno.next)
        }
        #expect(e.stats().expired == 2)
    }

    /// The expiry pager deletes expired documents nobody reads, on its interval, using the injected clock.
    @Test func expiryPager() throws {
        let clock = ManualWallClock()
        var o = testOptions()
        o.expiryPagerInterval = 0.05
        let e = try openEngine(dir, clock: clock, options: o)
        defer { e.shutdown() }
        for i in 0..<20 {
            let k = key("p\(i)")
            _ = try e.store(
                .set, vbOf(k, e), k, value: [1], flags: 0, expiry: i < 15 ? 100 : 0, datatype: .raw, cas: .zero)
        }
        usleep(150_000)
        #expect(e.stats().expired == 0)
        clock.advance(seconds: 101)
        #expect(eventually { e.stats().expired == 15 })
        #expect(e.stats().currItems == 5)
        try waitAllPersisted(e)
        e.shutdown()
        let db = try RawSQLite(dir.dataFile)
        #expect(try db.rows("SELECT count(*), x'' FROM items WHERE deleted = 1")[0].0 == 15)
    }
}
