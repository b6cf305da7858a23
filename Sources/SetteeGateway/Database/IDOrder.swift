import SetteeCore

/// The channel index's document ids in id order, kept as the index changes so `_all_docs` walks them instead of
/// gathering and sorting every id per request (ADR 0093). Pure value; `ChannelIndex` keeps it behind its mutex, and
/// nothing here that grows with the database runs there but a rebuild after mass forgetting: merges are done by
/// readers, outside the lock, and installed (`Snapshot`, `install`).
///
/// `sorted` is ascending (`String` order, as `_all_docs` answers) without repeats; `pending` holds the ids added since
/// the last merge installed, unsorted, in the order they came. An id the index forgot stays until a rebuild (`stale`
/// counts them), and an id forgotten and then added again may be in both: a reader checks each id against the index
/// as it builds its row (a forgotten one is skipped) and `Walk` never hands out an id twice.
///
/// Invariants: 1. `sorted` is ascending without repeats; 2. every id of the index is in `sorted` or `pending`;
/// 3. `generation` changes whenever `sorted` is replaced, and `pending` only grows at its end between replacements, so
/// a reader's copy of `pending` is a prefix of it for as long as the generation it copied holds; 4. `stale` is at
/// most `mergeFloor` or half the ids held, so forgotten ids never outnumber the live ones.
struct IDOrder: Sendable {
    /// Pending ids a reader leaves unmerged (and forgotten ids a rebuild waits for) however small the order is.
    static let mergeFloor = Limits.gatewayIDOrderMergeFloor

    private(set) var sorted: [String] = []
    private(set) var pending: [String] = []
    private(set) var generation: UInt64 = 0
    /// Ids held here that the index no longer has (an upper bound: an id added again is counted until a rebuild).
    private(set) var stale = 0

    /// The index gained `id` (it had no entry for it): O(1).
    mutating func added(_ id: String) {
        pending.append(id)
    }

    /// The index forgot an id; `live` answers whether the index still has an id, for the rebuild this may start (the
    /// one step here that walks every id, once forgotten ids outnumber the live ones: after mass purges).
    mutating func removed(live: (String) -> Bool) {
        stale += 1
        guard stale > Self.mergeFloor, stale > (sorted.count + pending.count) / 2 else { return }
        sorted = Self.merged(sorted.filter(live)[...], pending.filter(live).sorted()[...])
        pending = []
        stale = 0
        generation &+= 1
    }

    /// A reader's copy (under the index's lock: two array references and a number).
    var snapshot: Snapshot { Snapshot(sorted: sorted, pending: pending, generation: generation) }

    /// Puts a reader's merge in place: `merged` is `snapshot.sorted` with the first `snapshot.pending.count` pending ids
    /// merged in. Refused (nil) when `sorted` was replaced since the snapshot (another merge or a rebuild came first);
    /// the ids added since the snapshot stay pending. O(ids added since the snapshot): what it replaced is handed back
    /// for the caller to let go of after the index's lock (releasing a million ids under it took ~50 ms).
    @discardableResult
    mutating func install(_ merged: [String], for snapshot: Snapshot) -> Replaced? {
        guard snapshot.generation == generation, snapshot.pending.count <= pending.count else { return nil }
        let replaced = Replaced(sorted: sorted, pending: pending)
        // Each id the merge held twice was forgotten (and counted) in between: one copy is gone now.
        let repeats = snapshot.sorted.count + snapshot.pending.count - merged.count
        stale = max(0, stale - repeats)
        sorted = merged
        pending = Array(pending[snapshot.pending.count...])
        generation &+= 1
        return replaced
    }

    /// The arrays an `install` replaced, to be released outside the index's lock.
    struct Replaced: Sendable {
        let sorted: [String]
        let pending: [String]
    }

    /// What a reader copied: sorted and merged outside the index's lock (`walk`), and merged for the order itself when
    /// enough is pending (`merge`).
    struct Snapshot: Sendable {
        let sorted: [String]
        let pending: [String]
        let generation: UInt64

        /// Whether the pending ids are worth a merge: more than `mergeFloor` and an eighth of the sorted ones, so a
        /// merge of n ids happens at most once per n/8 new ones and a reader sorts at most that many otherwise.
        var wantsMerge: Bool { pending.count > max(IDOrder.mergeFloor, sorted.count / 8) }

        /// The sorted run with the pending ids merged in (for `IDOrder.install`).
        func merge() -> [String] { IDOrder.merged(sorted[...], pending.sorted()[...]) }
    }

    /// Two ascending runs as one, each id once.
    static func merged(_ a: ArraySlice<String>, _ b: ArraySlice<String>) -> [String] {
        var out: [String] = []
        out.reserveCapacity(a.count + b.count)
        var walk = Walk(a: a, b: b)
        while let id = walk.next() { out.append(id) }
        return out
    }

    /// A reader's copy of the order (`Snapshot`), walked outside the index's lock: the pending ids are sorted when the
    /// walk is made, then both runs are merged as the walk goes, each id once.
    struct Walk: Sendable {
        private var a: ArraySlice<String>
        private var b: ArraySlice<String>
        private var last: String?

        /// The copied order's ids from `from` (the first at or after it) through `through` (the last at or before it).
        init(_ order: Snapshot, from: String? = nil, through: String? = nil) {
            self.init(a: order.sorted[...], b: order.pending.sorted()[...])
            if let from {
                a = a[a.partitioningIndex { $0 >= from }...]
                b = b[b.partitioningIndex { $0 >= from }...]
            }
            if let through {
                a = a[..<a.partitioningIndex { $0 > through }]
                b = b[..<b.partitioningIndex { $0 > through }]
            }
        }

        /// Two ascending runs (each may repeat an id of the other, not its own).
        init(a: ArraySlice<String>, b: ArraySlice<String>) {
            self.a = a
            self.b = b
        }

        /// No id is left.
        var isEmpty: Bool { a.isEmpty && b.isEmpty }

        /// The next id in order, nil at the end.
        mutating func next() -> String? {
            while true {
                let id: String
                if let x = a.first, let y = b.first {
                    if x <= y {
                        id = x
                        a = a.dropFirst()
                    } else {
                        id = y
                        b = b.dropFirst()
                    }
                } else if let x = a.first {
                    id = x
                    a = a.dropFirst()
                } else if let y = b.first {
                    id = y
                    b = b.dropFirst()
                } else {
                    return nil
                }
                if id == last { continue }
                last = id
                return id
            }
        }

        /// Up to `count` next ids in order.
        mutating func next(_ count: Int) -> [String] {
            var out: [String] = []
            out.reserveCapacity(min(count, 4_096))
            while out.count < count, let id = next() { out.append(id) }
            return out
        }
    }
}
