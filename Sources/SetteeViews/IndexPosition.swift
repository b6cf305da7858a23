import SetteeCore
import SetteeStreams

/// What an index holds of one vBucket: every change up to `seqno` of the history named `uuid` (the newest
/// failover-log entry when those changes were read).
struct IndexPosition: Sendable, Hashable {
    var seqno: UInt64
    var uuid: VBucketUUID
}

extension IndexPosition {
    /// Whether the rows indexed up to this position are still a prefix of the vBucket's history, so indexing
    /// continues after `seqno` (ADR 0088). Judged as a DCP producer judges a consumer resuming a stream at
    /// `seqno` under `uuid`, holding its whole snapshot (`ProducerHistory.decide`): a history that ended below
    /// `seqno` (a flush branches a new one at 0; a failover or an unclean restart branches at the high seqno),
    /// a uuid that is not in the log, or a high seqno below `seqno` means the index holds changes the vBucket
    /// no longer has. The index cannot roll back part of a vBucket (its rows do not carry seqnos), so any
    /// rollback the producer would ask for is a rebuild of that vBucket from 0.
    /// Tombstones above `seqno` and at or below `purgeSeqno` are gone (ADR 0095): the index may hold documents whose
    /// deletions it never saw, so it rebuilds, as a DCP consumer below the purge seqno is rolled back to 0.
    func continues(in log: FailoverLog, highSeqno: SeqNo, purgeSeqno: SeqNo = .zero) -> Bool {
        // A log whose newest entry lies above the high seqno is a replica's (never indexed): nothing to continue.
        guard log.newest.seqno <= highSeqno else { return false }
        let at = SeqNo(seqno)
        let history = ProducerHistory(
            failoverLog: log, highSeqno: highSeqno, purgeSeqno: min(purgeSeqno, highSeqno))
        let request = StreamRequest(
            vbucket: VBucketID(0), resume: ResumePoint(start: at, snapStart: at, snapEnd: at, uuid: uuid))
        return history.decide(request) == .accept
    }
}
