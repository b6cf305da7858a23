import SetteeCore

/// The fixed part of an item's one allocation: 35 bytes (ADR 0048, HAS), so with the 16-byte object header the
/// key starts 51 bytes into the allocation (`ManagedBuffer` puts its elements right after the header's size, not
/// its stride). The 8- and 4-byte fields come first so none is padded; the two 48-bit counters are split in a
/// 32-bit low half and a 16-bit high half.
///
/// Ranges (every field holds what it is given, or the stated rule applies; nothing wraps or traps):
/// - `bySeqno` and `revSeqno` hold up to `Limits.maxSeqno` / `Limits.maxRevSeqno` (2^48 - 1, as kv_engine keeps
///   its revSeqno). Peers' larger values are refused where they enter (`BucketEngine.applySnapshot`, and client
///   writes once a vBucket's seqno reaches the cap); a larger value set here anyway is clamped to the cap
///   (`ItemHeader.clamped`), never wrapped.
/// - `keyCount` is a byte: every key is 1...`Limits.maxKeyLength` (250) bytes, checked where keys enter (the
///   engine's `vbucket(_:keyCount:)`, `applySnapshot`, warmup); `ItemBox.make` checks it once more.
/// - `valueCount` is 32 bits: values are at most `Limits.maxFrameBodySize` bytes.
struct ItemHeader {
    var cas: CAS
    var flags: UInt32
    /// Absolute Unix seconds, 0 = never.
    var expiry: UInt32
    /// Bytes of value after the key (0 when evicted).
    var valueCount: UInt32
    private var bySeqnoLow: UInt32
    private var revSeqnoLow: UInt32
    private var bySeqnoHigh: UInt16
    private var revSeqnoHigh: UInt16
    var keyCount: UInt8
    var datatype: Datatype
    /// `ItemBits`.
    var bits: UInt8

    init(
        cas: CAS, bySeqno: SeqNo, revSeqno: RevSeqNo, flags: UInt32, expiry: UInt32, valueCount: UInt32,
        keyCount: UInt8, datatype: Datatype, bits: UInt8
    ) {
        self.cas = cas
        self.flags = flags
        self.expiry = expiry
        self.valueCount = valueCount
        bySeqnoLow = 0
        revSeqnoLow = 0
        bySeqnoHigh = 0
        revSeqnoHigh = 0
        self.keyCount = keyCount
        self.datatype = datatype
        self.bits = bits
        self.bySeqno = bySeqno
        self.revSeqno = revSeqno
    }

    /// `value` if it is at most `cap`, else `cap` (saturates, never wraps).
    @inline(__always)
    static func clamped(_ value: UInt64, to cap: UInt64) -> UInt64 { min(value, cap) }

    /// A 48-bit counter from its halves.
    @inline(__always)
    static func join(_ low: UInt32, _ high: UInt16) -> UInt64 { UInt64(high) << 32 | UInt64(low) }

    /// `value` clamped to `cap` (at most 2^48 - 1), split into its low 32 and high 16 bits.
    @inline(__always)
    static func split(_ value: UInt64, cap: UInt64) -> (low: UInt32, high: UInt16) {
        let v = clamped(value, to: cap)
        return (UInt32(truncatingIfNeeded: v), UInt16(truncatingIfNeeded: v >> 32))
    }

    var bySeqno: SeqNo {
        @inline(__always) get { SeqNo(Self.join(bySeqnoLow, bySeqnoHigh)) }
        @inline(__always) set { (bySeqnoLow, bySeqnoHigh) = Self.split(newValue.rawValue, cap: Limits.maxSeqno) }
    }

    var revSeqno: RevSeqNo {
        @inline(__always) get { RevSeqNo(Self.join(revSeqnoLow, revSeqnoHigh)) }
        @inline(__always) set { (revSeqnoLow, revSeqnoHigh) = Self.split(newValue.rawValue, cap: Limits.maxRevSeqno) }
    }
}

/// The item's flags, packed into `ItemHeader.bits`.
enum ItemBits {
    static let deleted: UInt8 = 1 << 0
    static let dirty: UInt8 = 1 << 1
    static let queued: UInt8 = 1 << 2
    static let referenced: UInt8 = 1 << 3
    static let corrupt: UInt8 = 1 << 4
    /// The value is in memory (clear: evicted, valueOnly).
    static let resident: UInt8 = 1 << 5
}

