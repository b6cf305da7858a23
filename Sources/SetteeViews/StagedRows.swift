import SetteeStorage

#if canImport(Glibc)
    import Glibc
#endif

/// The rows one index transaction inserts, gathered from its mapped batches and handed to SQLite in the view
/// B-tree's own order `(view, sk, doc, n)`.
///
/// A write group holds up to `Limits.viewIndexTransactionChanges` changes of several vBuckets, and their rows
/// arrive in vBucket order: random positions in the view B-tree, each insert descending to a different leaf.
/// Inserted in key order, consecutive inserts land on the same or the next leaf (an empty index is built
/// append-only, with full pages). The order of inserts inside one transaction changes nothing else: the
/// transaction commits as a whole.
///
/// Invariants:
/// 1. A document staged again in the same group (it changed while the pass ran, so it comes in two batches of
///    its vBucket) supersedes its earlier rows: only the latest staging's rows are inserted and counted. Its
///    old rows in the index are removed by the caller before staging, as for any change; the earlier
///    staging's rows never reached SQLite, so the second removal finds nothing and that is right. Within one
///    batch a document comes once (the change feed reports each key's latest version once), so documents are
///    looked up only in a vBucket's second and later batches of the group (`seen` is built then).
/// 2. `counts` holds, per vBucket and view, the rows `ordered()` returns: what the transaction adds to totals.
/// 3. Every range in a `Row` points into `arena`.
struct StagedRows {
    /// One row to insert; ranges point into `arena`.
    struct Row {
        var view: Int
        var vb: Int
        /// Emission number within its document (view by view, each view's in emission order).
        var n: Int
        /// The first 8 bytes of the sort key, big-endian, zero-padded: most comparisons end here.
        var prefix: UInt64
        var sortKey: Range<Int>
        var doc: Range<Int>
        var key: Range<Int>
        var value: Range<Int>
        var number: Double?
        /// Superseded by a later staging of the same document (invariant 1).
        var dead = false
    }

    private(set) var arena: [UInt8] = []
    private(set) var rows: [Row] = []
    /// vBucket → view → rows staged and alive (invariant 2).
    private(set) var counts: [Int: [Int: Int]] = [:]
    /// The rows each staged batch added, by vBucket.
    private var batches: [Int: [Range<Int>]] = [:]
    /// vBucket → document → its live rows, only for vBuckets with two or more batches in the group.
    private var seen: [Int: [[UInt8]: [Int]]] = [:]

    /// Stages one batch of `vb`'s changes: record `i` (its key) gets rows `mapped.rows[mapped.ranges[i]]` (none
    /// for a deletion or a document no view emitted for).
    mutating func stage(vb: Int, records: [ChangeRecord], mapped: MappedDocuments) {
        let earlier = batches[vb] ?? []
        if !earlier.isEmpty && seen[vb] == nil {
            var index: [[UInt8]: [Int]] = [:]
            for range in earlier {
                for i in range where !rows[i].dead { index[Array(arena[rows[i].doc]), default: []].append(i) }
            }
            seen[vb] = index
        }
        let tracked = seen[vb] != nil
        var added: [Int] = []
        let first = rows.count
        for (i, record) in records.enumerated() {
            if tracked, let old = seen[vb]?.removeValue(forKey: record.key) {
                for r in old where !rows[r].dead {
                    rows[r].dead = true
                    counts[vb, default: [:]][rows[r].view, default: 0] -= 1
                }
            }
            let docRows = mapped.rows[mapped.ranges[i]]
            guard !docRows.isEmpty else { continue }
            let docStart = arena.count
            arena.append(contentsOf: record.key)
            let docRange = docStart..<arena.count
            let start = rows.count
            for (n, m) in docRows.enumerated() {
                let s = arena.count
                arena.append(contentsOf: mapped.bytes[m.sortKey])
                let k = arena.count
                arena.append(contentsOf: mapped.bytes[m.key])
                let v = arena.count
                arena.append(contentsOf: mapped.bytes[m.value])
                rows.append(
                    Row(
                        view: m.view, vb: vb, n: n, prefix: Self.prefix(mapped.bytes[m.sortKey]), sortKey: s..<k,
                        doc: docRange, key: k..<v, value: v..<arena.count, number: m.number))
                if m.view >= added.count { added += repeatElement(0, count: m.view + 1 - added.count) }
                added[m.view] += 1
            }
            if tracked { seen[vb]?[record.key] = Array(start..<rows.count) }
        }
        batches[vb, default: []].append(first..<rows.count)
        for (view, count) in added.enumerated() where count != 0 { counts[vb, default: [:]][view, default: 0] += count }
    }

    /// The live rows' indexes in `rows`, in `(view, sk, doc, n)` order: SQLite's order of the view table's
    /// primary key (BLOBs by memcmp, a prefix first).
    func ordered() -> [Int] {
        var order = rows.indices.filter { !rows[$0].dead }
        rows.withUnsafeBufferPointer { rows in
            arena.withUnsafeBytes { arena in
                order.sort { a, b in Self.less(rows[a], rows[b], arena) }
            }
        }
        return order
    }

    private static func less(_ a: Row, _ b: Row, _ arena: UnsafeRawBufferPointer) -> Bool {
        if a.view != b.view { return a.view < b.view }
        if a.prefix != b.prefix { return a.prefix < b.prefix }
        let sk = compare(a.sortKey, b.sortKey, arena)
        if sk != 0 { return sk < 0 }
        let doc = compare(a.doc, b.doc, arena)
        if doc != 0 { return doc < 0 }
        return a.n < b.n
    }

    /// memcmp order, the shorter of two equal prefixes first (how SQLite compares BLOBs).
    static func compare(_ a: Range<Int>, _ b: Range<Int>, _ arena: UnsafeRawBufferPointer) -> Int {
        let n = min(a.count, b.count)
        if n > 0, let base = arena.baseAddress {
            let c = memcmp(base + a.lowerBound, base + b.lowerBound, n)
            if c != 0 { return Int(c) }
        }
        return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
    }

    static func prefix(_ bytes: ArraySlice<UInt8>) -> UInt64 {
        var p: UInt64 = 0
        var shift: UInt64 = 56
        for b in bytes.prefix(8) {
            p |= UInt64(b) << shift
            shift &-= 8
        }
        return p
    }
}
