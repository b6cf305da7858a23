/// Maps a document key to its vBucket exactly as Couchbase clients do:
/// `((crc32(key) >> 16) & 0x7fff) % numVBuckets`. Any other formula makes real SDKs route keys to
/// the wrong node. With a power-of-two count `%` and `& (n - 1)` agree, which other SDKs rely on.
public enum VBucketHash {
    @inlinable
    public static func vbucket(forKey key: UnsafeRawBufferPointer, count: Int = Limits.numVBuckets) -> VBucketID {
        precondition(count > 0 && count <= Int(UInt16.max), "vBucket count \(count) out of range")
        let crc = CRC32.checksum(key)
        return VBucketID(UInt16(truncatingIfNeeded: Int((crc >> 16) & 0x7fff) % count))
    }

    @inlinable
    public static func vbucket<C: Collection>(forKey key: C, count: Int = Limits.numVBuckets) -> VBucketID
    where C.Element == UInt8 {
        if let r = key.withContiguousStorageIfAvailable({ vbucket(forKey: UnsafeRawBufferPointer($0), count: count) }) {
            return r
        }
        return Array(key).withUnsafeBytes { vbucket(forKey: $0, count: count) }
    }

    public static func vbucket(forKey key: String, count: Int = Limits.numVBuckets) -> VBucketID {
        vbucket(forKey: Array(key.utf8), count: count)
    }
}
