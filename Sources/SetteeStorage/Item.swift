import SetteeCore

/// One document as a vBucket's hash table holds it (the key is the table's key).
///
/// Invariants (checked where items change):
/// 1. `dirty` ⇒ `value != nil` (a dirty item is never evicted: the flusher needs its value).
/// 2. `deleted` ⇒ `value != nil` and `!corrupt`: a tombstone keeps key + metadata, and as its value only the
///    system XATTR section it kept (datatype `.xattr`), else `[]` (ADR 0029). Tombstones are never evicted.
/// 3. `queued` ⇒ `dirty` (a key is in the vBucket's dirty queue at most once: dedup at enqueue).
/// 4. `value == nil` ⇔ the value is evicted; only clean (`!dirty`) live items are evicted.
struct Item {
    /// The document body, nil when evicted (valueOnly eviction keeps key + metadata resident).
    var value: [UInt8]?
    var cas: CAS
    var revSeqno: RevSeqNo
    var bySeqno: SeqNo
    var flags: UInt32
    /// Absolute Unix seconds, 0 = never.
    var expiry: UInt32
    var datatype: Datatype
    var deleted: Bool
    /// Has a version not yet committed by the flusher.
    var dirty: Bool
    /// Its key sits in the vBucket's dirty queue (waiting for the flusher to take it).
    var queued: Bool
    /// Recently read or written; the item pager skips it once and clears the bit (clock / NRU).
    var referenced: Bool
    /// The last background fetch found its stored value failing its checksum.
    var corrupt: Bool

    var meta: ItemMetadata {
        ItemMetadata(
            cas: cas, revSeqno: revSeqno, bySeqno: bySeqno, flags: flags, expiry: expiry, datatype: datatype,
            deleted: deleted)
    }

    enum Readiness { case ready, absent, expired, evicted, corrupt }

    /// Whether a read can be served from memory now; marks the item referenced (for the item pager) when
    /// it can. Called in place in the hash table (`values[i]`), so no copy of the item is made.
    @inline(__always)
    mutating func readiness(nowSeconds: UInt32) -> Readiness {
        if deleted { return .absent }
        if Expiry.isExpired(expiry, nowSeconds: nowSeconds) { return .expired }
        if corrupt { return .corrupt }
        if value == nil { return .evicted }
        if !referenced { referenced = true }
        return .ready
    }

    /// The value's bytes and metadata, borrowed (the item must be `.ready`). `mutating` only so that a call
    /// through the table (`values[i].withValue`) borrows the item in place: a non-mutating call copies the
    /// whole item out of the table first (a retain and release of its value per GET, seen in `perf`).
    @inline(__always)
    mutating func withValue<R>(_ body: (UnsafeRawBufferPointer, ItemMetadata) -> R) -> R {
        value!.withUnsafeBytes { body($0, meta) }
    }

    /// Estimated bytes this item costs in RAM with key length `keyLength`.
    @inline(__always)
    func memoryFootprint(keyLength: Int) -> Int {
        MemoryAccounting.itemBytes(keyLength: keyLength, valueLength: value?.count ?? 0)
    }
}

/// What the flusher writes for one key: the latest version, copied out under the vBucket lock
/// (the value array is shared copy-on-write, not copied).
struct FlushEntry {
    var vb: UInt16
    var key: [UInt8]
    var value: [UInt8]
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
    private let count: Int
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
            withUnsafeBytes(of: words) { src in
                out.baseAddress!.initialize(from: src.baseAddress!.assumingMemoryBound(to: UInt8.self), count: count)
            }
            initialized = count
        }
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
