import CPrefetch

/// A vBucket's items by key: open addressing with linear probing, one 8-byte reference per slot plus a one-byte
/// tag (ADR 0048).
///
/// Why not `Dictionary<DocKey, Item>`: its buckets are a power of two at a load of at most 3/4, so ~977 items
/// (1,000,000 over 1,024 vBuckets) sat in 2,048 buckets of 88 bytes (a 40-byte inline key and a 48-byte item):
/// ~184 bytes per item. Here the key and metadata live in the item's own allocation (`ItemBox`), and the table
/// is sized to its count (any capacity, not a power of two: `home` maps the hash by multiply-high), between
/// `minLoad` and `maxLoad`: 9 bytes per slot, 10.6–13.8 bytes per item.
///
/// Invariants:
/// 1. `tags[i] == 0` ⇔ `slots[i] == nil`; `count` is the number of non-nil slots; `count <= maxLoad * capacity`.
/// 2. An item sits at its key's home slot or after it, with no empty slot between (linear probing; removal
///    shifts later items back instead of leaving tombstones).
/// 3. `tags[i]` is `tag(hash)` of the key at `i` (never 0), so most probes compare one byte, not the key.
/// 4. `tags.count == slots.count == slotCount`.
struct ItemTable {
    /// Grow when an insert would pass this load (linear probing with byte tags stays short up to here).
    static let maxLoad = 0.85
    /// A resized table starts at this load, so an item costs at most 9 / minLoad bytes of table.
    static let minLoad = 0.65
    static let minimumCapacity = 8

    private var tags: [UInt8] = []
    private var slots: [Item?] = []
    /// `slots.count` (and `tags.count`), kept beside the arrays: a read finds its slot and borrows the item without
    /// touching either array's header, which sits on a cache line of its own in all but the smallest tables (a
    /// dependent miss on every GET before the probe could start, ADR 0089).
    private var slotCount = 0
    private(set) var count = 0

    init() {}

    var isEmpty: Bool { count == 0 }
    var capacity: Int { slotCount }

    @inline(__always)
    private static func tag(_ hash: Int) -> UInt8 { UInt8(truncatingIfNeeded: hash) | 0x80 }

    @inline(__always)
    private func home(_ hash: Int, capacity: Int) -> Int {
        Int(truncatingIfNeeded: UInt64(UInt(bitPattern: hash)).multipliedFullWidth(by: UInt64(capacity)).high)
    }

    /// The slot holding `key`, found with `hash` (`key.hashValue`).
    @inline(__always)
    private func find(_ key: DocKey, hash: Int) -> Int? {
        let n = slotCount
        guard n > 0 else { return nil }
        let t = Self.tag(hash)
        var i = home(hash, capacity: n)
        // Both arrays hold `n` elements (invariant 4): `i` stays in 0 ..< n, so the unchecked reads are in bounds.
        return tags.withUnsafeBufferPointer { tags in
            slots.withUnsafeBufferPointer { slots in
                while true {
                    let here = tags[i]
                    if here == 0 { return nil }
                    if here == t, let item = slots[i], item.box.hasKey(key) { return i }
                    i += 1
                    if i == n { i = 0 }
                }
            }
        }
    }

    /// Starts loading the two cache lines a look-up of the key with `hash` reads first, its home tag byte and slot
    /// (stage 2 of `BucketEngine.warm`, ADR 0114). Reads only `slotCount` and the arrays' addresses.
    @inline(__always)
    func prefetchHome(hash: Int) {
        let n = slotCount
        guard n > 0 else { return }
        let i = home(hash, capacity: n)
        tags.withUnsafeBufferPointer { if let base = $0.baseAddress { settee_prefetch(base + i) } }
        slots.withUnsafeBufferPointer { if let base = $0.baseAddress { settee_prefetch(base + i) } }
    }

