import SetteeCore
import Synchronization

extension GatewayDatabase {
    /// Prunes a document's channel removals before it is written (`ChannelHistoryRule`, ADR 0151): removals at or
    /// below the purge horizon go; removals older than the metadata purge interval, or past
    /// `Limits.gatewayChannelRemovalsPerDocument`, go once the horizon has risen to them (in the bucket first, so a
    /// crash between the two leaves the horizon high, never a removal unannounced).
    func pruneChannelHistory(_ removals: inout [String: ChannelRemoval]) async throws(GatewayError) {
        guard !removals.isEmpty else { return }
        let o = options
        let horizon = purgeHorizon.withLock { $0.purgedThrough }
        let maxAge = TombstonePurgeRule.intervalSeconds(
            configDays: o.metaPurgeIntervalDays, bucketDays: bucket.metadataPurgeIntervalDays)
        let (kept, raise) = ChannelHistoryRule.prune(
            removals, horizon: horizon, now: o.clock.nowSeconds(), maxAgeSeconds: maxAge,
            maxCount: Limits.gatewayChannelRemovalsPerDocument)
        if kept.count == removals.count { return }
        if let raise { try await raisePurgeHorizon(to: raise) }
        _ = channelRemovalsPruned.add(removals.count - kept.count, ordering: .relaxed)
        removals = kept
    }
}
