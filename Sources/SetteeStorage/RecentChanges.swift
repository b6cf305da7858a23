import SetteeCore

/// The latest seqnos a vBucket handed out, each with its key, oldest first: a change feed a little behind the
/// high seqno (a replica stream, an indexer, a gateway's feed) finds the keys that changed since its position here
/// instead of visiting every item of the vBucket (ADR 0077). kv_engine's checkpoint cursors play this part.
///
/// Invariant: every item of the table whose seqno is above `floor` has an entry with that seqno. So a feed at
/// `since >= floor` gets every changed key from the entries above `since`; an entry whose key has moved on to a
/// newer seqno is stale and skipped by the reader (the newer one has its own entry). What cannot be kept in
/// order or in the bounded ring raises `floor` instead, and a feed below it scans the whole table as before.
struct RecentChanges {
    struct Entry {
        var seqno: SeqNo
        var key: DocKey
    }

    /// Seqnos at or below this may have no entry.
    private(set) var floor: SeqNo = .zero
    /// A ring once `capacity` is reached: `start` is the oldest entry.
    private var ring: [Entry] = []
    private var start = 0
    let capacity: Int

    /// Most entries kept; 0 keeps none (every feed then scans, which tests use as the reference).
    init(capacity: Int = Limits.recentChangesPerVBucket) { self.capacity = max(0, capacity) }

    var count: Int { ring.count }

    /// The `i`th entry, oldest first.
    subscript(i: Int) -> Entry {
        let j = start + i
        return ring[j < ring.count ? j : j - ring.count]
    }

    /// Whether a feed at `since` can be answered from the entries.
    func covers(_ since: SeqNo) -> Bool { since >= floor }

    /// A seqno was just given to the version of `key` now in the table.
    mutating func record(_ seqno: SeqNo, _ key: DocKey) {
        guard seqno > floor else { return }
        if let last = ring.isEmpty ? nil : self[ring.count - 1], seqno <= last.seqno {
            // Out of order (not seen from the engine's writers, which count upwards): give up the entries.
            cover(through: last.seqno)
            return
        }
        if capacity == 0 {
            floor = seqno
            return
        }
        if ring.count < capacity {
            ring.append(Entry(seqno: seqno, key: key))
            return
        }
        floor = ring[start].seqno
        ring[start] = Entry(seqno: seqno, key: key)
        start = start + 1 == ring.count ? 0 : start + 1
    }

    /// Items up to `seqno` were put in the table without entries (warmup): feeds at or below it must scan.
    mutating func cover(through seqno: SeqNo) {
        guard seqno > floor else { return }
        floor = seqno
        guard !ring.isEmpty else { return }
        if self[ring.count - 1].seqno <= seqno {
            ring.removeAll(keepingCapacity: true)
            start = 0
            return
        }
        var kept: [Entry] = []
        kept.reserveCapacity(ring.count)
        for i in 0..<ring.count where self[i].seqno > seqno { kept.append(self[i]) }
        ring = kept
        start = 0
    }

    /// Index of the first entry above `since` (`count` when none).
    func firstIndex(after since: SeqNo) -> Int {
        var lo = 0
        var hi = ring.count
        while lo < hi {
            let mid = lo + (hi - lo) / 2
            if self[mid].seqno <= since { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }
}
