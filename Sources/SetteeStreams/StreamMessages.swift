import SetteeCore

/// Where a snapshot's items are read from on the producer.
public enum SnapshotSource: Sendable, Hashable {
    /// Read from the vBucket's store on disk (a backfill).
    case disk
    /// Read from the in-memory list of recent changes.
    case memory
}

/// Announces the next snapshot: the items that follow, up to the next marker, have seqnos in `[start, end]`,
/// and once all are received the consumer holds the producer's state as of `end`.
public struct SnapshotMarker: Sendable, Hashable, CustomStringConvertible {
    public var start: SeqNo
    public var end: SeqNo
    public var source: SnapshotSource
    /// The producer's purge seqno when it said (ADR 0095): tombstones at or below it may be missing from this
    /// snapshot, so a copy that applies it takes the purge seqno up to here (never above the snapshot's end).
    public var purgeSeqno: SeqNo

    public init(start: SeqNo, end: SeqNo, source: SnapshotSource, purgeSeqno: SeqNo = .zero) {
        self.start = start
        self.end = end
        self.source = source
        self.purgeSeqno = purgeSeqno
    }

    public var description: String { "snapshot [\(start), \(end)] \(source)" }
}

/// One change carried by a stream.
public struct StreamItem: Sendable, Hashable {
    public enum Kind: Sendable, Hashable {
        case mutation
        case deletion
        case expiration
    }

    public var kind: Kind
    public var seqno: SeqNo
    public var key: [UInt8]
    /// Empty for deletions and expirations.
    public var value: [UInt8]
    public var cas: CAS
    public var revSeqno: RevSeqNo
    public var flags: UInt32
    public var expiry: UInt32
    public var datatype: Datatype
    /// A durable write not committed yet (DCP_PREPARE): held, not exposed, until a later item of the key.
    public var prepare: Bool
    /// A prepare's durability level as DCP_PREPARE carries it (1 majority, 2 majorityAndPersistOnMaster,
    /// 3 persistToMajority); 0 for other items. Only persistToMajority makes a replica wait for its disk before
    /// acknowledging (ADR 0073); a level this version does not know is treated as that, the strictest.
    public var level: UInt8

    public init(
        kind: Kind, seqno: SeqNo, key: [UInt8], value: [UInt8] = [], cas: CAS = .zero,
        revSeqno: RevSeqNo = RevSeqNo(1), flags: UInt32 = 0, expiry: UInt32 = 0, datatype: Datatype = .raw,
        prepare: Bool = false, level: UInt8 = 3
    ) {
        self.prepare = prepare
        self.level = prepare ? level : 0
        self.kind = kind
        self.seqno = seqno
        self.key = key
        self.value = value
        self.cas = cas
        self.revSeqno = revSeqno
        self.flags = flags
        self.expiry = expiry
        self.datatype = datatype
    }
}

/// Why a stream ended.
public enum StreamEndReason: Sendable, Hashable {
    /// The producer sent everything up to the requested end seqno.
    case reachedEnd
    /// The producer or consumer closed the stream.
    case closed
    /// The producer's vBucket changed state (no longer active, rolled back, taken over).
    case stateChanged
    /// The connection dropped.
    case disconnected

    /// The reason a DCP STREAM_END's flag gives: 0 (OK) reached the end, 2 (STATE_CHANGED) the vBucket changed
    /// state; every other flag (closed, disconnected, too slow, or one a newer producer added) closed it.
    public init(wireFlag: UInt32) {
        switch wireFlag {
        case 0: self = .reachedEnd
        case 2: self = .stateChanged
        default: self = .closed
        }
    }
}

/// A producer that broke the stream contract. The consumer closes the stream and discards what it staged.
public enum StreamViolation: Error, Sendable, Hashable {
    /// A message arrived in a state that does not allow it (e.g. an item before the request was accepted).
    case unexpected(message: String, state: String)
    /// A marker whose start is not after the last seqno, or whose range is inverted.
    case markerOutOfOrder(SnapshotMarker, lastSeqno: SeqNo)
    /// An item with no snapshot open.
    case itemWithoutSnapshot(SeqNo)
    /// An item outside the open snapshot's range.
    case itemOutsideSnapshot(SeqNo, SnapshotMarker)
    /// An item whose seqno is not greater than the previous one.
    case seqnoNotIncreasing(SeqNo, lastSeqno: SeqNo)
    /// The open snapshot's staged items passed `Limits.dcpConsumerMaxSnapshotItems` or `…Bytes`.
    case snapshotTooLarge(SnapshotMarker, items: Int, bytes: Int)
}
