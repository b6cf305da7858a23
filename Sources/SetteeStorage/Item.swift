import SetteeCore

/// One document as a vBucket's hash table holds it: key, metadata and value in one allocation (`ItemBox`,
/// ADR 0048), with value semantics (copy-on-write: a copy taken out of the table, e.g. a prepare's committed
/// version, never sees later changes made in the table).
///
/// Invariants (checked where items change):
/// 1. `dirty` ⇒ `hasValue` (a dirty item is never evicted: the flusher needs its value).
/// 2. `deleted` ⇒ `hasValue` and `!corrupt`: a tombstone keeps key + metadata, and as its value only the
///    system XATTR section it kept (datatype `.xattr`), else `[]` (ADR 0029). Tombstones are never evicted.
/// 3. `queued` ⇒ `dirty` (a key is in the vBucket's dirty queue at most once: dedup at enqueue).
/// 4. `!hasValue` ⇔ the value is evicted; only clean (`!dirty`) live items are evicted.
///
/// `@unchecked Sendable`: the box is changed only through `update`/`value`, which copy it unless this item holds
/// its only reference (what `Array` does with its buffer), so no two threads ever see one box change.
struct Item: @unchecked Sendable {
    private(set) var box: ItemBox

    init(
        key: [UInt8], value: [UInt8]?, cas: CAS, revSeqno: RevSeqNo, bySeqno: SeqNo, flags: UInt32, expiry: UInt32,
        datatype: Datatype, deleted: Bool, dirty: Bool, queued: Bool, referenced: Bool, corrupt: Bool
    ) {
        let make = { (v: UnsafeRawBufferPointer?) in
            Item(
                key: key, valueBytes: v, cas: cas, revSeqno: revSeqno, bySeqno: bySeqno, flags: flags, expiry: expiry,
                datatype: datatype, deleted: deleted, dirty: dirty, queued: queued, referenced: referenced,
                corrupt: corrupt)
        }
        self = value.map { $0.withUnsafeBytes { make($0) } } ?? make(nil)
    }

    /// An item whose value is copied from `valueBytes` (nil: evicted) straight into its box: one allocation and
    /// one copy, whatever holds the bytes (a client SET passes the request frame's bytes in place). The bytes
    /// are only read during the call; nothing keeps a reference to them.
    init(
        key: [UInt8], valueBytes value: UnsafeRawBufferPointer?, cas: CAS, revSeqno: RevSeqNo, bySeqno: SeqNo,
        flags: UInt32, expiry: UInt32, datatype: Datatype, deleted: Bool, dirty: Bool, queued: Bool, referenced: Bool,
        corrupt: Bool
    ) {
        var bits: UInt8 = 0
        if deleted { bits |= ItemBits.deleted }
        if dirty { bits |= ItemBits.dirty }
        if queued { bits |= ItemBits.queued }
        if referenced { bits |= ItemBits.referenced }
        if corrupt { bits |= ItemBits.corrupt }
        let header = ItemHeader(
            cas: cas, bySeqno: bySeqno, revSeqno: revSeqno, flags: flags, expiry: expiry, valueCount: 0, keyCount: 0,
            datatype: datatype, bits: bits)
        box = key.withUnsafeBytes { ItemBox.make(header: header, key: $0, value: value) }
    }

    @inline(__always)
    private var header: ItemHeader { box.fields }

    /// Changes the header of this item only: the box is copied first when another `Item` shares it.
    @inline(__always)
    private mutating func update(_ body: (inout ItemHeader) -> Void) {
        if !isKnownUniquelyReferenced(&box) { box = box.copy() }
        body(&box.header)
    }

    @inline(__always)
    private func bit(_ b: UInt8) -> Bool { header.bits & b != 0 }

    @inline(__always)
    private mutating func set(_ b: UInt8, _ on: Bool) {
        guard bit(b) != on else { return }
        update { if on { $0.bits |= b } else { $0.bits &= ~b } }
    }

