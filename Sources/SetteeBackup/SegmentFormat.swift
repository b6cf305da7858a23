import CLZ4
import SetteeClient
import SetteeCore

/// Why a backup file cannot be read: the path-free reason (the repository adds the file's name). Every way a
/// hostile or damaged file can differ from what `SegmentWriter` writes ends here, never in a trap.
public struct BackupFormatError: Error, Equatable, CustomStringConvertible {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { reason }
}

/// The fixed start of a segment file: which vBucket of which collection it holds and the position its changes start
/// after (ADR 0147 describes the format).
public struct SegmentHeader: Sendable, Equatable {
    public var vbucket: VBucketID
    /// The collection id in the source bucket's manifest (`0` is `_default._default`).
    public var collection: UInt32
    /// The position (vBucket UUID, seqno) the stream started from: the previous backup's end, or zero.
    public var start: ChangeStreamPosition
    /// The stream was restarted from seqno 0 (a rollback): this segment holds the vBucket's whole history and a
    /// restore ignores the earlier backups' segments of this vBucket and collection.
    public var restarted: Bool

    public init(vbucket: VBucketID, collection: UInt32, start: ChangeStreamPosition, restarted: Bool) {
        self.vbucket = vbucket
        self.collection = collection
        self.start = start
        self.restarted = restarted
    }

    static let magic: [UInt8] = Array("STBKSEG1".utf8)
    static let version: UInt16 = 1
    /// magic 8, version 2, vBucket 2, collection 4, start uuid 8, start seqno 8, flags 4, crc32 4.
    static let size = 40
}

/// The end of a segment file: how many records and blocks precede it and the position the segment reached (the
/// end of the last whole snapshot it holds), which the next incremental backup starts from.
public struct SegmentTrailer: Sendable, Equatable {
    public var records: UInt64
    public var blocks: UInt32
    public var end: ChangeStreamPosition

    public init(records: UInt64, blocks: UInt32, end: ChangeStreamPosition) {
        self.records = records
        self.blocks = blocks
        self.end = end
    }

    /// tag 1, records 8, blocks 4, end uuid 8, end seqno 8, crc32 4.
    static let size = 33
}

/// Little-endian field helpers over byte arrays (the format is little-endian throughout).
enum LE {
    static func put<T: FixedWidthInteger>(_ v: T, _ out: inout [UInt8]) {
        var x = v.littleEndian
        withUnsafeBytes(of: &x) { out.append(contentsOf: $0) }
    }

    /// The `T` at `offset` of `bytes`; the caller checked `offset + size <= bytes.count`.
    static func get<T: FixedWidthInteger>(_ bytes: [UInt8], _ offset: Int, as: T.Type = T.self) -> T {
        var v: T = 0
        for i in (0..<MemoryLayout<T>.size).reversed() { v = (v << 8) | T(bytes[offset + i]) }
        return v
    }
}

/// Encodes one segment file as bytes to append: the header, then LZ4 blocks of records as they fill, then the
/// trailer. Pure: the caller writes what each call returns, in order.
///
/// A block is `tag 'B' (1) ‖ index u32 ‖ raw length u32 ‖ stored length u32 ‖ codec u8 ‖ crc32(raw) u32 ‖ crc32 of
/// the 17 bytes before it u32 ‖ stored bytes`; codec 0 is raw, 1 one LZ4 block. Records inside a block are
/// `kind u8 ‖ datatype u8 ‖ key length u16 ‖ value length u32 ‖ cas u64 ‖ seqno u64 ‖ revSeqno u64 ‖ flags u32 ‖
/// expiry u32 ‖ key ‖ value` (kind 0 mutation, 1 deletion, 2 expiration; the value carries its XATTR section when the
/// datatype has bit 0x04, a tombstone the XATTRs it kept). CRC-32 is the storage layer's (`CRC32`).
public struct SegmentWriter: Sendable {
    public let header: SegmentHeader
    private var pending: [UInt8] = []
    private var blockIndex: UInt32 = 0
    public private(set) var records: UInt64 = 0
    /// Bytes returned so far (what the file holds once they are written).
    public private(set) var bytesOut: Int = 0
    private var headerWritten = false

