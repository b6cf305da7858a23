import SetteeCore
import SetteeStreams
import SetteeTestSupport
import Testing

@testable import SetteeStorage

/// `ItemBox.make` traps on a key longer than `Limits.maxKeyLength` (its length is one byte of the header, ADR 0048).
/// These prove no key from a client or a peer reaches it: every engine entry that can create an item refuses a
/// key of `maxKeyLength + 1` bytes with `invalidArguments` first, and nothing of it is stored.
@Suite(.onTestThreads) struct KeyLengthGateTests {
    let dir = TemporaryDirectory("storage")
    let vb = VBucketID(0)
    let tooLong = [UInt8](repeating: 0x6B, count: Limits.maxKeyLength + 1)

    /// Client writes (the KV handler's SET/ADD/REPLACE, DELETE, INCR/DECR, APPEND/PREPEND, TOUCH/GAT, GET_LOCKED)
    /// and the borrowed-bytes SET all go through the engine's key gate.
    @Test func clientWritesRefuseATooLongKey() throws {
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        let k = tooLong
        #expect(throws: EngineError.invalidArguments) {
            try e.store(.set, vb, k, value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        }
        #expect(throws: EngineError.invalidArguments) {
            try [UInt8]([1]).withUnsafeBytes { bytes throws(EngineError) in
                try e.store(.add, vb, k, valueBytes: bytes, flags: 0, expiry: 0, datatype: .raw, cas: .zero)
            }
        }
        #expect(throws: EngineError.invalidArguments) { try e.delete(vb, k, cas: .zero) }
        #expect(throws: EngineError.invalidArguments) {
            try e.arithmetic(vb, k, delta: 1, initial: 0, expiry: 0, increment: true, cas: .zero)
        }
        #expect(throws: EngineError.invalidArguments) { try e.concat(.append, vb, k, value: [1], cas: .zero) }
        #expect(throws: EngineError.invalidArguments) { try e.touch(vb, k, expiry: 10) }
        #expect(throws: EngineError.invalidArguments) { try e.getAndTouch(vb, k, expiry: 10) }
        #expect(throws: EngineError.invalidArguments) { try e.getAndLock(vb, k, lockSeconds: 5) }
        #expect(e.stats().currItems == 0)
    }

    /// A producer's snapshot with one too-long key is refused whole (`applySnapshot`), so DCP cannot reach it either.
    @Test func aReplicaSnapshotWithATooLongKeyIsRefusedWhole() throws {
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        e.setVBucketState(vb, .replica)
        let meta = { (seqno: UInt64) in
            ItemMetadata(
                cas: CAS(1), revSeqno: RevSeqNo(1), bySeqno: SeqNo(seqno), flags: 0, expiry: 0, datatype: .raw,
                deleted: false)
        }
        #expect(throws: EngineError.invalidArguments) {
            try e.applySnapshot(
                vb, end: SeqNo(2),
                items: [
                    ChangeRecord(key: key("ok"), value: [1], meta: meta(1)),
                    ChangeRecord(key: tooLong, value: [2], meta: meta(2)),
                ])
        }
        #expect(e.seqnoInfo(vb).highSeqno == .zero)
        #expect(throws: EngineError.keyNotFound) { try e.getReplica(vb, key("ok")) }
    }

    /// A producer's item with a CAS of 2^63 or more is refused with its snapshot: kept, it went into the state row,
    /// which warmup refuses (ADR 0117), so the replica could not start again. A CAS just below is kept.
    @Test func aReplicaSnapshotWithACASPastTheClockIsRefused() throws {
        let e = try openEngine(dir, vbuckets: 2)
        defer { e.shutdown() }
        e.setVBucketState(vb, .replica)
        func record(_ cas: UInt64, seqno: UInt64) -> ChangeRecord {
            ChangeRecord(
                key: key("k\(seqno)"), value: [1],
                meta: ItemMetadata(
                    cas: CAS(cas), revSeqno: RevSeqNo(1), bySeqno: SeqNo(seqno), flags: 0, expiry: 0, datatype: .raw,
                    deleted: false))
        }
        #expect(throws: EngineError.invalidArguments) {
            try e.applySnapshot(vb, end: SeqNo(1), items: [record(1 << 63, seqno: 1)])
        }
        #expect(e.seqnoInfo(vb).highSeqno == .zero)
        try e.applySnapshot(vb, end: SeqNo(1), items: [record((1 << 63) - 1, seqno: 1)])
        #expect(e.seqnoInfo(vb).highSeqno == SeqNo(1))
    }
}
