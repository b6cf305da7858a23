import SetteeCore

/// One document as a vBucket's hash table holds it (the key is the table's key).
///
/// Invariants (checked where items change):
/// 1. `dirty` ⇒ `value != nil` (a dirty item is never evicted: the flusher needs its value).
/// 2. `deleted` ⇒ `value == []` (a tombstone keeps key + metadata only) and `!corrupt`.
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

/// A document key as the hash tables store it. Hashes the bytes in one `combine(bytes:)` call:
/// `[UInt8]`'s own `Hashable` feeds the hasher one element at a time, which showed up in profiles.
struct DocKey: Hashable {
    var bytes: [UInt8]

    @inline(__always)
    init(_ bytes: [UInt8]) { self.bytes = bytes }

    @inline(__always)
    func hash(into hasher: inout Hasher) {
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }

    @inline(__always)
    static func == (a: DocKey, b: DocKey) -> Bool { a.bytes == b.bytes }
}
