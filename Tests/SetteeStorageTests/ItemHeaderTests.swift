import SetteeCore
import SetteeTestSupport
import Testing

@testable import SetteeStorage

/// The item's one allocation with its 35-byte header (ADR 0048, HAS): every field read back at the edges of its
/// range and of malloc's size classes, the 48-bit counters' clamp, and the key's offset.
@Suite(.onTestThreads) struct ItemHeaderTests {
    /// Key lengths at the ends of their range and value lengths around size-class edges (51 + 13 + 1,000 + 8 is
    /// the top of the 1,072-byte class), plus the largest value.
    static let keyLengths = [1, 13, 250]
    static let valueLengths: [Int?] = [nil, 0, 1, 24, 983, 1_000, 1_001, 1_024, Limits.maxValueSize]

    /// `n` bytes: `seed` throughout, with distinct bytes in the first and last 64 (so a shifted offset shows).
    static func pattern(_ n: Int, seed: UInt8) -> [UInt8] {
        var bytes = [UInt8](repeating: seed, count: n)
        for i in 0..<min(n, 64) {
            bytes[i] = UInt8(truncatingIfNeeded: i &* 31 &+ Int(seed))
            bytes[n - 1 - i] = UInt8(truncatingIfNeeded: i &* 17 &+ Int(seed) &+ 1)
        }
        return bytes
    }

    struct Meta: Equatable {
        var cas: UInt64, bySeqno: UInt64, revSeqno: UInt64, flags: UInt32, expiry: UInt32, datatype: UInt8
        var deleted: Bool, dirty: Bool, queued: Bool, referenced: Bool, corrupt: Bool
    }

    static func item(key: [UInt8], value: [UInt8]?, _ m: Meta) -> Item {
        Item(
            key: key, value: value, cas: CAS(m.cas), revSeqno: RevSeqNo(m.revSeqno), bySeqno: SeqNo(m.bySeqno),
            flags: m.flags, expiry: m.expiry, datatype: Datatype(rawValue: m.datatype), deleted: m.deleted,
            dirty: m.dirty, queued: m.queued, referenced: m.referenced, corrupt: m.corrupt)
    }

    static func meta(of i: Item) -> Meta {
        Meta(
            cas: i.cas.rawValue, bySeqno: i.bySeqno.rawValue, revSeqno: i.revSeqno.rawValue, flags: i.flags,
            expiry: i.expiry, datatype: i.datatype.rawValue, deleted: i.deleted, dirty: i.dirty, queued: i.queued,
            referenced: i.referenced, corrupt: i.corrupt)
    }

    /// All ones (each field at its largest) and a mixed pattern whose 48-bit counters use both halves.
    static let metas = [
        Meta(
            cas: .max, bySeqno: Limits.maxSeqno, revSeqno: Limits.maxRevSeqno, flags: .max, expiry: .max,
            datatype: .max, deleted: true, dirty: true, queued: true, referenced: true, corrupt: true),
        Meta(
            cas: 0x0123_4567_89ab_cdef, bySeqno: 0x8000_0000_0001, revSeqno: 0x0001_0000_0000, flags: 0x8000_0001,
            expiry: 1, datatype: 0x05, deleted: false, dirty: true, queued: false, referenced: true, corrupt: false),
        Meta(
            cas: 0, bySeqno: 0, revSeqno: 0, flags: 0, expiry: 0, datatype: 0, deleted: false, dirty: false,
            queued: false, referenced: false, corrupt: false),
    ]

    /// The key starts 51 bytes into the box, so the row's item (13-byte key, 1,000-byte value) asks malloc for
    /// 1,064 bytes: glibc's 1,072-byte chunk (1,064 + 8), where the 40-byte header made it 1,088.
    @Test func headerIs35BytesAndTheKeyStartsAt51() {
        #expect(MemoryLayout<ItemHeader>.size == 35)
        let item = Self.item(key: [1], value: [2], Self.metas[0])
        let box = item.box
        let elements = box.withUnsafeMutablePointerToElements { UnsafeRawPointer($0) }
        let offset = elements - UnsafeRawPointer(Unmanaged.passUnretained(box).toOpaque())
        #expect(offset == 51)
        #expect(Limits.maxKeyLength <= Int(UInt8.max))
        #expect(UInt64(Limits.maxFrameBodySize) <= UInt64(UInt32.max))
    }