    public init(header: SegmentHeader) {
        self.header = header
    }

    /// The header's bytes; call once, first.
    public mutating func start() -> [UInt8] {
        var out = SegmentHeader.magic
        LE.put(SegmentHeader.version, &out)
        LE.put(header.vbucket.rawValue, &out)
        LE.put(header.collection, &out)
        LE.put(header.start.vbucketUUID.rawValue, &out)
        LE.put(header.start.seqno.rawValue, &out)
        LE.put(UInt32(header.restarted ? 1 : 0), &out)
        LE.put(CRC32.checksum(out), &out)
        headerWritten = true
        bytesOut += out.count
        return out
    }

    /// Adds one change; returns a block's bytes to append when the pending records reached
    /// `Limits.backupBlockTargetBytes`, else nothing.
    public mutating func append(_ e: ChangeEvent) -> [UInt8] {
        let kind: UInt8
        switch e.kind {
        case .mutation: kind = 0
        case .deletion: kind = 1
        case .expiration: kind = 2
        }
        pending.append(kind)
        pending.append(e.datatype)
        LE.put(UInt16(truncatingIfNeeded: e.key.count), &pending)
        LE.put(UInt32(truncatingIfNeeded: e.value.count), &pending)
        LE.put(e.cas.rawValue, &pending)
        LE.put(e.seqno.rawValue, &pending)
        LE.put(e.revSeqno.rawValue, &pending)
        LE.put(e.flags, &pending)
        LE.put(e.expiry, &pending)
        pending.append(contentsOf: e.key)
        pending.append(contentsOf: e.value)
        records += 1
        return pending.count >= Limits.backupBlockTargetBytes ? flushBlock() : []
    }

    /// The pending records' block (if any) and the trailer naming `end`: the last bytes of the file.
    public mutating func finish(end: ChangeStreamPosition) -> [UInt8] {
        var out = pending.isEmpty ? [] : flushBlock()
        var t: [UInt8] = [UInt8(ascii: "E")]
        LE.put(records, &t)
        LE.put(blockIndex, &t)
        LE.put(end.vbucketUUID.rawValue, &t)
        LE.put(end.seqno.rawValue, &t)
        LE.put(CRC32.checksum(t), &t)
        out += t
        bytesOut += t.count
        return out
    }

    private mutating func flushBlock() -> [UInt8] {
        let raw = pending
        pending.removeAll(keepingCapacity: true)
        let (codec, stored) = LZ4Block.compress(raw)
        var out: [UInt8] = [UInt8(ascii: "B")]
        LE.put(blockIndex, &out)
        LE.put(UInt32(raw.count), &out)
        LE.put(UInt32(stored.count), &out)
        out.append(codec)
        LE.put(CRC32.checksum(raw), &out)
        LE.put(CRC32.checksum(out), &out)
        out += stored
        blockIndex += 1
        bytesOut += out.count
        return out
    }
}

/// One LZ4 block (`LZ4_compress_default` / `LZ4_decompress_safe`), kept raw when LZ4 does not shrink it.
enum LZ4Block {
    static func compress(_ raw: [UInt8]) -> (codec: UInt8, bytes: [UInt8]) {
        guard raw.count >= 64, raw.count <= Int(LZ4_MAX_INPUT_SIZE) else { return (0, raw) }
        let bound = Int(LZ4_compressBound(Int32(raw.count)))
        var dst = [UInt8](repeating: 0, count: bound)
        let n = raw.withUnsafeBytes { src in
            dst.withUnsafeMutableBytes { d in
                LZ4_compress_default(
                    src.baseAddress?.assumingMemoryBound(to: CChar.self),
                    d.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(raw.count), Int32(bound))
            }
        }
        guard n > 0, Int(n) < raw.count else { return (0, raw) }
        dst.removeSubrange(Int(n)...)
        return (1, dst)
    }

