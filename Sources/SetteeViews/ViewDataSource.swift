import SetteeCore
import SetteeStorage
import SetteeStreams

/// What an index reads from one bucket on this node: per-vBucket change streams, vBucket states,
/// single documents for `include_docs`. `EngineViewSource` conforms over a `BucketEngine`;
/// the protocol keeps the index engine independent of how changes arrive (local engine today, a
/// remote change stream later).
public protocol ViewDataSource: AnyObject, Sendable {
    /// vBuckets of the bucket (1024).
    var vbucketCount: Int { get }
    /// The history of `vb` read at once: its failover log (newest entry first), the last seqno issued and the purge
    /// seqno (tombstones at or below it may be gone, ADR 0095); nil when `vb` is not active here (only active
    /// vBuckets are indexed).
    func activeHistory(_ vb: VBucketID) -> (log: FailoverLog, highSeqno: SeqNo, purgeSeqno: SeqNo)?
    /// Whether `vb` is active here now (a query serves only such vBuckets' rows).
    func isActive(_ vb: VBucketID) -> Bool
    /// Whether `vb` is held back after an unclean shutdown (ADR 0033): not active, but this node's until the cluster
    /// releases it (then active again, its history continued) or hands it to another copy. Its rows are kept.
    func isHeld(_ vb: VBucketID) -> Bool
    /// A number that changes whenever a vBucket's state (or hold) changes, so a query can reuse what it derived from
    /// the states while it stays equal; nil when the source keeps none (then every query asks again).
    var stateEpoch: UInt64? { get }
    /// The data's clock in Unix seconds (document expiries are compared with it).
    func nowSeconds() -> UInt32
    /// Changes of `vb` after `since`, at most `limit`, as the change feed reports them (each key's latest
    /// version, in seqno order, no prepares), with the vBucket's purge seqno when they were read (ADR 0095: a
    /// purge above both the scan's position and what the index began from means deletions it never saw are gone);
    /// blocking (call off event loops).
    func changes(_ vb: VBucketID, since: SeqNo, limit: Int) throws -> (
        records: [ChangeRecord], highSeqno: SeqNo, purgeSeqno: SeqNo
    )
    /// The current version of a document (nil when missing or deleted); blocking.
    func document(_ key: [UInt8]) -> (value: [UInt8], meta: ItemMetadata)?
    /// Calls `observer` after mutations (must not block); returns a token for `removeObserver`.
    func addObserver(_ observer: @escaping @Sendable (VBucketID, SeqNo) -> Void) -> UInt64
    func removeObserver(_ token: UInt64)
}

extension ViewDataSource {
    public func isActive(_ vb: VBucketID) -> Bool { activeHistory(vb) != nil }
    public func isHeld(_ vb: VBucketID) -> Bool { false }
    public var stateEpoch: UInt64? { nil }
}

/// Tombstones above a change scan's position were purged while the index read the vBucket
/// (`VBucketWork.check`): the deletions it has not seen are gone, so the vBucket is indexed again
/// from 0 (its next pass finds the purge seqno above the position it stored).
public struct ViewSourcePurged: Error, Sendable, Equatable {
    public var vbucket: VBucketID
    public var purgeSeqno: SeqNo
    public init(vbucket: VBucketID, purgeSeqno: SeqNo) {
        self.vbucket = vbucket
        self.purgeSeqno = purgeSeqno
    }
}