/// One item in one heap allocation: object header (16 bytes), `ItemHeader` (35), then the key's bytes and the
/// value's bytes as the tail (ADR 0048). It replaces the value array the item held before, so an item still
/// costs one allocation, now with its key and metadata inside it. Immutable while shared: `Item` changes a box
/// only while it holds the one reference to it, and copies it otherwise (copy-on-write), as `Array` does with its
/// buffer; that is what makes `Item` safe to send (`ManagedBuffer` itself is never `Sendable`).
final class ItemBox: ManagedBuffer<ItemHeader, UInt8> {
    /// A new box holding `key` then `value` (nil: evicted, no value bytes).
    @inline(__always)
    static func make(header: ItemHeader, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer?) -> ItemBox {
        // Not reachable from client or peer bytes: a key enters a table only through the engine's key gate
        // (`BucketEngine.vbucket(_:keyCount:)`, every client mutation and lock), `applySnapshot` (DCP) or warmup's row
        // check, each refusing keys outside 1...`Limits.maxKeyLength`; `with(value:)` and `copy()` reuse a checked
        // key. `KeyLengthGateTests` pins the client and peer gates. A longer key would not fit `keyCount`.
        precondition(key.count <= Limits.maxKeyLength, "key longer than Limits.maxKeyLength")
        var h = header
        h.keyCount = UInt8(truncatingIfNeeded: key.count)
        h.valueCount = UInt32(truncatingIfNeeded: value?.count ?? 0)
        if value != nil { h.bits |= ItemBits.resident } else { h.bits &= ~ItemBits.resident }
        let tail = key.count + (value?.count ?? 0)
        let box = unsafeDowncast(ItemBox.create(minimumCapacity: tail) { _ in h }, to: ItemBox.self)
        box.withUnsafeMutablePointerToElements { p in
            let raw = UnsafeMutableRawPointer(p)
            if let base = key.baseAddress, key.count > 0 { raw.copyMemory(from: base, byteCount: key.count) }
            if let value, let base = value.baseAddress, value.count > 0 {
                (raw + key.count).copyMemory(from: base, byteCount: value.count)
            }
        }
        return box
    }

    /// The same key with another value (nil: evicted).
    @inline(__always)
    func with(value: UnsafeRawBufferPointer?) -> ItemBox {
        let h = fields
        return withKeyBytes { ItemBox.make(header: h, key: $0, value: value) }
    }

    /// The header, read through its pointer: `header` (ManagedBuffer's stored property) begins and ends a dynamic
    /// exclusivity access on every read, a runtime call on each GET's key compare and metadata read (ADR 0089). The
    /// check finds overlapping accesses on one thread only; the header changes only through `Item.update`, under the
    /// vBucket's lock, while no read of the same box is in progress on that thread.
    @inline(__always)
    var fields: ItemHeader { withUnsafeMutablePointerToHeader { $0.pointee } }

    /// A copy to change (copy-on-write).
    func copy() -> ItemBox {
        let h = fields
        return withKeyBytes { key in
            withValueBytes { ItemBox.make(header: h, key: key, value: h.bits & ItemBits.resident != 0 ? $0 : nil) }
        }
    }

    @inline(__always)
    func withKeyBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        let n = Int(fields.keyCount)
        return withUnsafeMutablePointerToElements { body(UnsafeRawBufferPointer(start: $0, count: n)) }
    }

    @inline(__always)
    func withValueBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        let h = fields
        let k = Int(h.keyCount)
        let n = Int(h.valueCount)
        return withUnsafeMutablePointerToElements { body(UnsafeRawBufferPointer(start: $0 + k, count: n)) }
    }

    /// Whether this item's key is `key`: lengths, then bytes.
    @inline(__always)
    func hasKey(_ key: DocKey) -> Bool {
        guard Int(fields.keyCount) == key.count else { return false }
        return withKeyBytes { mine in key.withUnsafeBytes { $0.elementsEqual(mine) } }
    }
}
