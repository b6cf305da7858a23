import Foundation
import SetteeCore
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeStorage

@Suite(.onTestThreads) struct ConcurrencyTests {
    /// Two writer threads and a reader hammer overlapping keys (sets, deletes, appends, incrs) under a
    /// small quota while the flusher, item pager and expiry pager run; afterwards a clean restart
    /// shows exactly the final in-memory state (values, CAS, seqnos), and nothing crashed.
    @Test func concurrentMutationsPersistConsistently() throws {
        let dir = TemporaryDirectory("storage")
        var o = testOptions()
        o.expiryPagerInterval = 0.01
        o.flusherBatchMaxItems = 50
        let clock = ManualWallClock()
        let e = try openEngine(dir, quotaMB: 1, vbuckets: 16, clock: clock, options: o)
        let keys = (0..<1500).map { key("c\($0)") }
        let tmpfails = Atomic<Int>(0)
        let latches = (0..<3).map { t in
            startThread(name: "test-\(t)") {
                var rng = SystemRandomNumberGenerator()
                for i in 0..<3000 {
                    let k = keys[Int.random(in: 0..<keys.count, using: &rng)]
                    let vb = vbOf(k, e)
                    let r: Result<Void, EngineError>
                    switch (t, i % 5) {
                    case (2, _):
                        if i % 500 == 0 { clock.advance(seconds: 3) }
                        r = attempt { () throws(EngineError) in _ = try e.get(vb, k) }
                    case (_, 0): r = attempt { () throws(EngineError) in _ = try e.delete(vb, k, cas: .zero) }
                    case (_, 1):
                        r = attempt { () throws(EngineError) in
                            _ = try e.concat(.append, vb, k, value: [0x21], cas: .zero)
                        }
                    case (_, 2):
                        r = attempt { () throws(EngineError) in
                            _ = try e.arithmetic(vb, k, delta: 1, initial: 1, expiry: 0, increment: true, cas: .zero)
                        }
                    default:
                        r = attempt { () throws(EngineError) in
                            _ = try e.store(
                                .set, vb, k, value: jsonDoc(i, size: 600 + i % 900), flags: UInt32(i),
                                expiry: i % 4 == 0 ? 5 : 0, datatype: .json, cas: .zero)
                        }
                    }
                    if case .failure(let err) = r {
                        switch err {
                        case .keyNotFound, .notStored, .deltaBadValue: break
                        case .wouldBlock: e.fetch(vb, k) {}
                        case .temporaryFailure: tmpfails.wrappingAdd(1, ordering: .relaxed)
                        default: Issue.record("unexpected \(err)")
                        }
                    }
                }
            }
        }
        for l in latches { l.wait() }
        try waitAllPersisted(e)
        // Snapshot the final state (fetching evicted values first).
        var final: [[UInt8]: ItemMetadata] = [:]
        var values: [[UInt8]: [UInt8]] = [:]
        for k in keys {
            let vb = vbOf(k, e)
            guard let m = try? e.getMeta(vb, k) else { continue }
            final[k] = m
            if !m.deleted {
                if case .failure(.wouldBlock) = attempt({ () throws(EngineError) in try e.get(vb, k) }) {
                    #expect(fetchSync(e, vb, k))
                }
                if let d = try? e.get(vb, k) { values[k] = d.value }
            }
        }
        let highs = (0..<16).map { e.seqnoInfo(VBucketID(UInt16($0))).highSeqno }
        let st = e.stats()
        #expect(st.diskFailure == nil)
        #expect(st.evictions > 0, "the quota is meant to force eviction")
        #expect(st.expired > 0, "the clock is meant to expire documents")
        e.shutdown()

        let e2 = try openEngine(dir, quotaMB: 64, vbuckets: 16, clock: clock)
        defer { e2.shutdown() }
        for (k, m) in final {
            let vb = vbOf(k, e2)
            #expect(try e2.getMeta(vb, k) == m)
            if let v = values[k] { #expect(try e2.get(vb, k).value == v) }
        }
        for i in 0..<16 { #expect(e2.seqnoInfo(VBucketID(UInt16(i))).highSeqno == highs[i]) }
    }

    /// With batches far smaller than one vBucket's dirty queue, the persisted seqno advances only to
    /// what the committed batches cover, and in the end every write of the vBucket is persisted. Every key is written
    /// once: a key written again past the batch's cut makes the take go on (DirtyVBucketsTests'
    /// `aPartialBatchCoversEveryVersionItWrites`), and here that would be the whole queue.
    @Test func partialBatchesAdvancePersistedSeqno() throws {
        let dir = TemporaryDirectory("storage")
        var o = testOptions()
        o.flusherBatchMaxItems = 7
        let e = try openEngine(dir, vbuckets: 1, options: o)
        e.pauseFlusher()
        var last = SeqNo.zero
        for i in 0..<100 {
            last = try e.store(
                .set, VBucketID(0), key("p\(i)"), value: [UInt8(i)], flags: 0, expiry: 0, datatype: .raw,
                cas: .zero
            ).token.seqno
        }
        e.resumeFlusher()
        #expect(isOK(waitPersisted(e, VBucketID(0), last)))
        let st = e.stats()
        #expect(st.totalPersisted == 100)
        #expect(st.flusherCommits >= 14)
        e.stopThreads(.abandon)
        let e2 = try openEngine(dir, vbuckets: 1)
        defer { e2.shutdown() }
        for i in 0..<100 { #expect(try e2.get(VBucketID(0), key("p\(i)")).value == [UInt8(i)]) }
        #expect(e2.seqnoInfo(VBucketID(0)).highSeqno == last)
    }

    /// Express batches (a waiter's vBuckets, ADR 0107) interleave with the window's batches while two writers
    /// rewrite the same keys, some durably (they wait), some polled (`persistSoon`): every waiter sees its write
    /// persisted, and each key's versions reach disk in seqno order, so after the flusher stops without a drain the
    /// file holds exactly the newest version of every key and each vBucket's high seqno.
    @Test func expressBatchesKeepEachKeysVersionsInOrder() throws {
        let dir = TemporaryDirectory("storage")
        var o = testOptions()
        o.flusherMaxDelay = 0.05
        o.flusherBatchMaxItems = 40
        let e = try openEngine(dir, vbuckets: 16, options: o)
        let keys = (0..<300).map { key("x\($0)") }
        let failures = Atomic<Int>(0)
        let waited = Atomic<Int>(0)
        let writers = (0..<2).map { t in
            startThread(name: "writer-\(t)") {
                var rng = SystemRandomNumberGenerator()
                for i in 0..<4000 {
                    let k = keys[Int.random(in: 0..<keys.count, using: &rng)]
                    let vb = vbOf(k, e)
                    let stored = attempt { () throws(EngineError) in
                        try e.store(
                            .set, vb, k, value: Array("\(t)-\(i)".utf8), flags: 0, expiry: 0, datatype: .raw,
                            cas: .zero)
                    }
                    guard case .success(let s) = stored else {
                        failures.wrappingAdd(1, ordering: .relaxed)
                        continue
                    }
                    if i % 50 == 0 {
                        if isOK(waitPersisted(e, vb, s.token.seqno)) {
                            waited.wrappingAdd(1, ordering: .relaxed)
                        } else {
                            failures.wrappingAdd(1, ordering: .relaxed)
                        }
                    } else if i % 97 == 0 {
                        e.persistSoon(vb)
                    }
                }
            }
        }
        for w in writers { w.wait() }
        #expect(failures.load(ordering: .relaxed) == 0)
        #expect(waited.load(ordering: .relaxed) == 160)
        try waitAllPersisted(e)
        var values: [[UInt8]: [UInt8]] = [:]
        for k in keys { if let d = try? e.get(vbOf(k, e), k) { values[k] = d.value } }
        let highs = (0..<16).map { e.seqnoInfo(VBucketID(UInt16($0))).highSeqno }
        #expect(e.stats().flusherCommits > 10, "the window was split into batches and express batches")
        e.stopThreads(.abandon)

        let e2 = try openEngine(dir, vbuckets: 16)
        defer { e2.shutdown() }
        #expect(values.count == keys.count)
        for (k, v) in values { #expect(try e2.get(vbOf(k, e2), k).value == v) }
        for i in 0..<16 { #expect(e2.seqnoInfo(VBucketID(UInt16(i))).highSeqno == highs[i]) }
    }
}
