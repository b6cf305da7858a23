import Logging
import SetteeCore
import Synchronization

/// Evicts values of clean items when the bucket is above its high watermark, down to the low one
/// (valueOnly eviction: keys and metadata stay, so misses are still answered from memory).
///
/// Runs on the flusher thread after each batch: that is where items become clean, i.e. evictable,
/// and it keeps eviction and persistence from racing for the same CPU. Two passes in clock style:
/// the first skips (and clears) recently referenced items, the second takes any clean value.
enum ItemPager {
    /// Returns the bytes freed.
    @discardableResult
    static func run(_ core: EngineCore, startAt start: Int) -> Int {
        let memory = core.memory
        guard memory.aboveHigh else { return 0 }
        var freedTotal = 0
        var evictedTotal = 0
        let n = core.vbuckets.count
        pass: for pass in 0..<2 {
            for i in 0..<n {
                if !memory.aboveLow { break pass }
                let vb = core.vbuckets[(start + i) % n]
                let (freed, count) = vb.table.withLock { t -> (Int, Int) in
                    t.evictValues(secondChance: pass == 0)
                }
                if freed > 0 {
                    memory.add(-freed)
                    freedTotal += freed
                    evictedTotal += count
                }
            }
        }
        if evictedTotal > 0 {
            core.evictions.wrappingAdd(evictedTotal, ordering: .relaxed)
            core.logger.debug(
                "item pager evicted values", metadata: ["count": "\(evictedTotal)", "bytes": "\(freedTotal)"])
        }
        return freedTotal
    }
}

extension VBucketTable {
    /// Drops the values of clean, live, resident items of this vBucket. With `secondChance`, items
    /// referenced since the last pass only lose their reference bit.
    mutating func evictValues(secondChance: Bool) -> (freed: Int, count: Int) {
        var freed = 0
        var count = 0
        for i in 0..<items.capacity where items.isOccupied(i) {
            // Read what decides before changing anything: a copy of the item still alive at the change would make
            // the change copy its allocation (copy-on-write).
            let (evictable, referenced, size): (Bool, Bool, Int) = {
                let item = items[at: i]
                return (!item.dirty && !item.deleted && item.hasValue, item.referenced, item.valueCount)
            }()
            // A prepare stays resident: its commit re-queues it for the flusher, which needs the value.
            guard evictable, pending.isEmpty || !isPrepare(items.key(at: i)) else { continue }
            if secondChance && referenced {
                items[at: i].referenced = false
            } else {
                items[at: i].value = nil
                freed += size
                count += 1
            }
        }
        memUsed -= freed
        nonResident += count
        return (freed, count)
    }
}
