import SetteeCore
import Synchronization

/// How the engine counts RAM against the bucket quota, and the watermarks derived from it.
///
/// We do not ask malloc; we estimate: key bytes + value bytes + a fixed per-item overhead. Since ADR 0048 an
/// item is one allocation (`ItemBox`: 16-byte object header, 35-byte `ItemHeader`, key, value) plus one slot of
/// its vBucket's `ItemTable` (9 bytes at a load of 0.65-0.85, 10.6-13.8 bytes per item); malloc adds 8 bytes and
/// rounds to 16. The overhead is the upper end of that: 16 + 35 + 8 + 15 + 14 = 88, kept at 96 (the
/// dictionary and separate value array before cost ~232 bytes beyond key + value; 256 was counted).
/// Measured by `benchmarks/warmup-and-memory.sh` (RSS growth per item, benchmarks/README.md): 1,113-1,116 bytes per
/// item for 995-1,000-byte values and 13-byte keys (1,128-1,133 with the 40-byte header), ~100 beyond key + value,
/// so RSS runs ~0.5% above what this counts (~19 of them SQLite's fixed page cache at 1,000,000 items; ADR 0048).
enum MemoryAccounting {
    static let perItemOverhead = 96

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
