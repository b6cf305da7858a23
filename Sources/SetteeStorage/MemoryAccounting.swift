import SetteeCore
import Synchronization

/// How the engine counts RAM against the bucket quota, and the watermarks derived from it.
///
/// We do not ask malloc; we estimate: key bytes + value bytes + a fixed per-item overhead. The
/// overhead covers the hash-table slot (8-byte key reference + 48-byte `Item`, at a load factor of at
/// most 3/4 and up to 2x after a resize), the two array headers (32 bytes each) of key and value,
/// malloc's headers and rounding, and the SQLite page caches spread over the items. Calibrated against
/// RSS in the large warmup test: 1,000,000 × 1 KiB documents grew RSS by ~1,300 bytes per item, i.e.
/// ~265 bytes beyond key + value (docs/internals/storage-format.md).
enum MemoryAccounting {
    static let perItemOverhead = 256

    @inline(__always)
    static func itemBytes(keyLength: Int, valueLength: Int) -> Int {
        perItemOverhead + keyLength + valueLength
    }
}

/// The bucket-wide memory counter and thresholds. Per-vBucket changes are added here under the
/// vBucket lock; the counter itself is an atomic so no global lock exists on the hot path.
final class MemoryTracker: Sendable {
    let quota: Int
    let highWatermark: Int
    let lowWatermark: Int
    let mutationLimit: Int
    private let used = Atomic<Int>(0)

    init(quota: Int) {
        self.quota = quota
        self.highWatermark = Int(Double(quota) * Limits.memHighWatermark)
        self.lowWatermark = Int(Double(quota) * Limits.memLowWatermark)
        self.mutationLimit = Int(Double(quota) * Limits.mutationMemRatio)
    }

    @inline(__always)
    func add(_ delta: Int) {
        if delta != 0 { used.wrappingAdd(delta, ordering: .relaxed) }
    }

    var current: Int { used.load(ordering: .relaxed) }
    var aboveHigh: Bool { current > highWatermark }
    var aboveLow: Bool { current > lowWatermark }
    /// Mutations get TMPFAIL past this point: the item pager is not keeping up (or everything is dirty).
    var aboveMutationLimit: Bool { current > mutationLimit }
}
