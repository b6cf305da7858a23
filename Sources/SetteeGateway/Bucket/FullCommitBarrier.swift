import SetteeCore

/// What a gateway on a cluster bucket must see before `_ensure_full_commit` answers (ADR 0039, ADR 0013 item 9):
/// per vBucket, the highest seqno (with the vBucket's uuid) among the writes this gateway got acknowledged since
/// the last barrier that passed. Pure: `RemoteBucket` records each write's mutation token and asks the vBucket's
/// active for its persisted seqno (OBSERVE_SEQNO), feeding the replies to `verdict`.
///
/// Invariants:
///   1. A recorded write stays pending until a reply shows it persisted under the same uuid (`reached`), or a reply
///      shows the vBucket's history moved to another uuid (`lost`: failed over; the write may be gone).
///   2. `take` hands the caller every pending vBucket; what the caller does not `settle` it must `restore`, so a
///      barrier that failed (timeout, an unreachable node) is retried by the next call instead of forgotten: the
///      replicator's retry resends nothing the gateway already holds, so no new write would be recorded.
///   3. A `lost` entry is dropped after failing its barrier once: the replicator then restarts from its checkpoint
///      and asks `_revs_diff` again, which compares against the new active's history.
///
/// ```
///   write acked ──record──▶ pending ──take──▶ checking ──reached/lost──▶ settled (dropped)
///                                                 └──────timeout──restore──▶ pending
/// ```
public struct FullCommitBarrier: Sendable, Equatable {
    /// The highest acknowledged write of a vBucket: its history's uuid and seqno.
    public struct Mark: Sendable, Equatable {
        public var uuid: VBucketUUID
        public var seqno: SeqNo

        public init(uuid: VBucketUUID, seqno: SeqNo) {
            self.uuid = uuid
            self.seqno = seqno
        }
    }

    /// What an OBSERVE_SEQNO reply from the vBucket's active says of a mark.
    public enum Verdict: Sendable, Equatable {
        /// Persisted on the active, same history.
        case reached
        /// Not persisted yet: ask again.
        case waiting
        /// The vBucket's history is another one (failed over): the write may be lost.
        case lost
    }

    private(set) var pending: [VBucketID: Mark] = [:]

    public init() {}

    /// Whether any acknowledged write is waiting for a barrier.
    public var isEmpty: Bool { pending.isEmpty }

    /// Notes an acknowledged write. A write of another uuid than the one held replaces it (the vBucket failed over
    /// and this write is on the new history; the older one's fate is `lost` anyway).
    public mutating func record(vbucket: VBucketID, uuid: VBucketUUID, seqno: SeqNo) {
        if let held = pending[vbucket], held.uuid == uuid, held.seqno >= seqno { return }
        pending[vbucket] = Mark(uuid: uuid, seqno: seqno)
    }

    /// Every pending mark, removed: the caller checks them, then `restore`s those it could not settle.
    public mutating func take() -> [VBucketID: Mark] {
        defer { pending = [:] }
        return pending
    }

    /// Puts back marks a failed barrier did not settle, keeping any later write recorded meanwhile.
    public mutating func restore(_ marks: [VBucketID: Mark]) {
        for (vb, m) in marks {
            guard let held = pending[vb] else {
                pending[vb] = m
                continue
            }
            if held.uuid == m.uuid, m.seqno > held.seqno { pending[vb] = m }
        }
    }

    /// The verdict of an OBSERVE_SEQNO reply for `mark`: `uuid` and `persisted` as the active reports them now,
    /// `failedOver` when it answered in format 1 (the uuid asked about is not its current one).
    public static func verdict(_ mark: Mark, uuid: VBucketUUID, persisted: SeqNo, failedOver: Bool) -> Verdict {
        if failedOver || uuid != mark.uuid { return .lost }
        return persisted >= mark.seqno ? .reached : .waiting
    }
}
