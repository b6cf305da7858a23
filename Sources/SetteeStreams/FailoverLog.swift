import SetteeCore

/// One entry of a failover log: from `seqno` on, the vBucket's history is the one named `uuid`.
public struct FailoverEntry: Sendable, Hashable, CustomStringConvertible {
    public var uuid: VBucketUUID
    public var seqno: SeqNo
    public init(uuid: VBucketUUID, seqno: SeqNo) {
        self.uuid = uuid
        self.seqno = seqno
    }
    public var description: String { "(\(uuid), \(seqno))" }
}

/// The history of a vBucket as a list of branch points, newest first (DCP's failover log).
///
/// A new entry (a fresh random uuid at the current high seqno) is added whenever a copy becomes active with a
/// history that may differ from its predecessor's (failover promotion, unclean restart). A takeover during a
/// rebalance copies the source's log instead, because the history does not change.
///
/// Invariants (checked on every change):
/// 1. there is at least one entry;
/// 2. seqnos do not increase from newest to oldest (entries are in history order);
/// 3. at most `FailoverLog.maxEntries` (25) entries: the oldest fall off.
public struct FailoverLog: Sendable, Hashable, CustomStringConvertible {
    /// The cap on entries: `Limits.maxFailoverEntries`, the bound storage uses too.
    public static let maxEntries = Limits.maxFailoverEntries

    /// Entries, newest first.
    public private(set) var entries: [FailoverEntry]

    /// A log holding `entries` (newest first); the oldest beyond the cap are dropped.
    public init(entries: [FailoverEntry]) {
        precondition(!entries.isEmpty, "a failover log needs an entry")
        for (newer, older) in zip(entries, entries.dropFirst()) {
            precondition(newer.seqno >= older.seqno, "failover log out of order: \(entries)")
        }
        self.entries = Array(entries.prefix(Self.maxEntries))
    }

    /// A log a peer sent (newest first), checked rather than trusted: nil when it is empty, its seqnos
    /// increase from newest to oldest (invariants 1 and 2), or it names a history twice (each entry is a new
    /// history with a fresh uuid), so bytes off the wire never reach the preconditions of `init(entries:)` or,
    /// once adopted, of `add` at a promotion.
    public init?(validating entries: [FailoverEntry]) {
        guard !entries.isEmpty else { return nil }
        for (newer, older) in zip(entries, entries.dropFirst()) where newer.seqno < older.seqno { return nil }
        guard Set(entries.map(\.uuid)).count == entries.count else { return nil }
        self.init(entries: entries)
    }

    /// The log of a brand-new vBucket: one entry at seqno 0.
    public init(initialUUID: VBucketUUID) {
        self.init(entries: [FailoverEntry(uuid: initialUUID, seqno: .zero)])
    }

    /// The current history's entry.
    public var newest: FailoverEntry { entries[0] }

    /// Starts a new history at `seqno` (the vBucket's high seqno when it becomes active).
    public mutating func add(uuid: VBucketUUID, at seqno: SeqNo) {
        precondition(seqno >= newest.seqno, "new entry at \(seqno) behind newest \(newest)")
        entries.insert(FailoverEntry(uuid: uuid, seqno: seqno), at: 0)
        if entries.count > Self.maxEntries { entries.removeLast(entries.count - Self.maxEntries) }
    }

    /// After rolling the vBucket back to `seqno`, drops entries that begin after it: those histories are gone.
    /// The oldest entry always stays (a log is never empty); its seqno is lowered to `seqno` if needed.
    public mutating func rollBack(to seqno: SeqNo) {
        // The oldest by position, not by value: a log holding an entry twice kept both, stayed above `seqno`, and
        // the `add` after it trapped.
        let oldest = entries[entries.count - 1]
        entries = entries.dropLast().filter { $0.seqno <= seqno } + [oldest]
        if entries.count == 1 && entries[0].seqno > seqno { entries[0].seqno = seqno }
    }

    /// Where the history named `uuid` ends: the seqno at which the next newer entry branched off, or
    /// `highSeqno` when `uuid` is the current history. `nil` when `uuid` is not in the log.
    public func upperBound(of uuid: VBucketUUID, highSeqno: SeqNo) -> SeqNo? {
        guard let index = entries.firstIndex(where: { $0.uuid == uuid }) else { return nil }
        return index == 0 ? highSeqno : entries[index - 1].seqno
    }

    /// The uuid to name in a stream request resuming from `seqno`: the newest history that began at or before it.
    public func uuid(forResumeAt seqno: SeqNo) -> VBucketUUID {
        (entries.first { $0.seqno <= seqno } ?? entries[entries.count - 1]).uuid
    }

    public var description: String { entries.map(\.description).joined(separator: " ") }
}
