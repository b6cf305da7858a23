import SetteeCore

// The stamps a cluster config and a node's epoch promise carry, as stored in the cluster document and exchanged
// in heartbeats. What they decide (which config a node adopts, which epoch it promises) is `EpochRules`, in
// SetteeControl; see docs/adr/0023-cluster-brain-and-epochs.md.

/// The identity of a published cluster config: its revision and the member that published it (the owner of
/// `epoch`).
public struct ConfigStamp: Sendable, Hashable, CustomStringConvertible {
    public var epoch: Int64
    public var rev: Int64
    public var publisher: NodeID?

    public init(epoch: Int64, rev: Int64, publisher: NodeID?) {
        self.epoch = epoch
        self.rev = rev
        self.publisher = publisher
    }

    public var revision: MapRevision { MapRevision(epoch: epoch, rev: rev) }
    public var description: String { "\(epoch).\(rev)@\(publisher?.rawValue ?? "-")" }

    /// Whether the epoch and revision are within `Limits.maxClusterEpoch` / `maxConfigRevision` (and not negative):
    /// a stamp from a peer that is not is refused, never ordered, promised to or incremented.
    public var isWithinLimits: Bool { Self.isValidEpoch(epoch) && Self.isValidRevision(rev) }

    /// Whether `epoch` is one a node accepts: `0 ... Limits.maxClusterEpoch`.
    public static func isValidEpoch(_ epoch: Int64) -> Bool { (0...Limits.maxClusterEpoch).contains(epoch) }

    /// Whether `rev` is a config revision a node accepts: `0 ... Limits.maxConfigRevision`.
    public static func isValidRevision(_ rev: Int64) -> Bool { (0...Limits.maxConfigRevision).contains(rev) }
}

/// The highest epoch a node promised, and to whom: it never grants that epoch to another candidate, nor a lower
/// one to anybody, and never adopts a config from a lower epoch. Persisted with the node's metadata.
public struct EpochPromise: Sendable, Hashable, Codable {
    public var epoch: Int64
    public var candidate: NodeID

    public init(epoch: Int64, candidate: NodeID) {
        self.epoch = epoch
        self.candidate = candidate
    }
}
