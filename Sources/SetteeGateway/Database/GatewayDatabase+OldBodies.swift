import Logging
import SetteeCore
import SetteeDocument
import Synchronization

extension GatewayDatabase {
    /// The database's old-body window (`old_rev_expiry_seconds`, or `rev_max_age_seconds` with delta sync on).
    var oldBodyRule: OldBodyRule {
        let o = options
        return OldBodyRule(
            windowSeconds: OldBodyRule.window(oldRevExpirySeconds: o.oldRevExpirySeconds, deltaSync: o.deltaSync))
    }

    /// Seconds between two sweeps: `oldBodySweepSeconds` when set, else `OldBodyRule.sweepInterval`.
    var oldBodySweepInterval: Double {
        if let s = options.oldBodySweepSeconds { return max(s, 0.01) }
        return oldBodyRule.sweepInterval
    }

    /// Runs `sweepOldBodies` every `oldBodySweepInterval` while the database is open.
    func startOldBodySweeper() {
        let task = Task { [weak self] in
            while !Task.isCancelled {
                guard let wait = self?.oldBodySweepInterval else { return }
                try? await Task.sleep(for: .seconds(wait))
                guard let self, !Task.isCancelled, !self.closedFlag.load(ordering: .relaxed) else { return }
                _ = await self.sweepOldBodies()
            }
        }
        oldBodySweeper.withLock { $0 = task }
    }

    /// One sweep (ADR 0156): drops the replaced revision bodies older than the window from documents not written
    /// since (a write drops its own), and, while the database's ancestor bodies total more than
    /// `DatabaseOptions.oldBodyMaxBytes`, every ancestor body of the documents whose oldest one is oldest
    /// (`OldBodyRule.sweepPlan`). Each document is read and written back with its CAS, with the same revisions and
    /// sequence (no change is announced); a document another writer changed meanwhile is left to that write's rule.
    /// Returns the bodies dropped; nil when a sweep is going already.
    public func sweepOldBodies() async -> Int? {
        guard !oldBodySweepRunning.exchange(true, ordering: .acquiringAndReleasing) else { return nil }
        defer { oldBodySweepRunning.store(false, ordering: .releasing) }
        let rule = oldBodyRule
        let now = options.clock.nowSeconds()
        let summaries = index.withLock { idx in
            idx.docs.compactMap { id, e -> (id: String, bytes: Int, oldestAt: UInt32)? in
                e.ancestorBodyBytes > 0 ? (id, e.ancestorBodyBytes, e.oldestAncestorBodyAt) : nil
            }
        }
        let plan = rule.sweepPlan(summaries, now: now, maxBytes: options.oldBodyMaxBytes)
        var dropped = 0
        for (ids, evict) in [(plan.expire, false), (plan.evict, true)] {
            for id in ids {
                guard !closedFlag.load(ordering: .relaxed) else { return dropped }
                dropped += await dropOldBodies(of: id, rule: rule, now: now, evict: evict)
            }
        }
        if dropped > 0 {
            _ = oldBodiesExpired.add(dropped, ordering: .relaxed)
            logger.debug("old revision bodies dropped", metadata: ["bodies": "\(dropped)"])
        }
        return dropped
    }

    /// Drops `id`'s expired ancestor bodies (`evict`: all of them) and writes the document back; the bodies dropped,
    /// 0 when none were due or the write lost to another.
    private func dropOldBodies(of id: String, rule: OldBodyRule, now: UInt32, evict: Bool) async -> Int {
        guard let loaded = try? await load(id), case .found(var doc) = loaded else { return 0 }
        var tree = doc.meta.tree
        var times = doc.meta.oldBodyTimes
        let n =
            evict
            ? OldBodyRule.evictAll(tree: &tree, times: &times)
            : rule.apply(tree: &tree, times: &times, now: now, stampUntimed: false)
        guard n > 0 else { return 0 }
        let old = doc
        doc.meta.tree = tree
        doc.meta.oldBodyTimes = times
        doc.meta.revChannels = doc.meta.revChannels.filter { tree.body(of: $0.key) != nil }
        guard let cas = try? await writeItem(&doc, old: old, expiry: doc.meta.expiry ?? 0) else { return 0 }
        doc.cas = cas
        indexOwnWrite(doc)
        return n
    }
}