    /// Starts loading the item boxes whose tag matches `hash` along its probe run, without comparing a key (the
    /// comparison would wait for the box): stage 3 of `BucketEngine.warm`, once `prefetchHome` brought the run's
    /// tags and slots in. Looks at `warmProbeLimit` slots at most; a hint, so a longer run is left to the look-up.
    @inline(__always)
    func prefetchItems(hash: Int) {
        let n = slotCount
        guard n > 0, MemoryLayout<Item?>.size == MemoryLayout<UInt>.size else { return }
        let t = Self.tag(hash)
        var i = home(hash, capacity: n)
        tags.withUnsafeBufferPointer { tags in
            slots.withUnsafeBufferPointer { slots in
                guard let slotBase = slots.baseAddress else { return }
                let raw = UnsafeRawPointer(slotBase)
                for _ in 0..<Self.warmProbeLimit {
                    let here = tags[i]
                    if here == 0 { return }
                    // The slot's reference as an address (an `Item?` is one pointer, nil as zero): no retain.
                    if here == t,
                        let box = UnsafeRawPointer(
                            bitPattern: raw.load(fromByteOffset: i &* MemoryLayout<UInt>.stride, as: UInt.self))
                    {
                        settee_prefetch(box)
                        settee_prefetch(box + 64)
                    }
                    i += 1
                    if i == n { i = 0 }
                }
            }
        }
    }

    /// Slots `prefetchItems` looks at: runs are short below `maxLoad` with one-byte tags.
    static let warmProbeLimit = 4

    /// Where `key` is (valid until an item is inserted or removed), nil when absent.
    @inline(__always)
    func index(forKey key: DocKey) -> Int? { find(key, hash: key.hashValue) }

    /// The item at an index from `index(forKey:)` or iteration, changed in place (its box is not copied).
    subscript(at i: Int) -> Item {
        get { borrow(i) { $0 } }
        _modify {
            // Moved out of the slot (not copied): a copy would hold a second reference for the duration of the
            // access, and every change through it would copy the box (`Item.update`), in debug builds at least.
            guard var taken = slots[i].take() else {
                preconditionFailure("ItemTable: no item at \(i) of \(slots.count)")
            }
            defer { slots[i] = taken }
            yield &taken
        }
    }

    /// The key of the item at index `i`.
    func key(at i: Int) -> DocKey { self[at: i].docKey }

    /// `Item.readiness` of the item at `i`, read where it lies: only an item not yet marked referenced goes through
    /// the in-place change (`subscript(at:)`'s `_modify`, whose uniqueness check reads the slot array's header). The
    /// item pager clears the mark, so after a pager pass the first read of each item takes that path once.
    @inline(__always)
    mutating func readiness(at i: Int, nowSeconds: UInt32) -> Item.Readiness {
        let unchanged = borrow(i) { $0.readinessUnchanged(nowSeconds: nowSeconds) }
        return unchanged ?? self[at: i].readiness(nowSeconds: nowSeconds)
    }

    /// `Item.withValue` of the item at `i`, borrowed where it lies (no header read, no copy of the item).
    @inline(__always)
    func withValue<R>(at i: Int, _ body: (UnsafeRawBufferPointer, ItemMetadata) -> R) -> R {
        borrow(i) { $0.withValue(body) }
    }

    /// The item at `i`, handed to `body` where it lies: the index is checked against `slotCount`, not against the
    /// array's header (ADR 0089); an empty slot traps, as the in-place change does. Every index comes from this table
    /// (`index(forKey:)`, a `Slot`, or `0 ..< capacity` with `isOccupied`) under the vBucket's lock with no insert or
    /// removal since, never from a request's bytes.
    @inline(__always)
    private func borrow<R>(_ i: Int, _ body: (Item) -> R) -> R {
        precondition(i >= 0 && i < slotCount, "ItemTable: index \(i) of \(slotCount)")
        return slots.withUnsafeBufferPointer { slots in
            guard let item = slots[i] else { preconditionFailure("ItemTable: no item at \(i) of \(slotCount)") }
            return body(item)
        }
    }

    /// Get, insert, replace or remove by key. An item stored must have `key` as its key.
    subscript(key: DocKey) -> Item? {
        get { index(forKey: key).map { self[at: $0] } }
        set {
            let hash = key.hashValue
            if let i = find(key, hash: hash) {
                if let newValue { slots[i] = newValue } else { remove(at: i) }
            } else if let newValue {
                insertNew(newValue, hash: hash)
            }
        }
    }

