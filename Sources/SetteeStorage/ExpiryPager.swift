import Logging
import SetteeCore
import Synchronization

/// Periodically turns expired items into deletions (tombstone, new seqno, queued for the flusher), so
/// expired documents leave memory and disk even if nobody reads them. Lazy expiry on access does the
/// same for documents that are read first. Time comes from the injected `WallClock`.
enum ExpiryPager {
    /// The pager thread: scan, sleep `interval` (woken early on shutdown), repeat until stopped.
    static func loop(_ core: EngineCore) {
        while core.stop == .running {
            core.pagerWakeup.locked {
                if core.stop == .running { core.pagerWakeup.waitLocked(seconds: core.options.expiryPagerInterval) }
            }
            if core.stop != .running { break }
            _ = scan(core)
            _ = TombstonePurger.scan(core)
        }
    }

    /// One pass over every active vBucket. Returns the number of items expired.
    static func scan(_ core: EngineCore) -> Int {
        var total = 0
        for vb in core.vbuckets {
            let nowNs = core.clock.nowNanoseconds()
            let nowS = UInt32(truncatingIfNeeded: nowNs / 1_000_000_000)
            var fx = Effects()
            vb.table.withLock { t in
                guard t.state == .active else { return }
                var expiredKeys: [[UInt8]] = []
                for (key, item) in t.items where !item.deleted && Expiry.isExpired(item.expiry, nowSeconds: nowS) {
                    expiredKeys.append(key.bytes)
                }
                for key in expiredKeys {
                    _ = t.live(key, nowSeconds: nowS, nowNanoseconds: nowNs, fx: &fx)
                }
            }
            total += fx.expired
            if fx.enqueued != 0 || fx.memDelta != 0 || fx.expiredAny { core.apply(fx, vb: vb.id) }
        }
        if total > 0 { core.logger.debug("expiry pager expired items", metadata: ["count": "\(total)"]) }
        return total
    }
}
