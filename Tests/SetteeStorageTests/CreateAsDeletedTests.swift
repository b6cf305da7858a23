import SetteeCore
import SetteeTestSupport
import Testing

@testable import SetteeStorage

/// `updateTombstone(create: true)`, the engine half of CREATE_AS_DELETED (ADR 0029): a missing document becomes a
/// tombstone holding only the given XATTRs, with a seqno of its own in the change feed; an existing item (live or
/// a tombstone) is `.keyExists`, so the caller rereads instead of overwriting it.
@Suite(.onTestThreads) struct CreateAsDeletedTests {
    let dir = TemporaryDirectory("storage")
    let vb = VBucketID(5)

    @Test func createsATombstoneOnlyWhereNothingIs() throws {
        let e = try openEngine(dir)
        defer { e.shutdown() }
        let kept = xattrValue([("_sync", #"{"rev":"1-a"}"#)], body: "")
        let made = try e.updateTombstone(vb, key("t"), xattrs: kept, cas: .zero, create: true)
        #expect(throws: EngineError.keyNotFound) { try e.get(vb, key("t")) }
        let tomb = try e.getIncludingDeleted(vb, key("t"))
        #expect(tomb.meta.deleted && tomb.meta.datatype == .xattr && tomb.value == kept)
        #expect(tomb.meta.cas == made.cas && tomb.meta.revSeqno == RevSeqNo(1))
        let feed = try e.changes(vb, since: .zero, limit: 10)
        #expect(feed.records.count == 1 && feed.records[0].meta.deleted && feed.records[0].value == kept)

        #expect(throws: EngineError.keyExists) {
            try e.updateTombstone(vb, key("t"), xattrs: kept, cas: .zero, create: true)
        }
        _ = try e.store(.set, vb, key("live"), value: bytes("{}"), flags: 0, expiry: 0, datatype: .json, cas: .zero)
        #expect(throws: EngineError.keyExists) {
            try e.updateTombstone(vb, key("live"), xattrs: kept, cas: .zero, create: true)
        }
        #expect(try e.get(vb, key("live")).value == bytes("{}"))
    }

    /// ADD with a non-zero CAS (a sub-document recreation or revive of the tombstone it read) succeeds only on
    /// that very tombstone: after another edit of it, or where nothing is, it is `.keyExists`.
    @Test func addWithATombstoneCASIsGuarded() throws {
        let e = try openEngine(dir)
        defer { e.shutdown() }
        let kept = xattrValue([("_sync", "1")], body: "")
        let made = try e.updateTombstone(vb, key("t"), xattrs: kept, cas: .zero, create: true)
        let edited = try e.updateTombstone(vb, key("t"), xattrs: xattrValue([("_sync", "2")], body: ""), cas: made.cas)
        #expect(throws: EngineError.keyExists) {
            try e.store(.add, vb, key("t"), value: bytes("{}"), flags: 0, expiry: 0, datatype: .json, cas: made.cas)
        }
        #expect(throws: EngineError.keyExists) {
            try e.store(.add, vb, key("none"), value: bytes("{}"), flags: 0, expiry: 0, datatype: .json, cas: made.cas)
        }
        _ = try e.store(.add, vb, key("t"), value: bytes("{}"), flags: 0, expiry: 0, datatype: .json, cas: edited.cas)
        #expect(try e.get(vb, key("t")).value == bytes("{}"))
    }
}
