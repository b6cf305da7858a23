import SetteeCore
import SetteeTestSupport
import Testing

@testable import SetteeStorage

/// `writeWithMeta`, the engine half of SET_WITH_META / DEL_WITH_META (ADR 0147): the given CAS, revSeqno, flags,
/// expiry and datatype are stored as they are (a new seqno only), the hybrid clock moves past the CAS, the header
/// CAS guards, and the three conflict modes decide between the incoming and the stored version.
@Suite(.onTestThreads) struct WithMetaTests {
    let dir = TemporaryDirectory("storage")
    let vb = VBucketID(9)
    static let oldCAS = CAS(0x1000_0000_0000_0000)
    static let farCAS = CAS(0x7000_0000_0000_0000)

    func meta(_ cas: CAS, rev: UInt64, deleted: Bool = false) -> IncomingMeta {
        IncomingMeta(
            cas: cas, revSeqno: RevSeqNo(rev), flags: 0xabcd, expiry: deleted ? 0 : 2_000_000_000, datatype: .json,
            deleted: deleted)
    }

    @Test func storesTheGivenMetadataAndSurvivesRestart() throws {
        let e = try openEngine(dir)
        let r = try e.writeWithMeta(vb, key("a"), value: bytes("{}"), meta: meta(Self.oldCAS, rev: 42), conflict: .skip)
        #expect(r.cas == Self.oldCAS)
        let d = try e.get(vb, key("a"))
        #expect(d.value == bytes("{}") && d.meta.cas == Self.oldCAS && d.meta.revSeqno == RevSeqNo(42))
        #expect(d.meta.flags == 0xabcd && d.meta.expiry == 2_000_000_000 && d.meta.datatype == .json)
        // The feed (what replicas and change streams read) carries the same metadata.
        let feed = try e.changes(vb, since: .zero, limit: 10)
        #expect(feed.records.count == 1 && feed.records[0].meta.cas == Self.oldCAS)
        // A far-future CAS moves the clock: the next local write's CAS is past it.
        _ = try e.writeWithMeta(vb, key("b"), value: bytes("1"), meta: meta(Self.farCAS, rev: 1), conflict: .skip)
        let next = try e.store(.set, vb, key("c"), value: bytes("2"), flags: 0, expiry: 0, datatype: .json, cas: .zero)
        #expect(next.cas > Self.farCAS)
        try waitAllPersisted(e)
        e.shutdown()
        let e2 = try openEngine(dir)
        defer { e2.shutdown() }
        #expect(try e2.get(vb, key("a")) == d)
        let after = try e2.store(
            .set, vb, key("d"), value: bytes("3"), flags: 0, expiry: 0, datatype: .json, cas: .zero)
        #expect(after.cas > next.cas)
    }

