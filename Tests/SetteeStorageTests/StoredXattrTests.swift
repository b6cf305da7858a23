import Foundation
import SetteeCore
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeStorage

/// A stored value with an XATTR section: `{pair length u32, key 0 value 0}`… behind a total length, then the body.
func xattrValue(_ pairs: [(String, String)], body: String) -> [UInt8] {
    var section: [UInt8] = []
    for (k, v) in pairs {
        let n = UInt32(k.utf8.count + v.utf8.count + 2)
        section += [UInt8(n >> 24), UInt8((n >> 16) & 0xff), UInt8((n >> 8) & 0xff), UInt8(n & 0xff)]
        section += Array(k.utf8) + [0] + Array(v.utf8) + [0]
    }
    let t = UInt32(section.count)
    return [UInt8(t >> 24), UInt8((t >> 16) & 0xff), UInt8((t >> 8) & 0xff), UInt8(t & 0xff)] + section
        + Array(body.utf8)
}

/// Extended attributes in the engine (ADR 0029): the value carries the XATTR section ahead of the body.
@Suite(.onTestThreads) struct StoredXattrTests {
    let dir = TemporaryDirectory("storage")
    let vb = VBucketID(3)
    let both = xattrValue([("_sync", #"{"rev":"1-a"}"#), ("user", "1")], body: #"{"a":1}"#)

    /// A plain SET / APPEND / INCR of the body keeps the document's XATTR section in front of the new body (as
    /// kv_engine does); a store without `preserveXattrs` replaces the whole value; a document without XATTRs
    /// is unchanged by all this.
    @Test func bodyWritesKeepTheSection() throws {
        let e = try openEngine(dir)
        defer { e.shutdown() }
        _ = try e.store(.set, vb, key("d"), value: both, flags: 0, expiry: 0, datatype: [.json, .xattr], cas: .zero)
        _ = try e.store(.set, vb, key("d"), value: bytes(#"{"b":2}"#), flags: 0, expiry: 0, datatype: .json, cas: .zero)
        let doc = try e.get(vb, key("d"))
        #expect(doc.meta.datatype == [.json, .xattr])
        #expect(doc.value == xattrValue([("_sync", #"{"rev":"1-a"}"#), ("user", "1")], body: #"{"b":2}"#))
        #expect(doc.body == bytes(#"{"b":2}"#))

        _ = try e.store(
            .set, vb, key("n"), value: xattrValue([("x", "1")], body: "41"), flags: 0, expiry: 0,
            datatype: [.json, .xattr], cas: .zero)
        let (n, _) = try e.arithmetic(vb, key("n"), delta: 1, initial: 0, expiry: 0, increment: true, cas: .zero)
        #expect(n == 42)
        #expect(try e.get(vb, key("n")).value == xattrValue([("x", "1")], body: "42"))
        _ = try e.concat(.append, vb, key("n"), value: bytes("0"), cas: .zero)
        #expect(try e.get(vb, key("n")).value == xattrValue([("x", "1")], body: "420"))

        _ = try e.store(
            .replace, vb, key("d"), value: bytes("{}"), flags: 0, expiry: 0, datatype: .json, cas: .zero,
            preserveXattrs: false)
        #expect(try e.get(vb, key("d")).meta.datatype == .json)
        _ = try e.store(.set, vb, key("p"), value: bytes("[1]"), flags: 0, expiry: 0, datatype: .json, cas: .zero)
        #expect(try e.get(vb, key("p")).value == bytes("[1]"))
    }

    /// A deletion keeps only the system XATTRs on the tombstone (datatype XATTR); `getIncludingDeleted` reads it
    /// back, plain reads do not; the change feed reports it as the deletion's value; `updateTombstone` edits it
    /// (it stays deleted, CAS-checked); a later SET starts a new document without them.
    @Test func deletionKeepsSystemXattrs() throws {
        let e = try openEngine(dir)
        defer { e.shutdown() }
        _ = try e.store(.set, vb, key("d"), value: both, flags: 5, expiry: 0, datatype: [.json, .xattr], cas: .zero)
        _ = try e.delete(vb, key("d"), cas: .zero)
        #expect(throws: EngineError.keyNotFound) { try e.get(vb, key("d")) }
        let tomb = try e.getIncludingDeleted(vb, key("d"))
        #expect(tomb.meta.deleted && tomb.meta.datatype == .xattr)
        #expect(tomb.value == xattrValue([("_sync", #"{"rev":"1-a"}"#)], body: ""))
        let feed = try e.changes(vb, since: .zero, limit: 10)
        #expect(feed.records.count == 1 && feed.records[0].meta.deleted)
        #expect(feed.records[0].value == tomb.value && feed.records[0].body.isEmpty)

        let kept = xattrValue([("_sync", #"{"rev":"2-b"}"#)], body: "")
        #expect(throws: EngineError.keyExists) {
            try e.updateTombstone(vb, key("d"), xattrs: kept, cas: CAS(tomb.meta.cas.rawValue &+ 1))
        }
        let updated = try e.updateTombstone(vb, key("d"), xattrs: kept, cas: tomb.meta.cas)
        let again = try e.getIncludingDeleted(vb, key("d"))
        #expect(again.meta.deleted && again.value == kept && again.meta.cas == updated.cas)

        _ = try e.store(.add, vb, key("d"), value: bytes("{}"), flags: 0, expiry: 0, datatype: .json, cas: .zero)
        #expect(try e.get(vb, key("d")).value == bytes("{}"))

        // Without XATTRs a tombstone keeps nothing, as before.
        _ = try e.store(.set, vb, key("plain"), value: bytes("1"), flags: 0, expiry: 0, datatype: .json, cas: .zero)
        _ = try e.delete(vb, key("plain"), cas: .zero)
        let plain = try e.getIncludingDeleted(vb, key("plain"))
        #expect(plain.meta.deleted && plain.value.isEmpty && plain.meta.datatype == .raw)
    }

    /// Macro placeholders are filled with the mutation's own CAS (little-endian hex, as kv_engine writes it) and
    /// seqno while the value is stored.
    @Test func macrosGetTheNewCASAndSeqno() throws {
        let e = try openEngine(dir)
        defer { e.shutdown() }
        let placeholder = #""0x0000000000000000""#
        let value = xattrValue([("_m", "[\(placeholder),\(placeholder)]")], body: "{}")
        let start = 4 + 4 + 3  // total, pair length, "_m" 0
        let r = try e.store(
            .set, vb, key("m"), value: value, flags: 0, expiry: 0, datatype: [.json, .xattr], cas: .zero,
            preserveXattrs: false,
            macros: [MutationMacro(offset: start + 1, kind: .cas), MutationMacro(offset: start + 22, kind: .seqno)])
        let stored = try e.get(vb, key("m")).value
        let cas = String(r.cas.rawValue.byteSwapped, radix: 16)
        let expectedCAS = String(repeating: "0", count: 16 - cas.count) + cas
        let seq = String(r.token.seqno.rawValue, radix: 16)
        let expectedSeq = String(repeating: "0", count: 16 - seq.count) + seq
        #expect(
            String(decoding: stored, as: UTF8.self).contains(#"["0x\#(expectedCAS)","0x\#(expectedSeq)"]"#),
            "\(String(decoding: stored, as: UTF8.self))")
    }

    /// XATTRs survive a restart: live values with their section and tombstones with the system XATTRs they kept
    /// are warmed up from the file.
    @Test func warmupKeepsXattrsAndTombstones() throws {
        do {
            let e = try openEngine(dir)
            _ = try e.store(
                .set, vb, key("live"), value: both, flags: 0, expiry: 0, datatype: [.json, .xattr], cas: .zero)
            _ = try e.store(
                .set, vb, key("gone"), value: both, flags: 0, expiry: 0, datatype: [.json, .xattr], cas: .zero)
            _ = try e.delete(vb, key("gone"), cas: .zero)
            try waitAllPersisted(e)
            e.shutdown()
        }
        let e = try openEngine(dir)
        defer { e.shutdown() }
        #expect(try e.get(vb, key("live")).value == both)
        let tomb = try e.getIncludingDeleted(vb, key("gone"))
        #expect(tomb.meta.deleted && tomb.value == xattrValue([("_sync", #"{"rev":"1-a"}"#)], body: ""))
    }

    /// A replica installs a tombstone with the XATTR section its producer sent (and keeps it across a restart),
    /// and one without a section as an empty tombstone; promoted, it serves them.
    @Test func replicaKeepsTombstoneXattrs() throws {
        let kept = xattrValue([("_sync", "1")], body: "")
        do {
            let e = try openEngine(dir)
            e.setVBucketState(vb, .replica)
            try e.applySnapshot(
                vb, end: SeqNo(3),
                items: [
                    ChangeRecord(
                        key: key("a"), value: both,
                        meta: ItemMetadata(
                            cas: CAS(10), revSeqno: RevSeqNo(1), bySeqno: SeqNo(1), flags: 0, expiry: 0,
                            datatype: [.json, .xattr], deleted: false)),
                    ChangeRecord(
                        key: key("t"), value: kept,
                        meta: ItemMetadata(
                            cas: CAS(11), revSeqno: RevSeqNo(2), bySeqno: SeqNo(3), flags: 0, expiry: 0,
                            datatype: .xattr, deleted: true)),
                ])
            #expect(isOK(waitPersisted(e, vb, SeqNo(3))))
            e.shutdown()
        }
        let e = try openEngine(dir)
        defer { e.shutdown() }
        e.setVBucketState(vb, .active)
        #expect(try e.get(vb, key("a")).value == both)
        let tomb = try e.getIncludingDeleted(vb, key("t"))
        #expect(tomb.meta.deleted && tomb.value == kept && tomb.meta.cas == CAS(11))
    }
}

/// Expiry of a document whose value was evicted: its system XATTRs must survive into the tombstone.
@Suite(.onTestThreads) struct EvictedXattrExpiryTests {
    let dir = TemporaryDirectory("storage")

    /// A document with a system XATTR expires while its value is evicted: read lazily it is absent at
    /// once, and its tombstone (written once the background reader brings the value back) keeps `_sync`;
    /// the expiry pager does the same for one nobody reads. Before, both tombstones were empty.
    @Test func tombstoneOfAnEvictedExpiredDocumentKeepsSystemXattrs() throws {
        let clock = ManualWallClock()
        var o = testOptions()
        o.expiryPagerInterval = 0.05
        let e = try openEngine(dir, clock: clock, options: o)
        defer { e.shutdown() }
        let value = xattrValue([("_sync", #"{"rev":"3-c"}"#), ("app", "1")], body: #"{"a":1}"#)
        let lazy = key("lazy")
        let paged = key("paged")
        for k in [lazy, paged] {
            _ = try e.store(
                .set, vbOf(k, e), k, value: value, flags: 0, expiry: 100, datatype: [.json, .xattr], cas: .zero)
        }
        try waitAllPersisted(e)
        for k in [lazy, paged] { #expect(evict(e, vbOf(k, e), k)) }
        #expect(e.stats().nonResidentItems >= 2)
        clock.advance(seconds: 101)

        #expect(throws: EngineError.keyNotFound) { try e.get(vbOf(lazy, e), lazy) }
        let kept = xattrValue([("_sync", #"{"rev":"3-c"}"#)], body: "")
        for k in [lazy, paged] {
            #expect(eventually { (try? e.getIncludingDeleted(vbOf(k, e), k))?.meta.deleted == true })
            let tomb = try e.getIncludingDeleted(vbOf(k, e), k)
            #expect(tomb.meta.deleted && tomb.meta.datatype == .xattr)
            #expect(tomb.value == kept, "\(String(decoding: k, as: UTF8.self)): \(tomb.value.count) bytes")
        }
        #expect(e.stats().expired == 2)
    }
}
