import SetteeCore
import Testing

/// The collection id in front of a collection-aware client's key is unsigned LEB128 (kv_engine
/// `docs/Collections.md`): read with its length, and refused (nil, answered EINVAL) when it runs past 5 bytes,
/// past u32, or off the end of the key, so no key bytes are mistaken for a document name.
@Suite struct CollectionPrefixTests {
    @Test(
        arguments: [
            ([0x00, 0x61], UInt32(0), 1),
            ([0x08, 0x61], 8, 1),
            ([0xab, 0x04, 0x61], 555, 2),
            ([0xff, 0xff, 0xff, 0xff, 0x0f], UInt32.max, 5),
        ] as [([UInt8], UInt32, Int)])
    func reads(key: [UInt8], id: UInt32, length: Int) throws {
        let prefix = try #require(CollectionKey.decodePrefix(key))
        #expect(prefix.id == id && prefix.length == length)
    }

    @Test(arguments: [
        [UInt8](), [0x80], [0xff, 0xff], [0xff, 0xff, 0xff, 0xff, 0xff, 0x01], [0xff, 0xff, 0xff, 0xff, 0x1f],
    ])
    func refuses(key: [UInt8]) {
        #expect(CollectionKey.decodePrefix(key) == nil)
    }

    /// Proves `prefixLength` is `encodePrefix(id).count` at every length boundary, and that a padded prefix (the
    /// same id in more bytes, which `decodePrefix` accepts) is longer: the KV handler copies a wire prefix into the
    /// engine key only when its length is `prefixLength` (otherwise it writes the canonical encoding), so the same
    /// document is reached however a client spelled its collection id.
    @Test func prefixLengthIsTheCanonicalEncodingsLength() throws {
        for id: UInt32 in [0, 1, 127, 128, 16_383, 16_384, (1 << 21) - 1, 1 << 21, (1 << 28) - 1, 1 << 28, .max] {
            #expect(CollectionKey.prefixLength(id) == CollectionKey.encodePrefix(id).count, "\(id)")
            let canonical = CollectionKey.encodePrefix(id) + [0x61]
            #expect(try #require(CollectionKey.decodePrefix(canonical)).length == CollectionKey.prefixLength(id))
        }
        let padded = try #require(CollectionKey.decodePrefix([0x88, 0x00, 0x61]))
        #expect(padded.id == 8 && padded.length == 2 && CollectionKey.prefixLength(8) == 1)
    }
}
