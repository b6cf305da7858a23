import SetteeCore

/// How long a document remembers the channels it left (ADR 0151), as a pure decision.
///
/// A document's `_sync.channels` keeps, for each channel it left, the removal's sequence and revision (Sync Gateway's
/// removal entries `{"seq", "rev", "del"}`), so a reader of that channel whose checkpoint is below the removal gets a
/// `removed` row and drops the document. Kept forever, a document that moves through many channels (per-user or
/// per-day channels) grows without bound. A removal entry can go once no client can still need it:
///
/// 1. **At or below the purge horizon** (`PurgeHorizon`): a pull from below the horizon is refused (410) and restarts
///    from 0, where a removed document is simply not listed; a pull from at or above it has passed the removal, and one
///    that began from 0 at this horizon (`ChangesSince.pullHorizon`) had the removal in its first view. Free.
/// 2. **Older than the metadata purge interval** (`meta_purge_interval`, the tombstones' rule, by `removedAt`), or
///    **past the count cap** (`Limits.gatewayChannelRemovalsPerDocument`, oldest sequences first): a client offline
///    longer may still be below it, so the horizon must first rise to the highest such removal's sequence; that
///    client then restarts its pull (410) instead of silently keeping a document it may no longer read.
///
/// Removals without a time (written before the time was kept) go only by rules 1 and the count cap.
enum ChannelHistoryRule {
    /// The removals to keep, and the sequence the purge horizon must reach first (nil: no raise needed).
    /// `now` and `removedAt` are seconds since the epoch; a removal time in the future (a clock moved back) is young.
    static func prune(
        _ removals: [String: ChannelRemoval], horizon: UInt64, now: UInt32, maxAgeSeconds: Double, maxCount: Int
    ) -> (kept: [String: ChannelRemoval], raiseHorizonTo: UInt64?) {
        var kept: [String: ChannelRemoval] = [:]
        var raise: UInt64? = nil
        for (channel, r) in removals {
            if r.seq <= horizon { continue }
            if let at = r.removedAt, now >= at, maxAgeSeconds.isFinite, Double(now - at) >= max(0, maxAgeSeconds) {
                raise = max(raise ?? 0, r.seq)
                continue
            }
            kept[channel] = r
        }
        let cap = max(0, maxCount)
        if kept.count > cap {
            // Oldest first; the channel name breaks ties so the choice does not depend on dictionary order.
            let order = kept.sorted { ($0.value.seq, $0.key) < ($1.value.seq, $1.key) }
            for (channel, r) in order.prefix(kept.count - cap) {
                kept[channel] = nil
                raise = max(raise ?? 0, r.seq)
            }
        }
        return (kept, raise)
    }
}
