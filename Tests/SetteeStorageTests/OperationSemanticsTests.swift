import SetteeCore
import SetteeTestSupport
import Testing

@testable import SetteeStorage

@Suite(.onTestThreads) struct OperationSemanticsTests {
    let dir = TemporaryDirectory("storage")
    let clock = ManualWallClock()

    private func engine() throws -> BucketEngine { try openEngine(dir, clock: clock) }

    /// ADD, REPLACE and CAS-guarded SET follow memcached: ADD fails on a live key, REPLACE and
    /// CAS ops fail on a missing one, a CAS mismatch is keyExists; every mutation gets a new seqno and CAS.
    @Test func storeOperations() throws {
        let e = try engine()
        defer { e.shutdown() }
        let k = key("doc")
        let vb = vbOf(k, e)
        #expect(throws: EngineError.keyNotFound) {
            try e.store(.replace, vb, k, value: bytes("x"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        #expect(throws: EngineError.keyNotFound) {
            try e.store(.set, vb, k, value: bytes("x"), flags: 0, expiry: 0, datatype: .raw, cas: CAS(5))
        }
        let a = try e.store(.add, vb, k, value: bytes("v1"), flags: 7, expiry: 0, datatype: .raw, cas: .zero)
        #expect(a.token.seqno == SeqNo(1))
        #expect(throws: EngineError.keyExists) {
            try e.store(.add, vb, k, value: bytes("v2"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        #expect(throws: EngineError.keyExists) {
            try e.store(
                .set, vb, k, value: bytes("v2"), flags: 0, expiry: 0, datatype: .raw, cas: CAS(a.cas.rawValue &+ 1))
        }
        let r = try e.store(.replace, vb, k, value: bytes("v2"), flags: 8, expiry: 0, datatype: .json, cas: a.cas)
        #expect(r.cas > a.cas)
        #expect(r.token.seqno == SeqNo(2))
        let d = try e.get(vb, k)
        #expect(
            d.value == bytes("v2") && d.meta.flags == 8 && d.meta.datatype == .json && d.meta.revSeqno == RevSeqNo(2))
        #expect(d.meta.cas == r.cas && d.meta.bySeqno == SeqNo(2))
        // A tombstone counts as absent for ADD, and revSeqno keeps counting through the deletion.
        _ = try e.delete(vb, k, cas: .zero)
        #expect(throws: EngineError.keyNotFound) { try e.get(vb, k) }
        #expect(try e.getMeta(vb, k).deleted)
        _ = try e.store(.add, vb, k, value: bytes("v3"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(try e.get(vb, k).meta.revSeqno == RevSeqNo(4))
        #expect(e.stats().currItems == 1)
    }

    /// Bad arguments are refused at the edge: empty or too-long keys, too-large values.
    @Test func limits() throws {
        let e = try engine()
        defer { e.shutdown() }
        let vb = VBucketID(0)
        #expect(throws: EngineError.invalidArguments) { try e.get(vb, []) }
        #expect(throws: EngineError.invalidArguments) {
            try e.get(vb, [UInt8](repeating: 65, count: Limits.maxKeyLength + 1))
        }
        #expect(throws: EngineError.invalidArguments) {
            try e.store(.set, vb, [], value: [], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        #expect(throws: EngineError.valueTooLarge) {
            try e.store(
                .set, vb, key("big"), value: [UInt8](repeating: 0, count: Limits.maxValueSize + 1), flags: 0, expiry: 0,
                datatype: .raw, cas: .zero)
        }
        #expect(throws: EngineError.notMyVBucket) { try e.get(VBucketID(64), key("a")) }
        // A key of exactly the maximum length is fine.
        let longKey = [UInt8](repeating: 66, count: Limits.maxKeyLength)
        _ = try e.store(.set, vb, longKey, value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(try e.get(vb, longKey).value == [1])
    }

    /// DELETE: missing → keyNotFound, CAS mismatch → keyExists, otherwise a tombstone with new seqno.
    @Test func deleteSemantics() throws {
        let e = try engine()
        defer { e.shutdown() }
        let k = key("d")
        let vb = vbOf(k, e)
        #expect(throws: EngineError.keyNotFound) { try e.delete(vb, k, cas: .zero) }
        let s = try e.store(.set, vb, k, value: bytes("v"), flags: 3, expiry: 0, datatype: .raw, cas: .zero)
        #expect(throws: EngineError.keyExists) { try e.delete(vb, k, cas: CAS(1)) }
        let d = try e.delete(vb, k, cas: s.cas)
        #expect(d.token.seqno == SeqNo(2) && d.cas > s.cas)
        let m = try e.getMeta(vb, k)
        #expect(m.deleted && m.bySeqno == SeqNo(2) && m.revSeqno == RevSeqNo(2))
        #expect(throws: EngineError.keyNotFound) { try e.delete(vb, k, cas: .zero) }
    }

    /// INCR/DECR: ASCII decimal only, increment wraps at 2^64, decrement clamps at 0, creation with
    /// `initial` unless expiry is 0xffffffff, CAS checked, flags/expiry kept.
    @Test func arithmetic() throws {
        let e = try engine()
        defer { e.shutdown() }
        let k = key("counter")
        let vb = vbOf(k, e)
        #expect(throws: EngineError.keyNotFound) {
            try e.arithmetic(vb, k, delta: 1, initial: 5, expiry: 0xffff_ffff, increment: true, cas: .zero)
        }
        let c = try e.arithmetic(vb, k, delta: 1, initial: 5, expiry: 0, increment: true, cas: .zero)
        #expect(c.value == 5)
        let d = try e.get(vb, k)
        #expect(d.value == bytes("5") && d.meta.datatype == .json)
        #expect(try e.arithmetic(vb, k, delta: 10, initial: 0, expiry: 0, increment: true, cas: .zero).value == 15)
        #expect(try e.arithmetic(vb, k, delta: 100, initial: 0, expiry: 0, increment: false, cas: .zero).value == 0)
        _ = try e.store(
            .set, vb, k, value: bytes("18446744073709551615"), flags: 9, expiry: 1000, datatype: .raw, cas: .zero)
        let before = try e.get(vb, k)
        let w = try e.arithmetic(vb, k, delta: 2, initial: 0, expiry: 0, increment: true, cas: before.meta.cas)
        #expect(w.value == 1)
        let after = try e.get(vb, k)
        #expect(after.value == bytes("1") && after.meta.flags == 9 && after.meta.expiry == before.meta.expiry)
        #expect(throws: EngineError.keyExists) {
            try e.arithmetic(vb, k, delta: 1, initial: 0, expiry: 0, increment: true, cas: before.meta.cas)
        }
        for bad in ["abc", "", "-1", "12 ", "18446744073709551616", "1.5"] {
            _ = try e.store(.set, vb, k, value: bytes(bad), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
            #expect(throws: EngineError.deltaBadValue, "value \(bad)") {
                try e.arithmetic(vb, k, delta: 1, initial: 0, expiry: 0, increment: true, cas: .zero)
            }
        }
    }

    /// APPEND/PREPEND: missing → notStored, CAS checked, flags and expiry kept, JSON bit dropped.
    @Test func concat() throws {
        let e = try engine()
        defer { e.shutdown() }
        let k = key("c")
        let vb = vbOf(k, e)
        #expect(throws: EngineError.notStored) { try e.concat(.append, vb, k, value: bytes("x"), cas: .zero) }
        let s = try e.store(.set, vb, k, value: bytes("mid"), flags: 42, expiry: 100, datatype: .json, cas: .zero)
        let exp = try e.get(vb, k).meta.expiry
        #expect(throws: EngineError.keyExists) {
            try e.concat(.append, vb, k, value: bytes("x"), cas: CAS(s.cas.rawValue &+ 1))
        }
        _ = try e.concat(.append, vb, k, value: bytes("-end"), cas: s.cas)
        _ = try e.concat(.prepend, vb, k, value: bytes("start-"), cas: .zero)
        let d = try e.get(vb, k)
        #expect(d.value == bytes("start-mid-end"))
        #expect(d.meta.flags == 42 && d.meta.expiry == exp && !d.meta.datatype.contains(.json))
    }

