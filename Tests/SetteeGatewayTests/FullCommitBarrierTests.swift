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

    func report(_ uuid: VBucketUUID, _ persisted: Int, failedOver: Bool = false) -> FullCommitBarrier.CopyReport {
        FullCommitBarrier.CopyReport(uuid: uuid, persisted: SeqNo(UInt64(persisted)), failedOver: failedOver)
    }

    /// Proves the majority counts Couchbase's durability levels use: 1 of 1, 2 of 2, 2 of 3, 3 of 4.
    @Test func majorities() {
        #expect([1, 2, 3, 4].map { FullCommitBarrier.majority(of: $0) } == [1, 2, 2, 3])
    }

    /// Proves the configured copies are the chain's length bounded by the map's nodes: a one-node cluster with
    /// replicaNumber 1 needs its one copy (not an impossible two), three nodes with replicaNumber 1 need two, and a
    /// two-node cluster with one node failed over but still listed keeps needing two.
    @Test func configuredCopiesAreBoundedByTheNodes() {
        #expect(FullCommitBarrier.configuredCopies(chainLength: 2, nodes: 1) == 1)
        #expect(FullCommitBarrier.configuredCopies(chainLength: 2, nodes: 3) == 2)
        #expect(FullCommitBarrier.configuredCopies(chainLength: 2, nodes: 2) == 2)
        #expect(FullCommitBarrier.configuredCopies(chainLength: 4, nodes: 3) == 3)
        #expect(FullCommitBarrier.configuredCopies(chainLength: 1, nodes: 0) == 1)
        let mark = FullCommitBarrier.Mark(uuid: u1, seqno: SeqNo(10))
        let oneNode = FullCommitBarrier.configuredCopies(chainLength: 2, nodes: 1)
        #expect(
            FullCommitBarrier.verdict(mark, active: report(u1, 10), replicas: [nil], configured: oneNode, named: 1)
                == .reached)
    }

    /// Proves replicaNumber 0 keeps the active's persistence as the rule: reached only when the same history
    /// persisted the mark; waiting below it or without an answer; lost when the reply is format 1 or names another
    /// uuid, however far it persisted.
    @Test func activeOnlyVerdicts() {
        let mark = FullCommitBarrier.Mark(uuid: u1, seqno: SeqNo(10))
        func v(_ active: FullCommitBarrier.CopyReport?) -> FullCommitBarrier.Verdict {
            FullCommitBarrier.verdict(mark, active: active, replicas: [], configured: 1, named: 1)
        }
        #expect(v(report(u1, 10)) == .reached)
        #expect(v(report(u1, 99)) == .reached)
        #expect(v(report(u1, 9)) == .waiting)
        #expect(v(nil) == .waiting)
        #expect(v(report(u2, 99)) == .lost)
        #expect(v(report(u2, 99, failedOver: true)) == .lost)
        #expect(v(report(u1, 99, failedOver: true)) == .lost)
    }

    /// Proves one replica (2 copies): the active's persistence alone is not enough; the replica must have persisted
    /// the mark under the same uuid. A replica that answers nothing, lags, or names another history (not yet adopted
    /// the active's failover log) does not count, and only the active's uuid makes the write lost.
    @Test func oneReplicaNeedsBothCopies() {
        let mark = FullCommitBarrier.Mark(uuid: u1, seqno: SeqNo(10))
        func v(_ active: FullCommitBarrier.CopyReport?, _ replica: FullCommitBarrier.CopyReport?)
            -> FullCommitBarrier.Verdict
        {
            FullCommitBarrier.verdict(mark, active: active, replicas: [replica], configured: 2, named: 2)
        }
        #expect(v(report(u1, 10), report(u1, 10)) == .reached)
        #expect(v(report(u1, 10), nil) == .waiting)
        #expect(v(report(u1, 10), report(u1, 9)) == .waiting)
        #expect(v(report(u1, 10), report(u2, 50)) == .waiting)
        #expect(v(report(u1, 10), report(u1, 50, failedOver: true)) == .waiting)
        #expect(v(report(u1, 9), report(u1, 10)) == .waiting)
        #expect(v(nil, report(u1, 10)) == .waiting)
        #expect(v(report(u2, 50), report(u1, 10)) == .lost)
    }

    /// Proves two replicas (3 copies): the active and one replica make a majority, whichever replica it is; and a map
    /// naming fewer copies than a majority (a failed-over replica, not rebalanced) is impossible rather than waiting,
    /// unless the active already shows the write lost.
    @Test func twoReplicasAndTooFewCopies() {
        let mark = FullCommitBarrier.Mark(uuid: u1, seqno: SeqNo(10))
        #expect(
            FullCommitBarrier.verdict(
                mark, active: report(u1, 10), replicas: [nil, report(u1, 12)], configured: 3, named: 3) == .reached)
        #expect(
            FullCommitBarrier.verdict(
                mark, active: report(u1, 10), replicas: [report(u1, 3), report(u2, 12)], configured: 3, named: 3)
                == .waiting)
        #expect(
            FullCommitBarrier.verdict(mark, active: report(u1, 10), replicas: [nil], configured: 2, named: 1)
                == .impossible)
        #expect(
            FullCommitBarrier.verdict(mark, active: report(u1, 10), replicas: [nil, nil], configured: 3, named: 1)
                == .impossible)
        #expect(
            FullCommitBarrier.verdict(mark, active: report(u2, 10), replicas: [nil], configured: 2, named: 1) == .lost)
    }
}
