import SetteeCore

/// The channel index's document ids in id order, kept as the index changes so `_all_docs` walks them instead of
/// gathering and sorting every id per request (ADR 0093). Pure value; `ChannelIndex` keeps it behind its mutex.
///
/// `sorted` is ascending (`String` order, as `_all_docs` answers) without repeats; `pending` holds the ids added since
/// the last merge, unsorted. An id the index forgot stays until a rebuild (`stale` counts them), and an id forgotten
/// and then added again may be in both: a reader checks each id against the index as it builds its row (a forgotten
/// one is skipped) and `Walk` never hands out an id twice.
///
/// Invariants: 1. `sorted` is ascending without repeats; 2. every id of the index is in `sorted` or `pending`;
/// 3. after every call `pending.count <= max(mergeFloor, sorted.count / 8)`, so a reader sorts at most that many and a
/// new id costs O(1) amortized (a merge of n ids every n/8 additions); 4. `stale` is at most `mergeFloor` or half the
/// ids held, so forgotten ids never outnumber the live ones.
struct IDOrder: Sendable {
    /// Pending ids a merge waits for (and forgotten ids a rebuild waits for) however small the order is.
    static let mergeFloor = Limits.gatewayIDOrderMergeFloor

    private(set) var sorted: [String] = []
    private(set) var pending: [String] = []
    /// Ids held here that the index no longer has (an upper bound: an id added again is counted until a rebuild).
    private(set) var stale = 0

    /// The index gained `id` (it had no entry for it).
    mutating func added(_ id: String) {
        pending.append(id)
        if pending.count > max(Self.mergeFloor, sorted.count / 8) {
            sorted = Self.merged(sorted[...], pending.sorted()[...])
            pending = []
        }
    }

    /// The index forgot an id; `live` answers whether the index still has an id, for the rebuild this may start.
    mutating func removed(live: (String) -> Bool) {
        stale += 1
        guard stale > Self.mergeFloor, stale > (sorted.count + pending.count) / 2 else { return }
        sorted = Self.merged(sorted.filter(live)[...], pending.filter(live).sorted()[...])
        pending = []
        stale = 0
    }

    /// Two ascending runs as one, each id once.
    static func merged(_ a: ArraySlice<String>, _ b: ArraySlice<String>) -> [String] {
        var out: [String] = []
        out.reserveCapacity(a.count + b.count)
        var walk = Walk(a: a, b: b)
        while let id = walk.next() { out.append(id) }
        return out
    }

    /// A reader's copy of the order (taken under the index's lock: two array references), walked outside it: the
    /// pending ids are sorted when the walk is made, then both runs are merged as the walk goes, each id once.
    struct Walk: Sendable {
        private var a: ArraySlice<String>
        private var b: ArraySlice<String>
        private var last: String?

        /// The order's ids from `from` (the first at or after it) through `through` (the last at or before it).
        init(_ order: IDOrder, from: String? = nil, through: String? = nil) {
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
