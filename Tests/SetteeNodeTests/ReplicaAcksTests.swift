import SetteeCore
import Testing

@testable import SetteeNode

/// When a replica stream acknowledges (ADR 0066): every consistent snapshot moves the position it holds, but only
/// a snapshot holding a prepare, or the stream's first, is announced (SEQNO_ACKNOWLEDGED and a persistence waiter);
/// the commits a prepare's acknowledgement causes are not acknowledged on their own.
@Suite struct ReplicaAcksTests {
    /// Prepare at 1 (announced), its commit at 2 (held, not announced), a prepare at 3 (announced, covering 2).
    @Test func commitOnlySnapshotsAreHeldButNotAnnounced() {
        var acks = ReplicaAcks()
        let first = acks.heldInMemory(SeqNo(1), holdsPrepare: true)
        #expect(first)
        #expect(acks.memory == SeqNo(1))
        let commit = acks.heldInMemory(SeqNo(2), holdsPrepare: false)
        #expect(!commit)
        #expect(acks.memory == SeqNo(2))  // the next announcement carries it
        let next = acks.heldInMemory(SeqNo(3), holdsPrepare: true)
        #expect(next)
        #expect(acks.memory == SeqNo(3))
    }

    /// A stream's first snapshot is announced even without a prepare (a prepare it held before a reconnection,
    /// whose acknowledgement was lost, is released by it); later prepare-free ones are not.
    @Test func theFirstSnapshotIsAlwaysAnnounced() {
        var acks = ReplicaAcks()
        let first = acks.heldInMemory(SeqNo(40), holdsPrepare: false)
        #expect(first)
        let second = acks.heldInMemory(SeqNo(41), holdsPrepare: false)
        #expect(!second)
        #expect(acks.memory == SeqNo(41))
    }

    /// After a rollback the held position goes down with the copy: never a claim the copy does not hold.
    @Test func theHeldPositionFollowsARollback() {
        var acks = ReplicaAcks()
        _ = acks.heldInMemory(SeqNo(500), holdsPrepare: true)
        _ = acks.heldInMemory(SeqNo(3), holdsPrepare: true)
        #expect(acks.memory == SeqNo(3))
    }

    /// The persisted position only grows; a late, lower persistence announces nothing.
    @Test func persistedOnlyGrows() {
        var acks = ReplicaAcks()
        let a = acks.persistedThrough(SeqNo(5))
        let b = acks.persistedThrough(SeqNo(4))
        let c = acks.persistedThrough(SeqNo(5))
        let d = acks.persistedThrough(SeqNo(9))
        #expect([a, b, c, d] == [true, false, false, true])
        #expect(acks.persisted == SeqNo(9))
    }
}
