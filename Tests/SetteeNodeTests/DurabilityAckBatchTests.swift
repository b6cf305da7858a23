import SetteeCore
import Synchronization
import Testing

@testable import SetteeNode

/// Acknowledgements by highest seqno (ADR 0055): a replica owes one SEQNO_ACKNOWLEDGED per vBucket per event-loop
/// tick, and one acknowledgement commits every prepare at or below it, none above, never before a majority holds it.
@Suite struct DurabilityAckBatchTests {
    /// Records which waiters completed, and how.
    final class Outcomes: Sendable {
        let done = Mutex<[UInt64: DurabilityMonitor.Outcome]>([:])
        func record(_ seqno: UInt64) -> @Sendable (DurabilityMonitor.Outcome) -> Void {
            { outcome in self.done.withLock { $0[seqno] = outcome } }
        }
        var committed: [UInt64] { done.withLock { $0.filter { $0.value == .satisfied }.keys.sorted() } }
        var handedOver: [UInt64] { done.withLock { $0.filter { $0.value == .handedOver }.keys.sorted() } }
    }

    let vb = VBucketID(3)
    let history = VBucketUUID(77)
    let replica = NodeID("n1@127.0.0.1")

    /// A vBucket owed several times in a tick is owed once; the first owed vBucket asks for the send, later
    /// ones do not until the owed set is taken; `take` is ascending and empties it.
    @Test func aVBucketIsOwedOnceUntilTaken() {
        var owed = OwedSeqnoAcks()
        let asks = [owed.owe(9), owed.owe(2), owed.owe(9), owed.owe(500)]
        #expect(asks == [true, false, false, false])
        let first = owed.take()
        #expect(first == [2, 9, 500])
        let none = owed.take()
        #expect(none.isEmpty)
        let again = owed.owe(9)
        #expect(again)
        let second = owed.take()
        #expect(second == [9])
    }

    /// Level majority with one replica (two copies, a majority is both): prepares at seqnos 1...6 wait;
    /// an acknowledgement of 4 commits 1...4 at once and leaves 5 and 6 waiting; a lower, late acknowledgement
    /// changes nothing; 6 commits 5 and 6.
    @Test func oneAcknowledgementCommitsEveryPrepareAtOrBelowIt() {
        let monitor = DurabilityMonitor()
        monitor.setReplicas(vb, [replica])
        let outcomes = Outcomes()
        for s in UInt64(1)...6 {
            _ = monitor.wait(
                vb, seqno: SeqNo(s), history: history, majority: 2, persistReplicas: false, activeHolds: true,
                completion: outcomes.record(s))
        }
        #expect(outcomes.committed.isEmpty)
        monitor.acknowledged(vb, replica: replica, memory: SeqNo(4), persisted: .zero, history: history)
        #expect(outcomes.committed == [1, 2, 3, 4])
        monitor.acknowledged(vb, replica: replica, memory: SeqNo(2), persisted: .zero, history: history)
        #expect(outcomes.committed == [1, 2, 3, 4])
        monitor.acknowledged(vb, replica: replica, memory: SeqNo(6), persisted: .zero, history: history)
        #expect(outcomes.committed == [1, 2, 3, 4, 5, 6])
    }

    /// persistToMajority counts the replica's persisted position only: a memory acknowledgement far ahead commits
    /// nothing; a persisted one of 2 commits the prepares at 1 and 2, once the active's own copy is persisted too.
    @Test func persistToMajorityWaitsForThePersistedPosition() {
        let monitor = DurabilityMonitor()
        monitor.setReplicas(vb, [replica])
        let outcomes = Outcomes()
        var ids: [UInt64] = []
        for s in UInt64(1)...3 {
            ids.append(
                monitor.wait(
                    vb, seqno: SeqNo(s), history: history, majority: 2, persistReplicas: true, activeHolds: false,
                    completion: outcomes.record(s)))
        }
        monitor.acknowledged(vb, replica: replica, memory: SeqNo(100), persisted: SeqNo(2), history: history)
        #expect(outcomes.committed.isEmpty)  // the active has not persisted any of them
        for id in ids { monitor.activePersisted(vb, id: id) }
        #expect(outcomes.committed == [1, 2])
        monitor.acknowledged(vb, replica: replica, memory: SeqNo(100), persisted: SeqNo(3), history: history)
        #expect(outcomes.committed == [1, 2, 3])
    }

