import Logging
import SetteeCore
import Synchronization

/// Purges tombstones older than the bucket's purge interval (Couchbase's metadata purge interval) from memory and,
/// through the flusher, from disk: without it every deleted or expired key kept its tombstone in the vBucket's table
/// for good (ADR 0095). Runs on the expiry pager's thread after each expiry pass, in active and replica vBuckets
/// alike (each copy purges its own); time comes from the injected `WallClock`.
enum TombstonePurger {
    /// One pass over every active and replica vBucket. Returns the number of tombstones purged.
    static func scan(_ core: EngineCore) -> Int {
        let age = core.purgeAgeNanoseconds.load(ordering: .relaxed)
        let now = core.clock.nowNanoseconds()
        guard now > age else { return 0 }
        let cutoff = now - age
        var total = 0
        for vb in core.vbuckets {
            let (freed, purged) = vb.table.withLock { t -> (Int, Int) in
                guard t.state == .active || t.state == .replica, !t.held else { return (0, 0) }
                return t.purgeTombstones(cutoffNanoseconds: cutoff)
            }
            guard purged > 0 else { continue }
            total += purged
            core.memory.add(-freed)
            core.stateRowChanged(vb.id)
        }
        if total > 0 {
            core.tombstonesPurged.wrappingAdd(total, ordering: .relaxed)
            core.wakeFlusherIfIdle()
            core.logger.debug("tombstone purger purged", metadata: ["count": "\(total)"])
        }
        return total
    }
}
