import Logging
import SetteeCore
import Synchronization

/// The vBuckets whose stream restarted from seqno 0 and whose documents have not been checked yet.
struct RestartedVBuckets {
    var pending = Set<VBucketID>()
    var vbucketCount = 0
    /// A recheck task is running (it takes `pending` until it finds it empty).
    var running = false

    /// Takes every pending vBucket; when there is none, the task that asked ends (`running` cleared in the same step,
    /// so a restart noted after it starts a new task).
    mutating func take() -> (vbuckets: Set<VBucketID>, count: Int)? {
        if pending.isEmpty {
            running = false
            return nil
        }
        defer { pending = [] }
        return (pending, vbucketCount)
    }

    /// The ids among `ids` whose key is in one of `vbuckets` of a bucket of `count` vBuckets.
    static func ids<S: Sequence<String>>(_ ids: S, in vbuckets: Set<VBucketID>, count: Int) -> [String] {
        guard count > 0 else { return [] }
        return ids.filter { vbuckets.contains(VBucketHash.vbucket(forKey: $0, count: count)) }
    }
}

/// A vBucket restarted from seqno 0 (ADR 0096): its stream may have skipped deletions (a failover promoted a copy
/// without some writes, a bucket flush, purged tombstones), so a document indexed from it and not delivered again
/// would stay in the index, in `_changes`, `_all_docs` and every channel, for as long as the gateway runs. Each
/// indexed document of a restarted vBucket is read from the bucket as it is now (`handleCurrentItem`): one that is
/// gone leaves the index, one that changed is indexed as it is.
extension GatewayDatabase {
    /// Notes `vb`'s restart; a task checks the restarted vBuckets' documents after
    /// `Limits.gatewayRestartRecheckDelayMilliseconds`, so a burst of restarts costs one pass over the index.
    func vbucketRestarted(_ vb: VBucketID, vbucketCount: Int) {
        let start = restarts.withLock { r -> Bool in
            r.pending.insert(vb)
            r.vbucketCount = vbucketCount
            if r.running { return false }
            r.running = true
            return true
        }
        logger.notice("the bucket's change stream restarted a vBucket from 0", metadata: ["vb": "\(vb)"])
        if start { Task { await self.recheckRestartedVBuckets() } }
    }

    private func recheckRestartedVBuckets() async {
        while !closedFlag.load(ordering: .relaxed) {
            try? await Task.sleep(for: .milliseconds(Limits.gatewayRestartRecheckDelayMilliseconds))
            guard let (vbuckets, count) = restarts.withLock({ $0.take() }) else { return }
            let ids = index.withLock { RestartedVBuckets.ids($0.docs.keys, in: vbuckets, count: count) }
            let before = index.withLock { $0.docs.count }
            _ = await BoundedConcurrency.map(ids.count) { i in await self.handleCurrentItem(ids[i]) }
            let after = index.withLock { $0.docs.count }
            logger.notice(
                "rechecked the documents of restarted vBuckets",
                metadata: [
                    "vbuckets": "\(vbuckets.count)", "documents": "\(ids.count)", "gone": "\(max(0, before - after))",
                ])
        }
        restarts.withLock { $0.running = false }
    }
}
