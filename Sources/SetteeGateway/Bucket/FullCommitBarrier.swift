import SetteeCore

/// What a gateway on a cluster bucket must see before `_ensure_full_commit` answers (ADR 0039 decision 6, ADR 0013
/// item 9): per vBucket, the highest seqno (with the vBucket's uuid) among the writes this gateway got acknowledged
/// since the last barrier that passed, persisted on the active and on a majority of the vBucket's configured copies
/// (Couchbase's persistToMajority, checked the way its SDKs' legacy observe-based durability does). Pure:
/// `RemoteBucket` records each write's mutation token and asks every copy in the vBucket's chain for its persisted
/// seqno (OBSERVE_SEQNO), feeding the replies to `verdict`.
///
/// Invariants:
///   1. A recorded write stays pending until one pass of replies shows it persisted under the same uuid on the active
///      and on a majority of `replicaNumber + 1` copies (`reached`), or the active's reply shows the vBucket's history
///      moved to another uuid (`lost`: failed over; the write may be gone).
///   2. `take` hands the caller every pending vBucket; what the caller does not `settle` it must `restore`, so a
///      barrier that failed (timeout, an unreachable node, too few copies in the map) is retried by the next call
///      instead of forgotten: the replicator's retry resends nothing the gateway already holds, so no new write would
///      be recorded.
///   3. A `lost` entry is dropped after failing its barrier once: the replicator then restarts from its checkpoint
///      and asks `_revs_diff` again, which compares against the new active's history.
///   4. A replica counts only when it names the mark's uuid: one that has not adopted the active's failover log yet,
///      or holds another history, holds nothing of this mark. Only the active's uuid decides `lost`.
///
/// ```
///   write acked ──record──▶ pending ──take──▶ checking ──reached/lost──▶ settled (dropped)
///                                                 └──timeout/impossible──restore──▶ pending
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

    /// What one pass of OBSERVE_SEQNO replies from a vBucket's copies says of a mark.
    public enum Verdict: Sendable, Equatable {
        /// Persisted on the active and on a majority of the copies, same history.
        case reached
        /// Not there yet (or a copy did not answer): ask again.
        case waiting
        /// The active's history is another one (failed over): the write may be lost.
        case lost
        /// The map names fewer copies than a majority (a replica failed over, not rebalanced yet): waiting cannot
        /// help until the map changes.
        case impossible
    }

    /// One copy's OBSERVE_SEQNO reply: its current uuid, how far it persisted, and whether it answered in format 1
    /// (the uuid asked about is not its current one).
    public struct CopyReport: Sendable, Equatable {
        public var uuid: VBucketUUID
        public var persisted: SeqNo
        public var failedOver: Bool

        public init(uuid: VBucketUUID, persisted: SeqNo, failedOver: Bool) {
            self.uuid = uuid
            self.persisted = persisted
            self.failedOver = failedOver
        }

        /// Whether this copy holds `mark` on disk, in the same history.
        func holds(_ mark: Mark) -> Bool { !failedOver && uuid == mark.uuid && persisted >= mark.seqno }
    }

    /// Copies that must hold a mark out of `configured` (`replicaNumber + 1`): a strict majority, as Couchbase's
    /// durability levels count them (1 of 1, 2 of 2, 2 of 3, 3 of 4).
    public static func majority(of configured: Int) -> Int { max(configured, 1) / 2 + 1 }

    /// The copies a vBucket is configured to have: its chain's length (`replicaNumber + 1`), but no more than the
    /// nodes the map lists. A cluster of one node holds one copy whatever `replicaNumber` says (Couchbase's default
    /// is 1): requiring a replica no node can hold would fail every barrier forever, and the best that cluster can
    /// keep is its one persisted copy. A chain entry without a node on a cluster that has enough nodes (a failed-over
    /// replica, not rebalanced yet) still counts, so such a vBucket is `impossible`, not quietly weaker.
    public static func configuredCopies(chainLength: Int, nodes: Int) -> Int { max(1, min(chainLength, nodes)) }

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

    /// The verdict of one pass over a vBucket's chain for `mark`. `active`: the reply of the copy the map names
    /// active (nil: none named, or no answer); `replicas`: the replies of the replicas it names (nil: no answer);
    /// `configured`: `configuredCopies`; `named`: how many chain entries name a node, the active included.
    /// With `replicaNumber` 0 this is the active's persistence alone.
    public static func verdict(
        _ mark: Mark, active: CopyReport?, replicas: [CopyReport?], configured: Int, named: Int
    ) -> Verdict {
        if let active, active.failedOver || active.uuid != mark.uuid { return .lost }
        let needed = majority(of: configured)
        if named < needed { return .impossible }
        guard let active, active.holds(mark) else { return .waiting }
        let held = 1 + replicas.reduce(0) { $0 + ($1?.holds(mark) == true ? 1 : 0) }
        return held >= needed ? .reached : .waiting
    }
}