    /// majorityAndPersistActive and persistToMajority with two replicas (a majority is 2 of 3 copies): both replicas'
    /// acknowledgements do not commit the write while the active's own copy is unpersisted; it commits once the
    /// active persists it. Before, the replicas' two copies were a majority on their own, so the write succeeded with
    /// the active's persistence still pending (or failing).
    @Test func theActivesCopyIsAlwaysOneOfTheMajority() {
        let monitor = DurabilityMonitor()
        let second = NodeID("n2@127.0.0.1")
        monitor.setReplicas(vb, [replica, second])
        let outcomes = Outcomes()
        let ids = [false, true].enumerated().map { n, persistReplicas in
            monitor.wait(
                vb, seqno: SeqNo(UInt64(n + 1)), history: history, majority: 2, persistReplicas: persistReplicas,
                activeHolds: false, completion: outcomes.record(UInt64(n + 1)))
        }
        for r in [replica, second] {
            monitor.acknowledged(vb, replica: r, memory: SeqNo(2), persisted: SeqNo(2), history: history)
        }
        #expect(outcomes.committed.isEmpty)
        for id in ids { monitor.activePersisted(vb, id: id) }
        #expect(outcomes.committed == [1, 2])
    }

    /// While a rebalance moves a vBucket (ADR 0117), a durable write needs a majority of the chain it moves to as
    /// well, as kv_engine's second chain: with the active's replica R1 acknowledging and the incoming R2 not, a write
    /// waits (R1 is dropped at the switch, and the new chain [active, R2] would not hold it); R2's acknowledgement
    /// commits it. A move that changes the active (chain [N, R2]) needs both N and R2. A finished move (one chain
    /// again) completes the waiters the remaining chain holds. Before, the old chain's majority was enough, and the
    /// switch could leave an acknowledged write on the active alone.
    @Test func aMovingVBucketNeedsAMajorityOfBothChains() {
        let me = NodeID("n0@127.0.0.1")
        let incoming = NodeID("n2@127.0.0.1")
        let newActive = NodeID("n3@127.0.0.1")
        let monitor = DurabilityMonitor()
        monitor.setReplicas(vb, [replica], moving: [me, incoming], me: me)
        #expect(monitor.replicaCount(vb)?.secondChainCanHoldMajority == true)
        let outcomes = Outcomes()
        _ = monitor.wait(
            vb, seqno: SeqNo(1), history: history, majority: 2, persistReplicas: false, activeHolds: true,
            completion: outcomes.record(1))
        monitor.acknowledged(vb, replica: replica, memory: SeqNo(1), persisted: .zero, history: history)
        #expect(outcomes.committed.isEmpty, "the chain it moves to holds only the active's copy")
        monitor.acknowledged(vb, replica: incoming, memory: SeqNo(1), persisted: .zero, history: history)
        #expect(outcomes.committed == [1])

        monitor.setReplicas(vb, [replica], moving: [newActive, incoming], me: me)
        _ = monitor.wait(
            vb, seqno: SeqNo(2), history: history, majority: 2, persistReplicas: false, activeHolds: true,
            completion: outcomes.record(2))
        for r in [replica, incoming] {
            monitor.acknowledged(vb, replica: r, memory: SeqNo(2), persisted: .zero, history: history)
        }
        #expect(outcomes.committed == [1], "the new active has not acknowledged it")
        monitor.acknowledged(vb, replica: newActive, memory: SeqNo(2), persisted: .zero, history: history)
        #expect(outcomes.committed == [1, 2])

        monitor.setReplicas(vb, [replica], moving: [me, incoming], me: me)
        _ = monitor.wait(
            vb, seqno: SeqNo(3), history: history, majority: 2, persistReplicas: false, activeHolds: true,
            completion: outcomes.record(3))
        monitor.acknowledged(vb, replica: incoming, memory: SeqNo(3), persisted: .zero, history: history)
        #expect(outcomes.committed == [1, 2])
        monitor.setReplicas(vb, [incoming], me: me)
        #expect(outcomes.committed == [1, 2, 3], "the move is over: the new chain holds it")

        monitor.setReplicas(vb, [replica], moving: [newActive, nil], me: me)
        #expect(monitor.replicaCount(vb)?.secondChainCanHoldMajority == false)
    }

    /// Regression (ADR 0078): the replica's acknowledgement of a prepare can come back before the writer's event loop
    /// registers the waiter. The first waiter of a vBucket used to adopt the history by dropping what was
    /// acknowledged, so this write waited for the next prepare of its vBucket (a 3-node majority run stalled until
    /// its clients timed out). Now it completes at once.
    @Test func anAcknowledgementBeforeTheWaiterCounts() {
        let monitor = DurabilityMonitor()
        monitor.setReplicas(vb, [replica])
        let outcomes = Outcomes()
        monitor.acknowledged(vb, replica: replica, memory: SeqNo(5), persisted: .zero, history: history)
        _ = monitor.wait(
            vb, seqno: SeqNo(5), history: history, majority: 2, persistReplicas: false, activeHolds: true,
            completion: outcomes.record(5))
        #expect(outcomes.committed == [5])
        // A later prepare still waits for its own acknowledgement.
        _ = monitor.wait(
            vb, seqno: SeqNo(6), history: history, majority: 2, persistReplicas: false, activeHolds: true,
            completion: outcomes.record(6))
        #expect(outcomes.committed == [5])
    }

