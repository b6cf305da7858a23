import SetteeCore
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeStorage

/// `BucketEngine.store(valueBytes:)`: a client SET's value goes from the request frame's bytes straight into the
/// item's box (ADR 0048). The bytes are borrowed for the call only.
@Suite(.onTestThreads) struct BorrowedValueStoreTests {
    let dir = TemporaryDirectory("storage")

    /// Value sizes at the box's edges: none, one byte, a DocKey's inline width, the benchmark's ~983-byte JSON
    /// (a 1,072-byte chunk), 1 KiB, and the largest value a client may store.
    static let sizes = [0, 1, 24, 983, 1024, Limits.maxValueSize]

    /// Proves the stored bytes equal the borrowed bytes for each size, and that the engine kept no reference to
    /// the buffer: it is overwritten (and then freed) right after each SET, and reads still return the bytes
    /// as they were when stored, from memory and after a restart from disk.
    @Test func storedBytesEqualTheBorrowedBytesAndOutliveTheBuffer() throws {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Limits.maxValueSize, alignment: 16)
        var expected: [[UInt8]] = []
        let keys = Self.sizes.map { key("borrowed-\($0)") }
        do {
            let e = try openEngine(dir)
            for (n, size) in Self.sizes.enumerated() {
                for i in 0..<size { buffer[i] = UInt8(truncatingIfNeeded: i &* 31 &+ n &+ 1) }
                let value = UnsafeRawBufferPointer(rebasing: buffer[0..<size])
                expected.append(Array(value))
                let r = try e.store(
                    .set, VBucketID(0), keys[n], valueBytes: value, flags: UInt32(n), expiry: 0, datatype: .raw,
                    cas: .zero)
                #expect(r.cas != .zero)
                // The request buffer is reused for the next frame: the item must not see it.
                for i in 0..<size { buffer[i] = 0xEE }
                let box = e.core.vbuckets[0].table.withLock { $0.items[DocKey(keys[n])]?.box }
                #expect(box?.header.valueCount == UInt32(size))
                box?.withValueBytes { stored in
                    if size > 0, let base = stored.baseAddress, let frame = buffer.baseAddress {
                        // Its own bytes, not a view of the frame.
                        #expect(base < UnsafeRawPointer(frame) || base >= UnsafeRawPointer(frame) + buffer.count)
                    }
                }
            }
            buffer.deallocate()
            for (n, k) in keys.enumerated() {
                let doc = try e.get(VBucketID(0), k)
                #expect(doc.value.count == Self.sizes[n])
                #expect(doc.value == expected[n], "size \(Self.sizes[n])")
                #expect(doc.meta.flags == UInt32(n))
            }
            try waitAllPersisted(e)
            e.shutdown()
        }
        let e = try openEngine(dir)
        defer { e.shutdown() }
        for (n, k) in keys.enumerated() {
            #expect(try e.get(VBucketID(0), k).value == expected[n], "size \(Self.sizes[n]) after restart")
        }
    }

    /// Proves the borrowed path keeps a document's XATTRs as the array path does: a plain body SET over a
    /// document with a section keeps the section in front of the new body (the only case that builds an array).
    @Test func aBorrowedBodyKeepsTheDocumentsXattrs() throws {
        let e = try openEngine(dir)
        defer { e.shutdown() }
        let k = key("x")
        let pair = Array("_sys".utf8) + [0] + Array("{\"a\":1}".utf8) + [0]
        let section = Self.u32(pair.count + 4) + Self.u32(pair.count) + pair
        _ = try e.store(
            .set, VBucketID(0), k, value: section + Array("{\"v\":1}".utf8), flags: 0, expiry: 0,
            datatype: [.json, .xattr], cas: .zero)
        let body = Array("{\"v\":2}".utf8)
        _ = try body.withUnsafeBytes {
            try e.store(.set, VBucketID(0), k, valueBytes: $0, flags: 0, expiry: 0, datatype: .json, cas: .zero)
        }
        let doc = try e.get(VBucketID(0), k)
        #expect(doc.meta.datatype.contains(.xattr))
        #expect(doc.value == section + body)
    }

    static func u32(_ n: Int) -> [UInt8] { withUnsafeBytes(of: UInt32(n).bigEndian) { Array($0) } }

    /// Proves a value over `Limits.maxValueSize` is refused on the borrowed path too, before anything is stored.
    @Test func anOversizedBorrowedValueIsRefused() throws {
        let e = try openEngine(dir)
        defer { e.shutdown() }
        let big = [UInt8](repeating: 1, count: Limits.maxValueSize + 1)
        #expect(throws: EngineError.valueTooLarge) {
            try big.withUnsafeBytes {
                try e.store(
                    .set, VBucketID(0), key("big"), valueBytes: $0, flags: 0, expiry: 0, datatype: .raw, cas: .zero)
            }
        }
        #expect(throws: EngineError.keyNotFound) { try e.get(VBucketID(0), key("big")) }
    }
}
