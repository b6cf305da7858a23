/// A vBucket number, 0 ..< `Limits.numVBuckets`. The wire carries it as a big-endian u16.
public struct VBucketID: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public var rawValue: UInt16
    @inlinable public init(rawValue: UInt16) { self.rawValue = rawValue }
    @inlinable public init(_ value: UInt16) { self.rawValue = value }
    @inlinable public var index: Int { Int(rawValue) }
    @inlinable public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
    public var description: String { "vb:\(rawValue)" }
}

/// A per-vBucket, strictly increasing sequence number ("by-seqno"): every mutation, deletion and
/// expiration of a vBucket gets the next one.
public struct SeqNo: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public var rawValue: UInt64
    @inlinable public init(rawValue: UInt64) { self.rawValue = rawValue }
    @inlinable public init(_ value: UInt64) { self.rawValue = value }
    public static let zero = SeqNo(0)
    @inlinable public var next: SeqNo { SeqNo(rawValue &+ 1) }
    @inlinable public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
    public var description: String { String(rawValue) }
}

/// A document's compare-and-swap value: a hybrid logical clock reading (see `HybridLogicalClock`).
/// Zero on a request means "no CAS check".
public struct CAS: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public var rawValue: UInt64
    @inlinable public init(rawValue: UInt64) { self.rawValue = rawValue }
    @inlinable public init(_ value: UInt64) { self.rawValue = value }
    public static let zero = CAS(0)
    @inlinable public var isZero: Bool { rawValue == 0 }
    @inlinable public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
    public var description: String { String(rawValue) }
}

/// A per-document revision counter, bumped on every mutation of that document (deletions included).
public struct RevSeqNo: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public var rawValue: UInt64
    @inlinable public init(rawValue: UInt64) { self.rawValue = rawValue }
    @inlinable public init(_ value: UInt64) { self.rawValue = value }
    @inlinable public var next: RevSeqNo { RevSeqNo(rawValue &+ 1) }
    @inlinable public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
    public var description: String { String(rawValue) }
}

/// The random 64-bit identity of one history of a vBucket (an entry of its failover log).
public struct VBucketUUID: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt64
    @inlinable public init(rawValue: UInt64) { self.rawValue = rawValue }
    @inlinable public init(_ value: UInt64) { self.rawValue = value }
    public var description: String { String(rawValue) }
}

/// The revision of a cluster map; clients keep the config greatest in `(epoch, rev)` order.
public struct MapRevision: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var epoch: Int64
    public var rev: Int64
    public init(epoch: Int64 = 1, rev: Int64) {
        self.epoch = epoch
        self.rev = rev
    }
    public static func < (a: Self, b: Self) -> Bool { (a.epoch, a.rev) < (b.epoch, b.rev) }
    public var description: String { "\(epoch).\(rev)" }
}

/// A node's stable name (Couchbase's `otpNode`, e.g. `ns_1@127.0.0.1`; we use `n_<name>@host:port`).
public struct NodeID: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ value: String) { self.rawValue = value }
    public var description: String { rawValue }
}

/// Document metadata kinds the server stores verbatim. Bit set of the wire's datatype byte.
public struct Datatype: OptionSet, Hashable, Sendable {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let json = Datatype(rawValue: 0x01)
    public static let snappy = Datatype(rawValue: 0x02)
    public static let xattr = Datatype(rawValue: 0x04)
    public static let raw: Datatype = []
}
