import Synchronization

/// A count of bytes that one request holds at a time, against a bound, shared by everything the request runs
/// concurrently (a view query's peers, a `_bulk_get`'s overlapping reads, an `open_revs`' leaves). Counting is
/// atomic, so concurrent readers cannot each pass a bound that only their sum breaks.
///
/// Counts only grow but for `release`; an exceeded budget stays exceeded.
public final class ByteBudget: Sendable {
    public let limit: Int
    private let held = Atomic<Int>(0)

    /// `limit` comes from `Limits` or a configuration; a negative one counts as 0 (every request that holds anything
    /// fails), not a trap.
    public init(limit: Int) {
        self.limit = max(0, limit)
    }

    /// Bytes counted now.
    public var heldBytes: Int { held.load(ordering: .relaxed) }

    /// Bytes that may still be counted before the bound (0 once it is passed).
    public var remaining: Int { max(0, limit &- heldBytes) }

    /// Whether more than `limit` bytes are counted.
    public var isExceeded: Bool { heldBytes > limit }

    /// Counts `bytes` as held; false when the total is now past the bound (they stay counted).
    public func admit(_ bytes: Int) -> Bool {
        held.wrappingAdd(bytes, ordering: .relaxed).newValue <= limit
    }

    /// Stops counting `bytes` that are no longer held.
    public func release(_ bytes: Int) {
        held.wrappingSubtract(bytes, ordering: .relaxed)
    }
}