    /// Puts an item whose key is not in the table yet.
    mutating func insertNew(_ item: Item, key: DocKey) { insertNew(item, hash: key.hashValue) }

    private mutating func insertNew(_ item: Item, hash: Int) {
        if Double(count + 1) > Self.maxLoad * Double(slots.count) {
            resize(to: Swift.max(Self.minimumCapacity, Int((Double(count + 1) / Self.minLoad).rounded(.up))))
        }
        place(item, hash: hash)
        count += 1
    }

    /// Stores `item` at the first free slot from its home (the table has room, the key is absent).
    private mutating func place(_ item: consuming Item, hash: Int) {
        let n = slots.count
        var i = home(hash, capacity: n)
        while tags[i] != 0 {
            i += 1
            if i == n { i = 0 }
        }
        tags[i] = Self.tag(hash)
        slots[i] = item
    }

    private mutating func resize(to newCapacity: Int) {
        var old: [Item?] = []
        swap(&old, &slots)
        // The keys first, in one pass over the boxes: its loads do not depend on each other, so the CPU overlaps
        // their cache misses. Hashing each key as it was read waited for one miss at a time: 95 % of a resize's
        // samples sat on the load of the box's header (release, perf, 1,000,000-item load).
        let keys = old.map { $0?.docKey }
        tags = [UInt8](repeating: 0, count: newCapacity)
        slots = [Item?](repeating: nil, count: newCapacity)
        slotCount = newCapacity
        // Each item is moved to its new slot, not copied (no reference-count traffic per item).
        for j in old.indices {
            guard let item = old[j].take(), let key = keys[j] else { continue }
            place(item, hash: key.hashValue)
        }
    }

    /// Removes the item at `i`, moving later items of its probe run back (invariant 2, no tombstones).
    private mutating func remove(at i: Int) {
        let n = slots.count
        var hole = i
        tags[hole] = 0
        slots[hole] = nil
        count -= 1
        var j = i
        while true {
            j += 1
            if j == n { j = 0 }
            guard tags[j] != 0, let item = slots[j] else { break }
            let h = home(item.docKey.hashValue, capacity: n)
            // The item at j may fill the hole when its home is not cyclically within (hole, j].
            let movable = hole <= j ? (h <= hole || h > j) : (h <= hole && h > j)
            if movable {
                tags[hole] = tags[j]
                slots[hole] = item
                tags[j] = 0
                slots[j] = nil
                hole = j
            }
        }
        if count == 0 {
            tags = []
            slots = []
            slotCount = 0
        }
    }

    /// Gives slots back after many removals (a tombstone purge, ADR 0095): when fewer than a quarter of `minLoad`'s
    /// share of the slots are used, the table is rebuilt at `minLoad`. Removal itself never shrinks (a table that
    /// empties and fills again would resize each time); only a caller that removed many items at once asks.
    mutating func shrinkIfSparse() {
        guard count > 0, slotCount > Self.minimumCapacity,
            Double(count) < Double(slotCount) * Self.minLoad / 4
        else { return }
        resize(to: Swift.max(Self.minimumCapacity, Int((Double(count) / Self.minLoad).rounded(.up))))
    }

    /// Whether slot `i` (0 ..< `capacity`) holds an item: a scan visits every item this way, changing it in place.
    @inline(__always)
    func isOccupied(_ i: Int) -> Bool { tags[i] != 0 }
}

extension ItemTable: Sequence {
    struct Iterator: IteratorProtocol {
        fileprivate let slots: [Item?]
        fileprivate var i = 0

        mutating func next() -> (key: DocKey, value: Item)? {
            while i < slots.count {
                defer { i += 1 }
                if let item = slots[i] { return (item.docKey, item) }
            }
            return nil
        }
    }

    /// Each (key, item) in table order; the iterator holds its own copy of the slots.
    func makeIterator() -> Iterator { Iterator(slots: slots) }

    var underestimatedCount: Int { count }
}
