import SetteeClient
import SetteeCore
import SetteeJSON
import Testing

@testable import SetteeBackup

@Suite struct SegmentFormatTests {
    static func event(_ i: Int, kind: ChangeEvent.Kind = .mutation, valueBytes: Int = 100) -> ChangeEvent {
        ChangeEvent(
            kind: kind, key: Array("key-\(i)".utf8),
            value: kind == .mutation ? Array(repeating: UInt8(i & 0xff), count: valueBytes) : [],
            cas: CAS(UInt64(1_700_000_000_000_000_000) + UInt64(i)), flags: UInt32(i), expiry: UInt32(i * 3),
            datatype: kind == .mutation ? 1 : 0, vbucket: VBucketID(7), seqno: SeqNo(UInt64(i + 1)),
            revSeqno: RevSeqNo(UInt64(i + 2)))
    }

    static let header = SegmentHeader(
        vbucket: VBucketID(7), collection: 9,
        start: ChangeStreamPosition(seqno: SeqNo(5), vbucketUUID: VBucketUUID(77)),
        restarted: false)
    static let end = ChangeStreamPosition(seqno: SeqNo(5000), vbucketUUID: VBucketUUID(78))

    /// A segment of `count` events: several blocks once past `Limits.backupBlockTargetBytes`.
    static func segment(_ events: [ChangeEvent]) -> [UInt8] {
        var w = SegmentWriter(header: header)
        var out = w.start()
        for e in events { out += w.append(e) }
        out += w.finish(end: end)
        return out
    }

    static func readAll(_ bytes: [UInt8]) throws -> (SegmentHeader, [ChangeEvent], SegmentTrailer?) {
        var r = try SegmentReader(MemoryByteSource(bytes))
        var all: [ChangeEvent] = []
        while let b = try r.nextBlock() { all += b }
        return (r.header, all, r.trailer)
    }

    @Test func roundTripKeepsEveryFieldAcrossBlocks() throws {
        let events = (0..<3000).map { Self.event($0, kind: $0 % 10 == 3 ? .deletion : .mutation, valueBytes: 1000) }
        let bytes = Self.segment(events)
        let (h, read, t) = try Self.readAll(bytes)
        #expect(h == Self.header)
        #expect(read == events)
        #expect(t == SegmentTrailer(records: 3000, blocks: t?.blocks ?? 0, end: Self.end))
        #expect((t?.blocks ?? 0) >= 2)  // 3 MB of records: more than one 1 MiB block
        // Repetitive values compress: the file is well under the raw size.
        #expect(bytes.count < 3000 * 1000 / 4)
    }

    @Test func emptySegmentHasHeaderAndTrailerOnly() throws {
        let (_, read, t) = try Self.readAll(Self.segment([]))
        #expect(read.isEmpty)
        #expect(t?.records == 0 && t?.blocks == 0)
    }

    @Test func everyTruncationFails() throws {
        let bytes = Self.segment((0..<50).map { Self.event($0) })
        for cut in 0..<bytes.count {
            #expect(throws: BackupFormatError.self) { _ = try Self.readAll(Array(bytes[0..<cut])) }
        }
    }

    @Test func everyFlippedByteIsDetected() throws {
        // Incompressible values so the block is stored raw and every byte of it is covered by the raw CRC.
        var g = SystemRandomNumberGenerator()
        var events = (0..<20).map { Self.event($0) }
        for i in events.indices { events[i].value = (0..<64).map { _ in UInt8.random(in: 0...255, using: &g) } }
        let bytes = Self.segment(events)
        for i in 0..<bytes.count {
            var bad = bytes
            bad[i] ^= 0x20
            #expect(throws: BackupFormatError.self) { _ = try Self.readAll(bad) }
        }
    }

    @Test func compressedBlockCorruptionIsDetected() throws {
        let bytes = Self.segment((0..<200).map { Self.event($0, valueBytes: 1000) })
        // Flip bytes through the compressed body (after the 40-byte header and the 21-byte block header).
        for i in stride(from: 61, to: bytes.count - SegmentTrailer.size, by: 7) {
            var bad = bytes
            bad[i] ^= 0xff
            #expect(throws: BackupFormatError.self) { _ = try Self.readAll(bad) }
        }
    }

    @Test func trailingBytesAndHostileLengthsAreRefused() throws {
        let bytes = Self.segment((0..<5).map { Self.event($0) })
        #expect(throws: BackupFormatError.self) { _ = try Self.readAll(bytes + [0]) }
        // A block header claiming 4 GiB, with a valid header checksum: refused by the bound, nothing allocated.
        var w = SegmentWriter(header: Self.header)
        var hostile = w.start()
        var h: [UInt8] = [UInt8(ascii: "B")]
        LE.put(UInt32(0), &h)
        LE.put(UInt32.max, &h)
        LE.put(UInt32.max, &h)
        h.append(1)
        LE.put(UInt32(0), &h)
        LE.put(CRC32.checksum(h), &h)
        hostile += h
        #expect(throws: BackupFormatError.self) { _ = try Self.readAll(hostile) }
    }

    @Test func recordsThatOverrunTheirBlockAreRefused() throws {
        // A record whose key length runs past the block, and a zero-length key.
        var raw: [UInt8] = [0, 0]
        LE.put(UInt16(200), &raw)
        LE.put(UInt32(0), &raw)
        raw += [UInt8](repeating: 0, count: 32 + 10)
        #expect(throws: BackupFormatError.self) {
            _ = try SegmentReader<MemoryByteSource>.records(raw, vbucket: VBucketID(0), block: 0)
        }
        var zero: [UInt8] = [0, 0]
        LE.put(UInt16(0), &zero)
        LE.put(UInt32(0), &zero)
        zero += [UInt8](repeating: 0, count: 32)
        #expect(throws: BackupFormatError.self) {
            _ = try SegmentReader<MemoryByteSource>.records(zero, vbucket: VBucketID(0), block: 0)
        }
    }

    @Test func manifestRoundTripsAndRefusesBadFields() throws {
        var m = BackupManifest(
            bucket: "b", name: "n2", parent: "n1", vbuckets: 4,
            collections: [.defaultCollection, BackupCollection(id: 8, scope: "s", name: "c")])
        m.segments[8] = [
            SegmentEntry(
                vbucket: VBucketID(3), start: .zero,
                end: ChangeStreamPosition(seqno: SeqNo(UInt64.max), vbucketUUID: VBucketUUID(UInt64.max)),
                restarted: true, records: 12, bytes: 345)
        ]
        m.items = 12
        let back = try BackupManifest.parse(m.json().serialized())
        #expect(back.segments[8] == m.segments[8])
        #expect(back.collections == m.collections)
        #expect(back.parent == "n1")
        #expect(back.ends(collection: 8)[VBucketID(3)]?.seqno == SeqNo(UInt64.max))
        #expect(throws: BackupFormatError.self) { _ = try BackupManifest.parse(Array("{\"version\":1}".utf8)) }
        #expect(throws: BackupFormatError.self) {
            _ = try BackupManifest.parse(
                Array(
                    "{\"version\":1,\"bucket\":\"b\",\"name\":\"n\",\"vbuckets\":4,\"collections\":[{\"id\":0,\"scope\":\"_default\",\"name\":\"_default\",\"segments\":[{\"vb\":9,\"start\":[\"0\",\"0\"],\"end\":[\"0\",\"0\"],\"records\":\"0\",\"bytes\":\"0\"}]}]}"
                        .utf8))
        }
    }
}
