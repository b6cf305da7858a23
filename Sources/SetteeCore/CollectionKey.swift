/// How a document's collection is carried in a key, on the wire and inside the engine (ADR 0129).
///
/// - On the wire (HELLO Collections negotiated) a key is `LEB128(collection id) ‖ logical key` (kv_engine
///   `docs/Collections.md`): unsigned LEB128, 7 bits a byte, least significant group first, high bit "more"; a u32
///   needs at most 5 bytes. The vBucket is the hash of the logical key only.
/// - In the engine a default-collection key is the logical key itself (so the data the engine held before
///   collections, views and the gateway are unchanged), and a named collection's key is
///   `engineMarker ‖ LEB128(collection id) ‖ logical key`. The marker, 0xff, never occurs in UTF-8, but memcached's
///   binary keys may start with it (memcaslap's do): such a default-collection key is escaped as
///   `engineMarker ‖ 0x00 ‖ logical key` (the default collection's id, 0, as the prefix), so the two key spaces
///   cannot meet and no key a client may send is refused. An escaped key is at most `maxEscapedDefaultKeyLength`.
public enum CollectionKey {
    /// First byte of every named collection's engine key and of an escaped default-collection key.
    public static let engineMarker: UInt8 = 0xff

    /// The longest default-collection key starting with `engineMarker` (248 bytes): its engine key takes two bytes
    /// more and stays within the engine's `Limits.maxKeyLength`. A longer one is refused with EINVAL.
    public static let maxEscapedDefaultKeyLength = Limits.maxKeyLength - 2

    /// Whether a default-collection key is stored escaped (it starts with `engineMarker`).
    @inline(__always)
    public static func needsEscape<C: Collection<UInt8>>(defaultKey key: C) -> Bool {
        key.first == engineMarker
    }

    /// The collection id at the front of a wire key and its length in bytes; nil when malformed (more than 5 bytes,
    /// a value past u32, or no byte without the continuation bit). Never traps: peer bytes. Inlinable: it runs for
    /// every collection-aware KV request, and unspecialized across the module boundary its generic walk over a
    /// `ByteBufferView` cost measurable throughput (issue 70's bench row).
    @inlinable
    public static func decodePrefix<C: Collection<UInt8>>(_ bytes: C) -> (id: UInt32, length: Int)? {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        var length = 0
        for byte in bytes.prefix(5) {
            value |= UInt64(byte & 0x7f) << shift
            length += 1
            if byte & 0x80 == 0 {
                guard value <= UInt64(UInt32.max) else { return nil }
                return (UInt32(value), length)
            }
            shift += 7
        }
        return nil
    }

    /// The length of `id` as unsigned LEB128 (1 to 5 bytes), without encoding it. A prefix `decodePrefix` read with
    /// this length is `encodePrefix(id)` byte for byte (a longer, padded one is not).
    @inlinable
    public static func prefixLength(_ id: UInt32) -> Int {
        var length = 1
        var v = id >> 7
        while v != 0 {
            length += 1
            v >>= 7
        }
        return length
    }

    /// `id` as unsigned LEB128 (1 to 5 bytes).
    public static func encodePrefix(_ id: UInt32) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(prefixLength(id))
        forEachPrefixByte(id) { out.append($0) }
        return out
    }

    /// Hands `body` the bytes of `id` as unsigned LEB128, first to last (what `encodePrefix` returns), so a caller
    /// writing a key into its own buffer allocates nothing for the prefix (the smart client, per operation).
    @inlinable
    public static func forEachPrefixByte(_ id: UInt32, _ body: (UInt8) -> Void) {
        var v = id
        repeat {
            var byte = UInt8(v & 0x7f)
            v >>= 7
            if v != 0 { byte |= 0x80 }
            body(byte)
        } while v != 0
    }

    /// The longest logical key a named collection `id` accepts: kv_engine's 246 (`Limits`), or less when the
    /// engine key (marker, prefix, key) would pass `Limits.maxKeyLength` (only for ids of 2^21 and up).
    public static func maxLogicalKeyLength(collection id: UInt32) -> Int {
        let prefix = 1 + prefixLength(id)
        return min(Limits.maxCollectionLogicalKeyLength, Limits.maxKeyLength - prefix)
    }

    /// The engine key of `logicalKey` in collection `id`: a named collection's key behind the marker and prefix; the
    /// default collection's key itself, or escaped (`engineMarker ‖ 0x00 ‖ key`) when it starts with the marker.
    /// Lengths are the caller's to check (`maxLogicalKeyLength`, `maxEscapedDefaultKeyLength`).
    public static func engineKey<C: Collection<UInt8>>(collection id: UInt32, logicalKey: C) -> [UInt8] {
        if id == CollectionsManifest.defaultCollectionID && !needsEscape(defaultKey: logicalKey) {
            return Array(logicalKey)
        }
        var out: [UInt8] = [engineMarker]
        out.reserveCapacity(1 + 5 + logicalKey.count)
        out.append(contentsOf: encodePrefix(id))
        out.append(contentsOf: logicalKey)
        return out
    }

    /// Splits an engine key into its collection id and logical key (the default collection for a key without the
    /// marker or an escaped one); nil for a marked key whose prefix is malformed.
    public static func split(engineKey key: [UInt8]) -> (collection: UInt32, logicalKey: ArraySlice<UInt8>)? {
        guard key.first == engineMarker else { return (CollectionsManifest.defaultCollectionID, key[...]) }
        guard let (id, length) = decodePrefix(key.dropFirst()) else { return nil }
        return (id, key.dropFirst(1 + length))
    }

    /// The key a response carries for engine key `key` (GETK, GETKQ): with HELLO Collections the wire form
    /// `LEB128(id) ‖ logical key` (the marker dropped, or 0x00 put before a plain default key); without it the
    /// default collection's logical key (an escaped key unescaped). `key` is an engine key the connection may read.
    public static func wireKey<C: Collection<UInt8>>(engineKey key: C, collectionAware: Bool) -> [UInt8] {
        if key.first == engineMarker {
            return Array(key.dropFirst(collectionAware ? 1 : 2))
        }
        return collectionAware ? [0] + Array(key) : Array(key)
    }
}