    /// TOUCH / GAT change the expiry by the wire rule, with a new seqno and CAS; preserveExpiry keeps it.
    @Test func touchAndPreserveExpiry() throws {
        let e = try engine()
        defer { e.shutdown() }
        let k = key("t")
        let vb = vbOf(k, e)
        let now = clock.nowSeconds()
        #expect(throws: EngineError.keyNotFound) { try e.touch(vb, k, expiry: 10) }
        let s = try e.store(.set, vb, k, value: bytes("v"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        let t = try e.touch(vb, k, expiry: 100)
        #expect(t.cas > s.cas && t.token.seqno == SeqNo(2))
        #expect(try e.get(vb, k).meta.expiry == now + 100)
        let g = try e.getAndTouch(vb, k, expiry: 2_000_000_000)
        #expect(g.value == bytes("v") && g.meta.expiry == 2_000_000_000)
        _ = try e.store(
            .set, vb, k, value: bytes("w"), flags: 0, expiry: 5, datatype: .raw, cas: .zero, preserveExpiry: true)
        #expect(try e.get(vb, k).meta.expiry == 2_000_000_000)
        _ = try e.store(.set, vb, k, value: bytes("w"), flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(try e.get(vb, k).meta.expiry == 0)
    }

    /// Non-active vBuckets refuse data operations; becoming active again adds a failover entry.
    @Test func vbucketStates() throws {
        let e = try engine()
        defer { e.shutdown() }
        let vb = VBucketID(3)
        let before = e.failoverLog(vb).count
        e.setVBucketState(vb, .replica)
        #expect(e.vbucketState(vb) == .replica)
        #expect(throws: EngineError.notMyVBucket) { try e.get(vb, key("a")) }
        #expect(throws: EngineError.notMyVBucket) {
            try e.store(.set, vb, key("a"), value: [], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        #expect(e.stats().vbActiveNum == 63)
        e.setVBucketState(vb, .active)
        #expect(e.failoverLog(vb).count == before + 1)
        #expect(e.seqnoInfo(vb).uuid == e.failoverLog(vb)[0].uuid)
        _ = try e.store(.set, vb, key("a"), value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
    }
}
