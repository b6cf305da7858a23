import SetteeCore
import SetteeStorage

/// One document version as the index sees it (latest version per key, in seqno order).
public struct ViewChange: Sendable, Equatable {
    public var key: [UInt8]
    public var value: [UInt8]
    public var meta: ItemMetadata
    public init(key: [UInt8], value: [UInt8], meta: ItemMetadata) {
        self.key = key
        self.value = value
        self.meta = meta
    }
}

/// What an index reads from one bucket on this node: per-vBucket change streams, vBucket states,
/// single documents for `include_docs`. `BucketEngine` conforms (ViewDataSource+BucketEngine.swift);
/// the protocol keeps the index engine independent of how changes arrive (local engine today, a
/// remote change stream later).
public protocol ViewDataSource: AnyObject, Sendable {
    /// vBuckets of the bucket (1024).
    var vbucketCount: Int { get }
    /// Whether `vb` is active here (only active vBuckets are indexed).
    func isActive(_ vb: VBucketID) -> Bool
    /// The data's clock in Unix seconds (document expiries are compared with it).
    func nowSeconds() -> UInt32
    /// The last seqno issued in `vb`.
    func highSeqno(_ vb: VBucketID) -> SeqNo
    /// Changes of `vb` after `since`, at most `limit`; blocking (call off event loops).
    func changes(_ vb: VBucketID, since: SeqNo, limit: Int) throws -> (records: [ViewChange], highSeqno: SeqNo)
    /// The current version of a document (nil when missing or deleted); blocking.
    func document(_ key: [UInt8]) -> (value: [UInt8], meta: ItemMetadata)?
    /// Calls `observer` after mutations (must not block); returns a token for `removeObserver`.
    func addObserver(_ observer: @escaping @Sendable (VBucketID, SeqNo) -> Void) -> UInt64
    func removeObserver(_ token: UInt64)
}
