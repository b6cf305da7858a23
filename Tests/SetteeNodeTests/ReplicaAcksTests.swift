import SetteeCore
import SetteeStorage
import Testing

@testable import SetteeNode

/// When a replica stream acknowledges (ADR 0066): every consistent snapshot moves the position it holds, but only
/// a snapshot holding a prepare, or the stream's first, is announced (SEQNO_ACKNOWLEDGED and a persistence waiter);
/// the commits a prepare's acknowledgement causes are not acknowledged on their own.
@Suite struct ReplicaAcksTests {
    /// Prepare at 1 (announced), its commit at 2 (held, not announced), a prepare at 3 (announced, covering 2).
    @Test func commitOnlySnapshotsAreHeldButNotAnnounced() {
        var acks = ReplicaAcks()
        let first = acks.heldInMemory(SeqNo(1), holdsPrepare: true, needsPersistence: true)
        #expect(first == .memoryThenPersisted)
        #expect(acks.memory == SeqNo(1))
        let commit = acks.heldInMemory(SeqNo(2), holdsPrepare: false, needsPersistence: false)
        #expect(commit == .none)
        #expect(acks.memory == SeqNo(2))  // the next announcement carries it
        let next = acks.heldInMemory(SeqNo(3), holdsPrepare: true, needsPersistence: true)
        #expect(next == .memoryThenPersisted)
        #expect(acks.memory == SeqNo(3))
    }

    /// A stream's first snapshot is announced even without a prepare (a prepare it held before a reconnection,
    /// whose acknowledgement was lost, is released by it); later prepare-free ones are not.
    @Test func theFirstSnapshotIsAlwaysAnnounced() {
        var acks = ReplicaAcks()
        let first = acks.heldInMemory(SeqNo(40), holdsPrepare: false, needsPersistence: false)
        #expect(first == .memoryThenPersisted)
        let second = acks.heldInMemory(SeqNo(41), holdsPrepare: false, needsPersistence: false)
        #expect(second == .none)
        #expect(acks.memory == SeqNo(41))
    }

    /// Level on the wire (ADR 0073): a snapshot whose prepares are all of levels a replica meets in memory
    /// (majority, majorityAndPersistOnMaster) is acknowledged from memory only, with no persistence waiter to cut
    /// the flusher's gather short; one holding a persistToMajority prepare, and the stream's first (it may
    /// re-announce such a prepare held before a reconnection), also wait for the disk. Before, every announced
    /// snapshot waited for persistence.
    @Test func onlyPersistToMajorityPreparesWaitForTheDisk() {
        var acks = ReplicaAcks()
        let first = acks.heldInMemory(SeqNo(1), holdsPrepare: true, needsPersistence: false)
        #expect(first == .memoryThenPersisted)
        let majority = acks.heldInMemory(SeqNo(2), holdsPrepare: true, needsPersistence: false)
        #expect(majority == .memory)
        let persist = acks.heldInMemory(SeqNo(3), holdsPrepare: true, needsPersistence: true)
        #expect(persist == .memoryThenPersisted)
        let commitOnly = acks.heldInMemory(SeqNo(4), holdsPrepare: false, needsPersistence: false)
        #expect(commitOnly == .none)
        #expect(acks.memory == SeqNo(4))
    }

    /// Which staged snapshots need the disk (ADR 0073): a persistToMajority prepare, or one whose level is not
    /// 1-3, does; majority and majorityAndPersistOnMaster prepares and plain items do not; and when the producer
    /// did not say its levels are real (an older Settee node wrote 1 for every prepare) every prepare does.
    @Test func whichSnapshotsNeedPersistence() {
        func rec(_ seq: UInt64, prepare: Bool, level: UInt8?) -> ChangeRecord {
            ChangeRecord(
                key: Array("k\(seq)".utf8), value: [1],
                meta: ItemMetadata(
                    cas: CAS(seq), revSeqno: RevSeqNo(1), bySeqno: SeqNo(seq), flags: 0, expiry: 0, datatype: .raw,
                    deleted: false),
                prepare: prepare, level: level)
        }
        let memoryOnly = [
            rec(1, prepare: false, level: nil), rec(2, prepare: true, level: 1), rec(3, prepare: true, level: 2),
        ]
        #expect(!ReplicaAcks.needsPersistence(memoryOnly, levelsTrusted: true))
        #expect(ReplicaAcks.needsPersistence(memoryOnly, levelsTrusted: false))
        #expect(ReplicaAcks.needsPersistence(memoryOnly + [rec(4, prepare: true, level: 3)], levelsTrusted: true))
        #expect(ReplicaAcks.needsPersistence([rec(5, prepare: true, level: 7)], levelsTrusted: true))
        #expect(!ReplicaAcks.needsPersistence([rec(6, prepare: false, level: nil)], levelsTrusted: false))
    }

    /// After a rollback the held position goes down with the copy: never a claim the copy does not hold.
    @Test func theHeldPositionFollowsARollback() {
        var acks = ReplicaAcks()
        _ = acks.heldInMemory(SeqNo(500), holdsPrepare: true, needsPersistence: true)
        _ = acks.heldInMemory(SeqNo(3), holdsPrepare: true, needsPersistence: true)
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
