/// The SEQNO_ACKNOWLEDGED frames a replica's consumer connection owes its producer, coalesced (ADR 0055).
///
/// A replica acknowledges the highest seqno it holds per vBucket (in memory, and persisted), as kv_engine's
/// passive durability monitor acknowledges its high prepared seqno: one acknowledgement covers every prepare at or
/// below it (`DurabilityMonitor` commits them all at once). So a vBucket that committed several snapshots, or whose
/// memory and persisted positions both moved, in one event-loop tick owes one frame, carrying the positions the
/// stream holds when the frame is written (never an older or a newer claim than the copy's state then), and every
/// vBucket's frame of the tick leaves in one write.
///
/// Invariants: (1) a vBucket is owed at most once until `take`; (2) `take` returns the owed vBuckets in ascending
/// order and clears them; (3) `owe` says when a send must be scheduled: only for the first vBucket owed after a
/// `take`, so one send is queued at a time. A vBucket whose stream is gone when the frame would be written (closed,
/// connection lost) is skipped by the writer: its next stream acknowledges for itself.
struct OwedSeqnoAcks: Equatable {
    private var owed: Set<UInt16> = []

    /// `vb`'s positions moved; true when no send is queued yet (the caller queues one).
    mutating func owe(_ vb: UInt16) -> Bool {
        let first = owed.isEmpty
        owed.insert(vb)
        return first
    }

    /// The vBuckets owed a frame, ascending; afterwards none are.
    mutating func take() -> [UInt16] {
        let vbs = owed.sorted()
        owed = []
        return vbs
    }
}
