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
}