    @Test func deleteLeavesATombstoneWithTheGivenCAS() throws {
        let e = try openEngine(dir)
        defer { e.shutdown() }
        _ = try e.store(.set, vb, key("t"), value: bytes("{}"), flags: 0, expiry: 0, datatype: .json, cas: .zero)
        let r = try e.writeWithMeta(
            vb, key("t"), value: [], meta: meta(Self.farCAS, rev: 9, deleted: true), conflict: .revSeqnoThenCAS)
        #expect(r.cas == Self.farCAS)
        #expect(throws: EngineError.keyNotFound) { try e.get(vb, key("t")) }
        let tomb = try e.getMeta(vb, key("t"))
        #expect(tomb.deleted && tomb.cas == Self.farCAS && tomb.revSeqno == RevSeqNo(9) && tomb.datatype == .raw)
        // A tombstone keeps an XATTR section, nothing else.
        let kept = xattrValue([("_sync", "1")], body: "")
        _ = try e.writeWithMeta(
            vb, key("x"), value: kept,
            meta: IncomingMeta(
                cas: Self.oldCAS, revSeqno: RevSeqNo(2), flags: 0, expiry: 0, datatype: .xattr, deleted: true),
            conflict: .skip)
        #expect(try e.getIncludingDeleted(vb, key("x")).value == kept)
        #expect(throws: EngineError.invalidArguments) {
            try e.writeWithMeta(
                vb, key("y"), value: bytes("{}"), meta: meta(Self.oldCAS, rev: 1, deleted: true), conflict: .skip)
        }
    }

    /// kv_engine's seqno conflict resolution past CAS (`docs/BinaryProtocol.md`): a SET_WITH_META with equal
    /// revSeqno and CAS wins with a later expiry, then with lower flags; a DEL_WITH_META stops at CAS; all equal,
    /// the stored version stays. Before, every tie at CAS kept the stored version.
    @Test func seqnoResolutionPastCAS() throws {
        func m(rev: UInt64 = 5, cas: UInt64 = 100, expiry: UInt32 = 10, flags: UInt32 = 7, deleted: Bool = false)
            -> IncomingMeta
        {
            IncomingMeta(
                cas: CAS(cas), revSeqno: RevSeqNo(rev), flags: flags, expiry: expiry, datatype: .raw,
                deleted: deleted)
        }
        func wins(_ i: IncomingMeta) -> Bool {
            i.winsBySeqno(storedRevSeqno: RevSeqNo(5), storedCAS: CAS(100), storedExpiry: 10, storedFlags: 7)
        }
        #expect(wins(m(rev: 6, cas: 1)))
        #expect(!wins(m(rev: 4, cas: 999)))
        #expect(wins(m(cas: 101, expiry: 0)))
        #expect(!wins(m(cas: 99, expiry: 99)))
        #expect(wins(m(expiry: 11, flags: 99)))
        #expect(!wins(m(expiry: 9, flags: 0)))
        #expect(wins(m(flags: 6)))
        #expect(!wins(m(flags: 8)))
        #expect(!wins(m()))
        #expect(!wins(m(expiry: 11, deleted: true)))
        #expect(!wins(m(flags: 0, deleted: true)))

        // Through the engine: equal revSeqno and CAS, a later expiry replaces the stored version.
        let e = try openEngine(dir)
        defer { e.shutdown() }
        let k = key("tie")
        let far: UInt32 = 4_000_000_000  // 2096: never reached during the test
        let first = IncomingMeta(
            cas: Self.oldCAS, revSeqno: RevSeqNo(3), flags: 1, expiry: far, datatype: .raw)
        _ = try e.writeWithMeta(vb, k, value: bytes("a"), meta: first, conflict: .revSeqnoThenCAS)
        var later = first
        later.expiry = far + 60
        _ = try e.writeWithMeta(vb, k, value: bytes("b"), meta: later, conflict: .revSeqnoThenCAS)
        #expect(try e.get(vb, k).value == bytes("b"))
        var higherFlags = later
        higherFlags.flags = 2
        #expect(throws: EngineError.keyExists) {
            try e.writeWithMeta(vb, k, value: bytes("c"), meta: higherFlags, conflict: .revSeqnoThenCAS)
        }
        #expect(try e.get(vb, k).value == bytes("b"))
    }

    @Test func conflictModesAndTheGuard() throws {
        let e = try openEngine(dir)
        defer { e.shutdown() }
        let k = key("k")
        _ = try e.writeWithMeta(vb, k, value: bytes("1"), meta: meta(Self.oldCAS, rev: 5), conflict: .revSeqnoThenCAS)
        // Lower revSeqno, or equal revSeqno and lower/equal CAS: the stored version wins.
        for (cas, rev) in [(Self.farCAS, UInt64(4)), (CAS(Self.oldCAS.rawValue - 1), 5), (Self.oldCAS, 5)] {
            #expect(throws: EngineError.keyExists) {
                try e.writeWithMeta(vb, k, value: bytes("2"), meta: meta(cas, rev: rev), conflict: .revSeqnoThenCAS)
            }
        }
        #expect(try e.get(vb, k).value == bytes("1"))
        let tie = try e.writeWithMeta(
            vb, k, value: bytes("3"), meta: meta(CAS(Self.oldCAS.rawValue + 1), rev: 5), conflict: .revSeqnoThenCAS)
        #expect(tie.cas == CAS(Self.oldCAS.rawValue + 1))
        // Skip: an older version overwrites.
        _ = try e.writeWithMeta(vb, k, value: bytes("4"), meta: meta(CAS(7 << 16), rev: 1), conflict: .skip)
        #expect(try e.getMeta(vb, k).revSeqno == RevSeqNo(1))
        // Only if absent: a live document refuses; a tombstone does not.
        #expect(throws: EngineError.keyExists) {
            try e.writeWithMeta(vb, k, value: bytes("5"), meta: meta(Self.farCAS, rev: 99), conflict: .onlyIfAbsent)
        }
        _ = try e.delete(vb, k, cas: .zero)
        _ = try e.writeWithMeta(vb, k, value: bytes("6"), meta: meta(Self.farCAS, rev: 99), conflict: .onlyIfAbsent)
        #expect(try e.get(vb, k).value == bytes("6"))
        // The header CAS guards: wrong is keyExists, nothing stored is keyNotFound.
        #expect(throws: EngineError.keyExists) {
            try e.writeWithMeta(
                vb, k, value: bytes("7"), meta: meta(Self.oldCAS, rev: 1), guardCAS: Self.oldCAS, conflict: .skip)
        }
        #expect(throws: EngineError.keyNotFound) {
            try e.writeWithMeta(
                vb, key("none"), value: bytes("7"), meta: meta(Self.oldCAS, rev: 1), guardCAS: Self.oldCAS,
                conflict: .skip)
        }
        _ = try e.writeWithMeta(
            vb, k, value: bytes("8"), meta: meta(Self.oldCAS, rev: 1), guardCAS: Self.farCAS, conflict: .skip)
        #expect(try e.get(vb, k).value == bytes("8"))
    }

    @Test func refusesHostileMetadata() throws {
        let e = try openEngine(dir)
        defer { e.shutdown() }
        for bad in [meta(.zero, rev: 1), meta(CAS(1 << 63), rev: 1), meta(Self.oldCAS, rev: Limits.maxRevSeqno + 1)] {
            #expect(throws: EngineError.invalidArguments) {
                try e.writeWithMeta(vb, key("h"), value: bytes("{}"), meta: bad, conflict: .skip)
            }
        }
        let fresh = try e.writeWithMeta(
            vb, key("h"), value: bytes("{}"), meta: meta(.zero, rev: 1), conflict: .skip, regenerateCAS: true)
        #expect(!fresh.cas.isZero)
        #expect(throws: EngineError.keyNotFound) { try e.get(vb, key("none")) }
    }
}
