import SetteeCore

/// The fixed part of an item's one allocation: 40 bytes (ADR 0048).
struct ItemHeader {
    var cas: CAS
    var bySeqno: SeqNo
    var revSeqno: RevSeqNo
    var flags: UInt32
    /// Absolute Unix seconds, 0 = never.
    var expiry: UInt32
    /// Bytes of value after the key (0 when evicted).
    var valueCount: UInt32
    var keyCount: UInt16
    var datatype: Datatype
    /// `ItemBits`.
    var bits: UInt8
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

/// One item in one heap allocation: object header (16 bytes), `ItemHeader` (40), then the key's bytes and the
/// value's bytes as the tail (ADR 0048). It replaces the value array the item held before, so an item still
/// costs one allocation, now with its key and metadata inside it. Immutable while shared: `Item` changes a box
/// only while it holds the one reference to it, and copies it otherwise (copy-on-write), as `Array` does with its
/// buffer; that is what makes `Item` safe to send (`ManagedBuffer` itself is never `Sendable`).
final class ItemBox: ManagedBuffer<ItemHeader, UInt8> {
    /// A new box holding `key` then `value` (nil: evicted, no value bytes).
    @inline(__always)
    static func make(header: ItemHeader, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer?) -> ItemBox {
        var h = header
        h.keyCount = UInt16(truncatingIfNeeded: key.count)
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
        let h = header
        return withKeyBytes { ItemBox.make(header: h, key: $0, value: value) }
    }

    /// A copy to change (copy-on-write).
    func copy() -> ItemBox {
        let h = header
        return withKeyBytes { key in
            withValueBytes { ItemBox.make(header: h, key: key, value: h.bits & ItemBits.resident != 0 ? $0 : nil) }
        }
    }

    @inline(__always)
    func withKeyBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        let n = Int(header.keyCount)
        return withUnsafeMutablePointerToElements { body(UnsafeRawBufferPointer(start: $0, count: n)) }
    }

    @inline(__always)
    func withValueBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        let k = Int(header.keyCount)
        let n = Int(header.valueCount)
        return withUnsafeMutablePointerToElements { body(UnsafeRawBufferPointer(start: $0 + k, count: n)) }
    }

    /// Whether this item's key is `key`: lengths, then bytes.
    @inline(__always)
    func hasKey(_ key: DocKey) -> Bool {
        guard Int(header.keyCount) == key.count else { return false }
        return withKeyBytes { mine in key.withUnsafeBytes { $0.elementsEqual(mine) } }
    }
}