    /// Exactly `length` bytes decompressed from `stored`, or nil when the block does not decode to that length.
    static func decompress(_ stored: [UInt8], length: Int) -> [UInt8]? {
        guard length > 0, !stored.isEmpty else { return length == 0 && stored.isEmpty ? [] : nil }
        var out = [UInt8](repeating: 0, count: length)
        let produced = stored.withUnsafeBytes { src in
            out.withUnsafeMutableBytes { dst in
                LZ4_decompress_safe(
                    src.baseAddress?.assumingMemoryBound(to: CChar.self),
                    dst.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(stored.count), Int32(length))
            }
        }
        return Int(produced) == length ? out : nil
    }
}

/// Where a segment reader's bytes come from: a file (`FileByteSource`) or memory (tests).
public protocol BackupByteSource {
    /// Up to `count` next bytes; fewer only at the end of the source.
    mutating func read(_ count: Int) throws -> [UInt8]
}

/// Bytes held in memory.
public struct MemoryByteSource: BackupByteSource {
    var bytes: [UInt8]
    var offset = 0
    public init(_ bytes: [UInt8]) { self.bytes = bytes }
    public mutating func read(_ count: Int) throws -> [UInt8] {
        let n = min(count, bytes.count - offset)
        defer { offset += n }
        return Array(bytes[offset..<offset + n])
    }
}

/// Reads a segment file written by `SegmentWriter`, verifying as it goes: the header's and every block header's
/// CRC-32, block indexes in order, lengths within `Limits.backupMaxBlockBytes` / `backupMaxStoredBlockBytes`, the LZ4
/// block decoding to exactly its raw length, the raw bytes' CRC-32, records that fill their block exactly with keys
/// of 1 to `Limits.maxKeyLength` bytes, and a trailer whose counts match what was read and after which the file ends.
/// A truncated file fails (no trailer), never reads as a shorter backup.
public struct SegmentReader<Source: BackupByteSource> {
    var source: Source
    public let header: SegmentHeader
    public private(set) var trailer: SegmentTrailer?
    private var blocks: UInt32 = 0
    private var records: UInt64 = 0

    public init(_ source: Source) throws(BackupFormatError) {
        self.source = source
        let h = try Self.read(&self.source, SegmentHeader.size, what: "header")
        guard Array(h[0..<8]) == SegmentHeader.magic else { throw BackupFormatError("not a backup segment (magic)") }
        guard LE.get(h, 36, as: UInt32.self) == CRC32.checksum(h[0..<36]) else {
            throw BackupFormatError("header checksum mismatch")
        }
        let version: UInt16 = LE.get(h, 8)
        guard version == SegmentHeader.version else { throw BackupFormatError("unknown segment version \(version)") }
        let flags: UInt32 = LE.get(h, 32)
        guard flags <= 1 else { throw BackupFormatError("unknown header flags \(flags)") }
        header = SegmentHeader(
            vbucket: VBucketID(LE.get(h, 10, as: UInt16.self)), collection: LE.get(h, 12),
            start: ChangeStreamPosition(
                seqno: SeqNo(LE.get(h, 24, as: UInt64.self)), vbucketUUID: VBucketUUID(LE.get(h, 16, as: UInt64.self))),
            restarted: flags == 1)
    }

    private static func read(_ s: inout Source, _ n: Int, what: String) throws(BackupFormatError) -> [UInt8] {
        let b: [UInt8]
        do { b = try s.read(n) } catch { throw BackupFormatError("read failed: \(error)") }
        guard b.count == n else { throw BackupFormatError("truncated in \(what) (\(b.count) of \(n) bytes)") }
        return b
    }