    /// What was acknowledged under another history (a bucket flush restarted the seqnos at 0) never counts for a
    /// write of the new one, whichever arrives first.
    @Test func acknowledgementsOfAnotherHistoryDoNotCount() {
        let monitor = DurabilityMonitor()
        monitor.setReplicas(vb, [replica])
        let outcomes = Outcomes()
        let newer = VBucketUUID(78)
        monitor.acknowledged(vb, replica: replica, memory: SeqNo(500), persisted: SeqNo(500), history: history)
        _ = monitor.wait(
            vb, seqno: SeqNo(3), history: newer, majority: 2, persistReplicas: false, activeHolds: true,
            completion: outcomes.record(3))
        #expect(outcomes.committed.isEmpty)
        // A late acknowledgement of the old history changes nothing either, and the new one's does commit.
        monitor.acknowledged(vb, replica: replica, memory: SeqNo(400), persisted: .zero, history: history)
        #expect(outcomes.committed.isEmpty)
        monitor.acknowledged(vb, replica: replica, memory: SeqNo(3), persisted: .zero, history: newer)
        #expect(outcomes.committed == [3])
    }

    /// An acknowledgement from a node outside the vBucket's replica set, or of another vBucket, commits nothing.
    @Test func onlyTheVBucketsOwnReplicasCount() {
        let monitor = DurabilityMonitor()
        monitor.setReplicas(vb, [replica])
        let outcomes = Outcomes()
        _ = monitor.wait(
            vb, seqno: SeqNo(1), history: history, majority: 2, persistReplicas: false, activeHolds: true,
            completion: outcomes.record(1))
        monitor.acknowledged(
            vb, replica: NodeID("n2@127.0.0.1"), memory: SeqNo(9), persisted: SeqNo(9), history: history)
        monitor.acknowledged(VBucketID(4), replica: replica, memory: SeqNo(9), persisted: SeqNo(9), history: history)
        #expect(outcomes.committed.isEmpty)
        monitor.acknowledged(vb, replica: replica, memory: SeqNo(1), persisted: .zero, history: history)
        #expect(outcomes.committed == [1])
    }

    /// A vBucket that stops being active here (a rebalance's takeover made it pending, then replica) answers its
    /// waiting durable writes at once, as handed over (ambiguous, the prepare left to the new active), and a write
    /// applied just before the switch whose wait registers after it too; once active again, waits count as before.
    /// Before, nothing could satisfy them (the replica set was emptied, acknowledgements went to the new active), so
    /// each waited out its 30 s timeout, and on an ordered connection every later answer waited behind it: in a
    /// loaded CI run durable writes during a rebalance stalled and reads afterwards timed out (ADR 0118).
    @Test func aVBucketThatStopsBeingActiveEndsItsWaitsAtOnce() {
        let monitor = DurabilityMonitor()
        monitor.setReplicas(vb, [replica])
        let outcomes = Outcomes()
        for s in UInt64(1)...3 {
            _ = monitor.wait(
                vb, seqno: SeqNo(s), history: history, majority: 2, persistReplicas: false, activeHolds: true,
                completion: outcomes.record(s))
        }
        monitor.acknowledged(vb, replica: replica, memory: SeqNo(1), persisted: .zero, history: history)
        #expect(outcomes.committed == [1])
        monitor.handOver(vb)
        #expect(outcomes.handedOver == [2, 3])
        #expect(monitor.replicaCount(vb) == nil, "a write must be retried until the monitor knows the copies again")
        _ = monitor.wait(
            vb, seqno: SeqNo(4), history: history, majority: 2, persistReplicas: false, activeHolds: true,
            completion: outcomes.record(4))
        #expect(outcomes.handedOver == [2, 3, 4])
        // A late acknowledgement of the old replica changes nothing; nor does a second hand-over.
        monitor.acknowledged(vb, replica: replica, memory: SeqNo(9), persisted: .zero, history: history)
        monitor.handOver(vb)
        #expect(outcomes.committed == [1] && outcomes.handedOver == [2, 3, 4])
        // Active again (the move was rolled back): a new write waits for its majority as before.
        monitor.setReplicas(vb, [replica])
        _ = monitor.wait(
            vb, seqno: SeqNo(5), history: history, majority: 2, persistReplicas: false, activeHolds: true,
            completion: outcomes.record(5))
        #expect(outcomes.done.withLock { $0[5] } == nil)
        monitor.acknowledged(vb, replica: replica, memory: SeqNo(5), persisted: .zero, history: history)
        #expect(outcomes.committed == [1, 5])
    }
}