    var cas: CAS {
        get { header.cas }
        set { update { $0.cas = newValue } }
    }
    var revSeqno: RevSeqNo {
        get { header.revSeqno }
        set { update { $0.revSeqno = newValue } }
    }
    var bySeqno: SeqNo {
        get { header.bySeqno }
        set { update { $0.bySeqno = newValue } }
    }
    var flags: UInt32 {
        get { header.flags }
        set { update { $0.flags = newValue } }
    }
    /// Absolute Unix seconds, 0 = never.
    var expiry: UInt32 {
        get { header.expiry }
        set { update { $0.expiry = newValue } }
    }
    var datatype: Datatype {
        get { header.datatype }
        set { update { $0.datatype = newValue } }
    }
    var deleted: Bool {
        get { bit(ItemBits.deleted) }
        set { set(ItemBits.deleted, newValue) }
    }
    /// Has a version not yet committed by the flusher.
    var dirty: Bool {
        get { bit(ItemBits.dirty) }
        set { set(ItemBits.dirty, newValue) }
    }
    /// Its key sits in the vBucket's dirty queue (waiting for the flusher to take it).
    var queued: Bool {
        get { bit(ItemBits.queued) }
        set { set(ItemBits.queued, newValue) }
    }
    /// Recently read or written; the item pager skips it once and clears the bit (clock / NRU).
    var referenced: Bool {
        get { bit(ItemBits.referenced) }
        set { set(ItemBits.referenced, newValue) }
    }
    /// The last background fetch found its stored value failing its checksum.
    var corrupt: Bool {
        get { bit(ItemBits.corrupt) }
        set { set(ItemBits.corrupt, newValue) }
    }

    /// The value is in memory (false: evicted). Reads no value bytes.
    var hasValue: Bool { bit(ItemBits.resident) }
    /// Bytes of the resident value (0 when evicted).
    var valueCount: Int { Int(header.valueCount) }

    /// The document body, nil when evicted (valueOnly eviction keeps key + metadata resident). Reading it copies
    /// the bytes out of the item; setting it builds the item's allocation again.
    var value: [UInt8]? {
        get {
            guard hasValue else { return nil }
            return box.withValueBytes { Array($0) }
        }
        set {
            if let newValue {
                box = newValue.withUnsafeBytes { box.with(value: $0) }
            } else {
                box = box.with(value: nil)
            }
        }
    }

    /// The key's bytes (a copy).
    var key: [UInt8] { box.withKeyBytes { Array($0) } }
    /// The key as the table hashes it.
    var docKey: DocKey { box.withKeyBytes { DocKey($0) } }

    var meta: ItemMetadata {
        let h = header
        return ItemMetadata(
            cas: h.cas, revSeqno: h.revSeqno, bySeqno: h.bySeqno, flags: h.flags, expiry: h.expiry,
            datatype: h.datatype, deleted: h.bits & ItemBits.deleted != 0)
    }

    enum Readiness { case ready, absent, expired, evicted, corrupt }

    /// Whether a read can be served from memory now; marks the item referenced (for the item pager) when
    /// it can. Called in place in the hash table (`items[at: i]`), so the item's box is not copied.
    @inline(__always)
    mutating func readiness(nowSeconds: UInt32) -> Readiness {
        if let r = readinessUnchanged(nowSeconds: nowSeconds) { return r }
        set(ItemBits.referenced, true)
        return .ready
    }

    /// `readiness` when it leaves the item as it is; nil when it would mark the item referenced (a ready item the
    /// pager has not seen read since it last cleared the mark).
    @inline(__always)
    func readinessUnchanged(nowSeconds: UInt32) -> Readiness? {
        let h = header
        if h.bits & ItemBits.deleted != 0 { return .absent }
        if Expiry.isExpired(h.expiry, nowSeconds: nowSeconds) { return .expired }
        if h.bits & ItemBits.corrupt != 0 { return .corrupt }
        if h.bits & ItemBits.resident == 0 { return .evicted }
        return h.bits & ItemBits.referenced == 0 ? nil : .ready
    }

    /// The value's bytes and metadata, borrowed from the item's allocation (the item must be `.ready`).
    @inline(__always)
    func withValue<R>(_ body: (UnsafeRawBufferPointer, ItemMetadata) -> R) -> R {
        let meta = meta
        return box.withValueBytes { body($0, meta) }
    }

    /// Estimated bytes this item costs in RAM with key length `keyLength`.
    @inline(__always)
    func memoryFootprint(keyLength: Int) -> Int {
        MemoryAccounting.itemBytes(keyLength: keyLength, valueLength: valueCount)
    }
}

