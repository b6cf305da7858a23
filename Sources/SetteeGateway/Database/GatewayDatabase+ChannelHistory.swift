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

extension GatewayDatabase {
    /// Prunes, at rest, what documents not written again keep of their past (ADR 0151 amendments): the channel
    /// removals that became due since their last write (`pruneChannelHistory` runs only when a document is written, so
    /// a document that left a channel and was never written again would keep the removal for ever), and the
    /// `recent_sequences` of a document not written since the previous run (its sequence at or below the stable
    /// sequence that run saw, `TombstoneCompactionStatus.idleSequenceMark`), trimmed to its own (they let a gateway
    /// close the gaps of deduplicated updates; below the stable sequence there is none left to close; a document still
    /// being written is left alone, so each is written back at most once per idle period). Run by the tombstone
    /// compaction after its purges.
    ///
    /// The plan comes from the index (`ChannelHistoryRule` over each document's removals; the count of its recent
    /// sequences and the previous run's mark); the purge horizon is raised once, to the highest sequence the plan drops by
    /// age or count, before any document is written, so no removal goes unannounced. Each planned document is then
    /// read, pruned by the same rules and written back with its CAS, keeping its revisions and sequence (no change is
    /// announced; a removal the clock made due since the plan raises the horizon first). A document another writer
    /// changed meanwhile is left to that write. `stop` is asked before each document. Returns the removals dropped and
    /// the documents whose recent sequences were trimmed, counting documents written back only.
    func pruneIdleMetadata(stop: () -> Bool) async throws(GatewayError) -> (removals: Int, recentSequences: Int) {
        let maxAge = tombstonePurgeIntervalSeconds
        let cap = Limits.gatewayChannelRemovalsPerDocument
        let now = options.clock.nowSeconds()
        let horizon = purgeHorizon.withLock { $0.purgedThrough }
        let idleMark = tombstoneCompaction.withLock { $0.idleSequenceMark }
        let (ids, raise, stable) = index.withLock { idx -> ([String], UInt64?, UInt64) in
            var ids: [String] = []
            var raise: UInt64? = nil
            for (id, entry) in idx.docs {
                let trims = entry.recentSequences > 1 && entry.seq <= idleMark
                guard trims || !entry.removals.isEmpty else { continue }
                let (kept, r) = ChannelHistoryRule.prune(
                    entry.removals, horizon: horizon, now: now, maxAgeSeconds: maxAge, maxCount: cap)
                guard trims || kept.count < entry.removals.count else { continue }
                ids.append(id)
                if let r { raise = max(raise ?? 0, r) }
            }
            return (ids.sorted(), raise, idx.sequences.stable)
        }
        // The next run trims what was not written after this point.
        defer { tombstoneCompaction.withLock { $0.idleSequenceMark = stable } }
        if let raise { try await raisePurgeHorizon(to: raise) }
        var dropped = 0
        var trimmed = 0
        for id in ids {
            if stop() { break }
            guard let loaded = try? await load(id), case .found(var doc) = loaded else { continue }
            let (kept, r) = ChannelHistoryRule.prune(
                doc.meta.removals, horizon: purgeHorizon.withLock { $0.purgedThrough },
                now: options.clock.nowSeconds(), maxAgeSeconds: maxAge, maxCount: cap)
            let trims = doc.meta.recentSequences != [doc.meta.sequence] && doc.meta.sequence <= idleMark
            guard trims || kept.count < doc.meta.removals.count else { continue }
            if let r { try await raisePurgeHorizon(to: r) }
            let old = doc
            doc.meta.removals = kept
            if trims { doc.meta.recentSequences = [doc.meta.sequence] }
            guard let cas = try? await writeItem(&doc, old: old, expiry: doc.meta.expiry ?? 0) else { continue }
            doc.cas = cas
            indexOwnWrite(doc)
            dropped += old.meta.removals.count - kept.count
            if trims { trimmed += 1 }
        }
        if dropped > 0 { _ = channelRemovalsPruned.add(dropped, ordering: .relaxed) }
        return (dropped, trimmed)
    }
}
