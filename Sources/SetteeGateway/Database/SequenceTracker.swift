/// Which gateway sequences have been seen, and the stable sequence: the highest one below which every
/// sequence is indexed or known unused. Feeds deliver only up to it, so a write that finishes after a
/// later-allocated one is never skipped by a client's `since`.
///
/// Invariants: 1. every sequence `< next` is seen or abandoned; 2. `pending` holds only sequences `> next`;
/// 3. `stable == next - 1`.
struct SequenceTracker: Sendable {
    /// The highest sequence tracked: a larger one (a sequence counter or document a KV client wrote) is not a
    /// sequence any gateway allocated. Past it `see` ignores a sequence and `skip` stops, so `next` never overflows
    /// (a `_sync:seq` of 2^64 - 1 trapped the gateway at open).
    static let maxSequence: UInt64 = 1 << 62

    private(set) var next: UInt64 = 1
    private var pending = Set<UInt64>()
    private(set) var maxSeen: UInt64 = 0

    var stable: UInt64 { next - 1 }
    /// A sequence is missing below a seen one.
    var hasGap: Bool { maxSeen >= next }

    /// Records `seq` as used (or unused); true when the stable sequence moved.
    @discardableResult
    mutating func see(_ seq: UInt64) -> Bool {
        if seq == 0 || seq < next || seq > Self.maxSequence { return false }
        maxSeen = max(maxSeen, seq)
        if seq != next {
            pending.insert(seq)
            return false
        }
        next += 1
        while pending.remove(next) != nil { next += 1 }
        return true
    }

    /// Treats every sequence up to `seq` as seen (at open: what was allocated before this gateway started).
    mutating func skip(through seq: UInt64) {
        let seq = min(seq, Self.maxSequence)
        guard seq >= next else { return }
        next = seq + 1
        maxSeen = max(maxSeen, seq)
        pending = pending.filter { $0 > seq }
        while pending.remove(next) != nil { next += 1 }
    }

    /// Abandons the first missing sequence (it waited too long); true when the stable sequence moved.
    @discardableResult
    mutating func abandonFirstGap() -> Bool {
        guard hasGap else { return false }
        next += 1
        while pending.remove(next) != nil { next += 1 }
        return true
    }
}