/// What the flusher writes for one key: the latest version, taken under the vBucket lock. `item` shares the
/// table's box (no copy: the flusher reads key and value bytes in place, and a shared box is never changed);
/// `meta` is the item's metadata as stored (prepare bit).
struct FlushEntry {
    var vb: UInt16
    var key: DocKey
    var item: Item
    var meta: ItemMetadata
}

/// A document key as the hash tables store it.
///
/// Keys of up to 24 bytes (most real keys: `user::1234`, `bench::65535`) live inline in three words, so a
/// hash-table probe compares words in the table's own key array instead of following a pointer to an
/// array buffer (a cache miss per probe: it was the largest single cost of a GET in `perf`). Longer keys
/// keep their first 24 bytes inline too (a cheap first comparison) and the whole key in `long`.
struct DocKey: Hashable {
    static let inlineCapacity = 24
    private var w0: UInt64 = 0
    private var w1: UInt64 = 0
    private var w2: UInt64 = 0
    let count: Int
    /// The whole key when it is longer than `inlineCapacity`, else nil.
    private let long: [UInt8]?

    @inline(__always)
    init(_ bytes: [UInt8]) {
        let long = bytes.count > Self.inlineCapacity ? bytes : nil
        self = bytes.withUnsafeBytes { DocKey(raw: $0, long: long) }
    }

    /// From bytes in place (a frame's key): no allocation unless the key is longer than `inlineCapacity`.
    @inline(__always)
    init(_ raw: UnsafeRawBufferPointer) {
        self.init(raw: raw, long: raw.count > Self.inlineCapacity ? Array(raw) : nil)
    }

    /// `leading` followed by `rest`, built on the stack (no allocation): a named collection's engine key (its marker
    /// and the wire key) before the wire key is copied anywhere. `1 + rest.count` must be at most `inlineCapacity`;
    /// a longer key is made whole, as `init(_: UnsafeRawBufferPointer)` makes it.
    @inline(__always)
    init(leading: UInt8, inline rest: UnsafeRawBufferPointer) {
        guard rest.count < Self.inlineCapacity else {
            self.init([leading] + Array(rest))
            return
        }
        self = withUnsafeTemporaryAllocation(byteCount: Self.inlineCapacity, alignment: 8) { buffer in
            buffer[0] = leading
            UnsafeMutableRawBufferPointer(rebasing: buffer[1...]).copyMemory(from: rest)
            return DocKey(UnsafeRawBufferPointer(rebasing: buffer[0..<1 + rest.count]))
        }
    }

    @inline(__always)
    private init(raw src: UnsafeRawBufferPointer, long: [UInt8]?) {
        count = src.count
        self.long = long
        let n = min(src.count, Self.inlineCapacity)
        withUnsafeMutableBytes(of: &w0) {
            $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: src[0..<min(n, 8)]))
        }
        if n > 8 {
            withUnsafeMutableBytes(of: &w1) {
                $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: src[8..<min(n, 16)]))
            }
        }
        if n > 16 {
            withUnsafeMutableBytes(of: &w2) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: src[16..<n])) }
        }
    }

    /// The key's bytes (rebuilt from the inline words for short keys).
    var bytes: [UInt8] {
        if let long { return long }
        return [UInt8](unsafeUninitializedCapacity: count) { out, initialized in
            let words = (w0, w1, w2)
            Swift.withUnsafeBytes(of: words) { src in
                out.baseAddress!.initialize(from: src.baseAddress!.assumingMemoryBound(to: UInt8.self), count: count)
            }
            initialized = count
        }
    }

    /// The key's bytes in place (the inline words, or the long key's buffer).
    @inline(__always)
    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        if let long { return long.withUnsafeBytes(body) }
        let words = (w0, w1, w2)
        return Swift.withUnsafeBytes(of: words) { body(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
    }

    @inline(__always)
    func hash(into hasher: inout Hasher) {
        if let long {
            long.withUnsafeBytes { hasher.combine(bytes: $0) }
        } else {
            hasher.combine(w0)
            hasher.combine(w1 ^ (UInt64(truncatingIfNeeded: count) &<< 56))
            if count > 16 { hasher.combine(w2) }
        }
    }

    @inline(__always)
    static func == (a: DocKey, b: DocKey) -> Bool {
        guard a.count == b.count, a.w0 == b.w0, a.w1 == b.w1, a.w2 == b.w2 else { return false }
        guard let la = a.long else { return true }
        return la == b.long!
    }
}
