import CPrefetch
import SetteeCore
import Synchronization

/// One look-up a read buffer will make: the request's vBucket and its key's bytes in place (ADR 0114).
///
/// `leadingByte` is a byte the engine key has before `key`, when the key is not stored as it came: a named
/// collection's engine key is `CollectionKey.engineMarker` followed by the wire key (LEB128 id ‖ logical key, ADR
/// 0129), so its look-up warms as `marker ‖ key` without the wire bytes being copied first. Nil for a key stored as
/// it came.
public struct WarmKey {
    public var vb: VBucketID
    public var leadingByte: UInt8?
    public var key: UnsafeRawBufferPointer
    @inlinable public init(vb: VBucketID, leadingByte: UInt8? = nil, key: UnsafeRawBufferPointer) {
        self.vb = vb
        self.leadingByte = leadingByte
        self.key = key
    }

    /// The engine key's length in bytes (`key` and the leading byte, if any).
    var engineKeyCount: Int { key.count + (leadingByte == nil ? 0 : 1) }
}

extension BucketEngine {
    /// The most look-ups one `warm` call takes (the node's read batch of pipelined requests is ~16).
    public static let warmCapacity = 32

    /// Starts the cache misses of the look-ups `keys` are about to make, all of them together, so they overlap
    /// instead of each look-up waiting for its own three (ADR 0114). A hint: it changes nothing, answers nothing,
    /// and a key it cannot warm (no such vBucket, an empty or long key) is passed over; the look-up then checks
    /// as always. A key with a `leadingByte` (a named collection's) is warmed as that byte followed by its bytes,
    /// built on the stack. In three passes, each starting loads whose addresses the pass before brought in:
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
                guard k.vb.index < vbuckets.count, k.key.count > 0, k.engineKeyCount <= DocKey.inlineCapacity else {
                    hashes[j] = 0
                    continue
                }
                if let leading = k.leadingByte {
                    hashes[j] = DocKey(leading: leading, inline: k.key).hashValue
                } else {
                    hashes[j] = DocKey(k.key).hashValue
                }
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