    /// The next block's records, or nil once the trailer was read (then `trailer` is set and the source ended).
    public mutating func nextBlock() throws(BackupFormatError) -> [ChangeEvent]? {
        if trailer != nil { return nil }
        let tag = try Self.read(&source, 1, what: "block tag")
        if tag[0] == UInt8(ascii: "E") {
            let t = tag + (try Self.read(&source, SegmentTrailer.size - 1, what: "trailer"))
            guard LE.get(t, 29, as: UInt32.self) == CRC32.checksum(t[0..<29]) else {
                throw BackupFormatError("trailer checksum mismatch")
            }
            let tr = SegmentTrailer(
                records: LE.get(t, 1), blocks: LE.get(t, 9),
                end: ChangeStreamPosition(
                    seqno: SeqNo(LE.get(t, 21, as: UInt64.self)),
                    vbucketUUID: VBucketUUID(LE.get(t, 13, as: UInt64.self))))
            guard tr.records == records, tr.blocks == blocks else {
                throw BackupFormatError(
                    "trailer counts \(tr.records) records / \(tr.blocks) blocks, read \(records) / \(blocks)")
            }
            let extra: [UInt8]
            do { extra = try source.read(1) } catch { throw BackupFormatError("read failed: \(error)") }
            guard extra.isEmpty else { throw BackupFormatError("bytes after the trailer") }
            trailer = tr
            return nil
        }
        guard tag[0] == UInt8(ascii: "B") else { throw BackupFormatError("unknown block tag \(tag[0])") }
        let h = tag + (try Self.read(&source, 21, what: "block header"))
        guard LE.get(h, 18, as: UInt32.self) == CRC32.checksum(h[0..<18]) else {
            throw BackupFormatError("block \(blocks) header checksum mismatch")
        }
        let index: UInt32 = LE.get(h, 1)
        guard index == blocks else { throw BackupFormatError("block \(index) where block \(blocks) belongs") }
        let rawLength = Int(LE.get(h, 5, as: UInt32.self))
        let storedLength = Int(LE.get(h, 9, as: UInt32.self))
        let codec = h[13]
        guard rawLength > 0, rawLength <= Limits.backupMaxBlockBytes, storedLength <= Limits.backupMaxStoredBlockBytes
        else { throw BackupFormatError("block \(index) lengths \(rawLength)/\(storedLength) out of bounds") }
        let stored = try Self.read(&source, storedLength, what: "block \(index)")
        let raw: [UInt8]
        switch codec {
        case 0:
            guard storedLength == rawLength else { throw BackupFormatError("block \(index) raw length mismatch") }
            raw = stored
        case 1:
            guard let r = LZ4Block.decompress(stored, length: rawLength) else {
                throw BackupFormatError("block \(index) does not decompress to \(rawLength) bytes")
            }
            raw = r
        default: throw BackupFormatError("block \(index) unknown codec \(codec)")
        }
        guard CRC32.checksum(raw) == LE.get(h, 14, as: UInt32.self) else {
            throw BackupFormatError("block \(index) checksum mismatch")
        }
        blocks += 1
        let events = try Self.records(raw, vbucket: header.vbucket, block: index)
        records += UInt64(events.count)
        return events
    }

    static func records(_ raw: [UInt8], vbucket: VBucketID, block: UInt32) throws(BackupFormatError) -> [ChangeEvent] {
        var out: [ChangeEvent] = []
        var o = 0
        while o < raw.count {
            guard raw.count - o >= 40 else { throw BackupFormatError("block \(block): record header cut short") }
            let kindByte = raw[o]
            let keyLength = Int(LE.get(raw, o + 2, as: UInt16.self))
            let valueLength = Int(LE.get(raw, o + 4, as: UInt32.self))
            guard keyLength > 0, keyLength <= Limits.maxKeyLength,
                valueLength <= Limits.maxValueSize + Limits.subdocMaxXattrSize,
                raw.count - o - 40 >= keyLength + valueLength
            else { throw BackupFormatError("block \(block): record lengths \(keyLength)/\(valueLength) out of bounds") }
            let kind: ChangeEvent.Kind
            switch kindByte {
            case 0: kind = .mutation
            case 1: kind = .deletion
            case 2: kind = .expiration
            default: throw BackupFormatError("block \(block): unknown record kind \(kindByte)")
            }
            let k = o + 40
            out.append(
                ChangeEvent(
                    kind: kind, key: Array(raw[k..<k + keyLength]),
                    value: Array(raw[k + keyLength..<k + keyLength + valueLength]),
                    cas: CAS(LE.get(raw, o + 8, as: UInt64.self)), flags: LE.get(raw, o + 32),
                    expiry: LE.get(raw, o + 36), datatype: raw[o + 1], vbucket: vbucket,
                    seqno: SeqNo(LE.get(raw, o + 16, as: UInt64.self)),
                    revSeqno: RevSeqNo(LE.get(raw, o + 24, as: UInt64.self))))
            o = k + keyLength + valueLength
        }
        return out
    }
}
