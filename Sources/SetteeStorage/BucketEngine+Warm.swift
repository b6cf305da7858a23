import CPrefetch
import SetteeCore
import Synchronization

/// One look-up a read buffer will make: the request's vBucket and its key's bytes in place (ADR 0114).
public struct WarmKey {
    public var vb: VBucketID
    public var key: UnsafeRawBufferPointer
    @inlinable public init(vb: VBucketID, key: UnsafeRawBufferPointer) {
        self.vb = vb
        self.key = key
    }
}

extension BucketEngine {
    /// The most look-ups one `warm` call takes (the node's read batch of pipelined requests is ~16).
    public static let warmCapacity = 32

    /// Starts the cache misses of the look-ups `keys` are about to make, all of them together, so they overlap
    /// instead of each look-up waiting for its own three (ADR 0114). A hint: it changes nothing, answers nothing,
    /// and a key it cannot warm (no such vBucket, an empty or long key) is passed over; the look-up then checks
    /// as always. In three passes, each starting loads whose addresses the pass before brought in:
    /// 1. each vBucket object's first lines (its lock, table geometry, state and pending writes);
    /// 2. under the vBucket's lock, the key's home tag byte and slot;
    /// 3. under the lock again, the item boxes whose tag matches.
    /// Keys beyond `warmCapacity` are left out.
    public func warm(_ keys: UnsafeBufferPointer<WarmKey>) {
        let n = min(keys.count, Self.warmCapacity)
        guard n > 0 else { return }
        let vbuckets = core.vbuckets
        withUnsafeTemporaryAllocation(of: Int.self, capacity: n) { hashes in
            for j in 0..<n {
                let k = keys[j]
                // 0 marks a key passed over (a real hash of 0 is only passed over too).
                guard k.vb.index < vbuckets.count, k.key.count > 0, k.key.count <= DocKey.inlineCapacity else {
                    hashes[j] = 0
                    continue
                }
                hashes[j] = DocKey(k.key).hashValue
                let object = Unmanaged.passUnretained(vbuckets[k.vb.index]).toOpaque()
                settee_prefetch_for_write(object)
                settee_prefetch_for_write(object + 64)
            }
            for j in 0..<n where hashes[j] != 0 {
                let hash = hashes[j]
                vbuckets[keys[j].vb.index].table.withLock { $0.items.prefetchHome(hash: hash) }
            }
            for j in 0..<n where hashes[j] != 0 {
                let hash = hashes[j]
                vbuckets[keys[j].vb.index].table.withLock { $0.items.prefetchItems(hash: hash) }
            }
        }
    }
}