    /// Every field, the key and the value read back as written, for every key and value length above; a change of
    /// each field in place leaves the others, the key and the value as they were; a copy's change leaves the
    /// original alone.
    @Test(arguments: keyLengths)
    func everyFieldReadsBack(keyLength: Int) {
        for valueLength in Self.valueLengths {
            for (n, m) in Self.metas.enumerated() {
                let key = Self.pattern(keyLength, seed: UInt8(n))
                let value = valueLength.map { Self.pattern($0, seed: UInt8(n) &+ 100) }
                var item = Self.item(key: key, value: value, m)
                #expect(Self.meta(of: item) == m)
                #expect(item.key == key && item.docKey == DocKey(key) && item.box.hasKey(DocKey(key)))
                #expect(item.value == value && item.hasValue == (value != nil))
                #expect(item.valueCount == (valueLength ?? 0))
                #expect(item.meta.bySeqno == SeqNo(m.bySeqno) && item.meta.revSeqno == RevSeqNo(m.revSeqno))
                let shared = item
                var changed = m
                item.cas = CAS(~m.cas)
                changed.cas = ~m.cas
                item.bySeqno = SeqNo(Limits.maxSeqno - m.bySeqno)
                changed.bySeqno = Limits.maxSeqno - m.bySeqno
                item.revSeqno = RevSeqNo(Limits.maxRevSeqno - m.revSeqno)
                changed.revSeqno = Limits.maxRevSeqno - m.revSeqno
                item.flags = ~m.flags
                changed.flags = ~m.flags
                item.expiry = ~m.expiry
                changed.expiry = ~m.expiry
                item.datatype = Datatype(rawValue: ~m.datatype)
                changed.datatype = ~m.datatype
                item.referenced = !m.referenced
                changed.referenced = !m.referenced
                item.corrupt = !m.corrupt
                changed.corrupt = !m.corrupt
                #expect(Self.meta(of: item) == changed)
                #expect(item.key == key && item.value == value && item.valueCount == (valueLength ?? 0))
                #expect(Self.meta(of: shared) == m && shared.key == key && shared.value == value)
            }
        }
    }

    /// A 48-bit counter set past its cap keeps the cap (never the low 48 bits of the value); the halves' edges
    /// read back exactly.
    @Test func seqnosClampAt48Bits() {
        var item = Self.item(key: [7], value: [], Self.metas[2])
        for v: UInt64 in [1, 0xffff_ffff, 0x1_0000_0000, 0x7fff_ffff_ffff, Limits.maxSeqno] {
            item.bySeqno = SeqNo(v)
            item.revSeqno = RevSeqNo(v)
            #expect(item.bySeqno.rawValue == v && item.revSeqno.rawValue == v)
        }
        for v: UInt64 in [Limits.maxSeqno + 1, 1 << 48 | 5, UInt64.max] {
            item.bySeqno = SeqNo(v)
            item.revSeqno = RevSeqNo(v)
            #expect(item.bySeqno.rawValue == Limits.maxSeqno && item.revSeqno.rawValue == Limits.maxRevSeqno)
        }
        let built = Self.item(
            key: [7], value: nil,
            Meta(
                cas: 1, bySeqno: .max, revSeqno: 1 << 48, flags: 0, expiry: 0, datatype: 0, deleted: false,
                dirty: false, queued: false, referenced: false, corrupt: false))
        #expect(built.bySeqno.rawValue == Limits.maxSeqno && built.revSeqno.rawValue == Limits.maxRevSeqno)
    }

    /// Replacing the value (eviction, a new value) keeps the header and the key.
    @Test func replacingTheValueKeepsHeaderAndKey() {
        for keyLength in Self.keyLengths {
            let key = Self.pattern(keyLength, seed: 9)
            var item = Self.item(key: key, value: Self.pattern(1_000, seed: 1), Self.metas[0])
            item.value = nil
            #expect(!item.hasValue && item.valueCount == 0 && item.key == key && Self.meta(of: item) == Self.metas[0])
            item.value = Self.pattern(1_024, seed: 2)
            #expect(item.value == Self.pattern(1_024, seed: 2) && item.key == key)
            #expect(Self.meta(of: item) == Self.metas[0])
        }
    }
}
