import Foundation
import SetteeCore
import SetteeTestSupport
import Testing

@_spi(Benchmarks) @testable import SetteeStorage

@Suite(.onTestThreads) struct DiskFormatTests {
    let dir = TemporaryDirectory("storage")

    /// Compressible values are stored LZ4-compressed (codec 1) and smaller than raw; incompressible
    /// ones raw (codec 0); each row records the uncompressed length and its CRC-32.
    @Test func lz4CodecOnDisk() throws {
        let e = try openEngine(dir)
        let json = jsonDoc(1, size: 4096)
        var rng = SystemRandomNumberGenerator()
        let noise = (0..<1024).map { _ in UInt8.random(in: 0...255, using: &rng) }
        _ = try e.store(
            .set, vbOf(key("json"), e), key("json"), value: json, flags: 0, expiry: 0, datatype: .json, cas: .zero)
        _ = try e.store(
            .set, vbOf(key("noise"), e), key("noise"), value: noise, flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        e.shutdown()
        let db = try RawSQLite(dir.dataFile)
        let j = try db.rows("SELECT codec, value FROM items WHERE key = CAST('json' AS BLOB)")
        #expect(j.count == 1 && j[0].0 == 1)
        #expect(j[0].1.count < json.count / 2)
        #expect(try db.rows("SELECT vlen, value FROM items WHERE key = CAST('json' AS BLOB)")[0].0 == Int64(json.count))
        #expect(
            try db.rows("SELECT crc, value FROM items WHERE key = CAST('json' AS BLOB)")[0].0
                == Int64(CRC32.checksum(json)))
        let n = try db.rows("SELECT codec, value FROM items WHERE key = CAST('noise' AS BLOB)")
        #expect(n.count == 1 && n[0].0 == 0 && n[0].1 == noise)
    }

    /// The envelope detects a flipped bit, a wrong length and an unknown codec, with typed errors.
    @Test func envelopeVerifies() throws {
        var env = LZ4Envelope()
        let value = jsonDoc(7, size: 2000)
        let (codec, stored, crc) = env.withEncoded(value) { c, s, crc in (c, Array(s), crc) }
        #expect(codec == .lz4)
        let ok = try stored.withUnsafeBytes {
            try LZ4Envelope.decode(
                codec: 1, stored: $0, length: Int64(value.count), crc: Int64(crc), vb: 1, keyLength: 3)
        }
        #expect(ok == value)
        var flipped = stored
        flipped[flipped.count / 2] ^= 0x10
        #expect(throws: StorageCorruptionError.self) {
            try flipped.withUnsafeBytes {
                try LZ4Envelope.decode(
                    codec: 1, stored: $0, length: Int64(value.count), crc: Int64(crc), vb: 1, keyLength: 3)
            }
        }
        #expect(throws: StorageCorruptionError.self) {
            try stored.withUnsafeBytes {
                try LZ4Envelope.decode(
                    codec: 1, stored: $0, length: Int64(value.count + 1), crc: Int64(crc), vb: 1, keyLength: 3)
            }
        }
        #expect(throws: StorageCorruptionError.self) {
            try stored.withUnsafeBytes {
                try LZ4Envelope.decode(
                    codec: 9, stored: $0, length: Int64(value.count), crc: Int64(crc), vb: 1, keyLength: 3)
            }
        }
    }

    /// A byte flipped in a stored blob stops the warmup with a typed corruption error naming the
    /// vBucket and key length (no crash, no silently wrong document).
    @Test func corruptionDetectedAtWarmup() throws {
        let e = try openEngine(dir)
        let k = key("victim")
        let vb = vbOf(k, e)
        _ = try e.store(
            .set, vb, k, value: [UInt8](repeating: 0x41, count: 10) + Array(0..<200), flags: 0, expiry: 0,
            datatype: .raw, cas: .zero)
        e.shutdown()
        let db = try RawSQLite(dir.dataFile)
        let row = try db.rows("SELECT rowid, value FROM items")[0]
        var blob = row.1
        blob[blob.count - 1] ^= 0x01
        try db.setValue(rowid: row.0, blob)
        do {
            let e2 = try openEngine(dir)
            e2.shutdown()
            Issue.record("warmup accepted a corrupt value")
        } catch let err as StorageCorruptionError {
            #expect(err.vbucket == vb && err.keyLength == k.count)
        }
    }

    /// A corrupt value found by a background fetch (value not loaded at warmup because memory was above
    /// the low watermark) makes reads of that key fail with ioFailure; other keys are unaffected.
    @Test func corruptionDetectedOnBackgroundFetch() throws {
        let e = try openEngine(dir, quotaMB: 1)
        var written = 0
        // ~1.1 KB per item (value + key + MemoryAccounting.perItemOverhead), ~880 KB against a 768 KiB low watermark.
        for i in 0..<800 {
            let k = key("fill\(i)")
            _ = try e.store(
                .set, vbOf(k, e), k, value: jsonDoc(i, size: 1000), flags: 0, expiry: 0, datatype: .json, cas: .zero)
            written += 1
        }
        try waitAllPersisted(e)
        let victim = key("victim")
        let vb = vbOf(victim, e)
        let r = try e.store(
            .set, vb, victim, value: jsonDoc(9999, size: 1000), flags: 0, expiry: 0, datatype: .json, cas: .zero)
        #expect(isOK(waitPersisted(e, vb, r.token.seqno)))
        e.shutdown()
        let db = try RawSQLite(dir.dataFile)
        let row = try db.rows("SELECT max(rowid), value FROM items")[0]
        var blob = try db.rows("SELECT rowid, value FROM items WHERE rowid = \(row.0)")[0].1
        blob[blob.count / 2] ^= 0x80
        try db.setValue(rowid: row.0, blob)

        let e2 = try openEngine(dir, quotaMB: 1)
        defer { e2.shutdown() }
        #expect(e2.stats().nonResidentItems > 0)
        #expect(throws: EngineError.wouldBlock) { try e2.get(vb, victim) }
        #expect(fetchSync(e2, vb, victim))
        #expect(throws: EngineError.ioFailure("stored value failed its checksum")) { try e2.get(vb, victim) }
        // Metadata is still served; overwriting the key heals it.
        #expect(try e2.getMeta(vb, victim).bySeqno == r.token.seqno)
        _ = try e2.store(.set, vb, victim, value: [1], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(try e2.get(vb, victim).value == [1])
    }
}
