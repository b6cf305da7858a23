import SetteeCore
import SetteeGateway
import Testing

/// `FullCommitBarrier`: what `_ensure_full_commit` on a cluster bucket waits for (ADR 0039).
@Suite struct FullCommitBarrierTests {
    let u1 = VBucketUUID(111)
    let u2 = VBucketUUID(222)

    /// Proves the per-vBucket mark is the highest acknowledged write of the current history; `take` empties the
    /// barrier; `restore` puts back unsettled marks without lowering a later write recorded meanwhile; a write under
    /// a new uuid replaces the old history's mark.
    @Test func marksTakeAndRestore() {
        var b = FullCommitBarrier()
        #expect(b.isEmpty)
        b.record(vbucket: VBucketID(3), uuid: u1, seqno: SeqNo(10))
        b.record(vbucket: VBucketID(3), uuid: u1, seqno: SeqNo(7))
        b.record(vbucket: VBucketID(9), uuid: u1, seqno: SeqNo(2))
        let taken = b.take()
        #expect(b.isEmpty)
        #expect(taken[VBucketID(3)] == FullCommitBarrier.Mark(uuid: u1, seqno: SeqNo(10)))
        #expect(taken.count == 2)

        b.record(vbucket: VBucketID(3), uuid: u1, seqno: SeqNo(12))
        b.restore(taken)
        let again = b.take()
        #expect(again[VBucketID(3)]?.seqno == SeqNo(12))
        #expect(again[VBucketID(9)]?.seqno == SeqNo(2))

        b.record(vbucket: VBucketID(3), uuid: u1, seqno: SeqNo(50))
        b.record(vbucket: VBucketID(3), uuid: u2, seqno: SeqNo(4))
        #expect(b.take()[VBucketID(3)] == FullCommitBarrier.Mark(uuid: u2, seqno: SeqNo(4)))
    }

    /// Proves the verdict of an OBSERVE_SEQNO reply: reached only when the same history persisted the mark; waiting
    /// below it; lost when the reply is format 1 or names another uuid, however far it persisted.
    @Test func verdicts() {
        let mark = FullCommitBarrier.Mark(uuid: u1, seqno: SeqNo(10))
        #expect(FullCommitBarrier.verdict(mark, uuid: u1, persisted: SeqNo(10), failedOver: false) == .reached)
        #expect(FullCommitBarrier.verdict(mark, uuid: u1, persisted: SeqNo(99), failedOver: false) == .reached)
        #expect(FullCommitBarrier.verdict(mark, uuid: u1, persisted: SeqNo(9), failedOver: false) == .waiting)
        #expect(FullCommitBarrier.verdict(mark, uuid: u2, persisted: SeqNo(99), failedOver: false) == .lost)
        #expect(FullCommitBarrier.verdict(mark, uuid: u2, persisted: SeqNo(99), failedOver: true) == .lost)
    }
}
