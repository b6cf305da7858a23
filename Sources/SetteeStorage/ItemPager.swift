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
        var i = items.startIndex
        while i != items.endIndex {
            // Mutating through `values[i]` changes no structure, so the index stays valid.
            let item = items.values[i]
            // A prepare stays resident: its commit re-queues it for the flusher, which needs the value.
            if !item.dirty && !item.deleted && !isPrepare(items.keys[i]), let value = item.value {
                if secondChance && item.referenced {
                    items.values[i].referenced = false
                } else {
                    items.values[i].value = nil
                    freed += value.count
                    count += 1
                }
            }
            items.formIndex(after: &i)
        }
        memUsed -= freed
        nonResident += count
        return (freed, count)
    }
}
