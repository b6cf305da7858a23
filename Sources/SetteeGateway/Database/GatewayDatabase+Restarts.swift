import Logging
import SetteeCore
import SetteeJSON
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
    static func ids<S: Sequence<String>>(
        _ ids: S, in vbuckets: Set<VBucketID>, count: Int, key: (String) -> String = { $0 }
    ) -> [String] {
        guard count > 0 else { return [] }
        return ids.filter { vbuckets.contains(VBucketHash.vbucket(forKey: key($0), count: count)) }
    }

    /// The principals among `names` (users, or roles) whose item (`PrincipalRecord.key`) is in one of `vbuckets`.
    static func principals<S: Sequence<String>>(
        _ names: S, isRole: Bool, in vbuckets: Set<VBucketID>, count: Int
    ) -> [(name: String, isRole: Bool)] {
        ids(names, in: vbuckets, count: count) { PrincipalRecord.key($0, isRole: isRole) }.map { ($0, isRole) }
    }
}

/// A vBucket restarted from seqno 0 (ADR 0096): its stream may have skipped deletions (a failover promoted a copy
/// without some writes, a bucket flush, purged tombstones), so a document indexed from it and not delivered again
/// would stay in the index, in `_changes`, `_all_docs` and every channel, for as long as the gateway runs. Each
/// indexed document and principal of a restarted vBucket is read from the bucket as it is now: one that is gone
/// leaves the index, one that the bucket holds in another version is indexed as stored, older or not. Principals of
/// the config file that this changed are written again, as at open.
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
        // Every vBucket's first open says so too (ADR 0098): the round's summary is what a reader of the log needs.
        logger.debug(
            "the bucket's change stream restarted, branched or first opened a vBucket", metadata: ["vb": "\(vb)"])
        if start { Task { await self.recheckRestartedVBuckets() } }
    }

    /// Rounds until no restart is pending. A vBucket with a document or principal that could not be read (a node
    /// still failing over) is pending again, and the wait before the next round doubles up to
    /// `Limits.gatewayRestartRecheckMaxDelayMilliseconds`.
    private func recheckRestartedVBuckets() async {
        var delay = Limits.gatewayRestartRecheckDelayMilliseconds
        while !closedFlag.load(ordering: .relaxed) {
            try? await Task.sleep(for: .milliseconds(delay))
            guard let (vbuckets, count) = restarts.withLock({ $0.take() }) else { return }
            // Each with the sequence indexed now: what the read finds replaces that version only (the stream may index a
            // newer one while the item is read).
            let (ids, principals) = index.withLock { idx in
                (
                    RestartedVBuckets.ids(idx.docs.keys, in: vbuckets, count: count).compactMap { id in
                        idx.docs[id].map { (id, $0.seq) }
                    },
                    RestartedVBuckets.principals(idx.users.keys, isRole: false, in: vbuckets, count: count).compactMap {
                        p in idx.users[p.name].map { (p.name, p.isRole, $0.sequence) }
                    }
                        + RestartedVBuckets.principals(idx.roles.keys, isRole: true, in: vbuckets, count: count)
                        .compactMap { p in idx.roles[p.name].map { (p.name, p.isRole, $0.sequence) } }
                )
            }
            let before = index.withLock { $0.docs.count }
            let read = await BoundedConcurrency.map(ids.count) { i in
                await self.handleCurrentItem(ids[i].0, replacing: ids[i].1)
            }
            let after = index.withLock { $0.docs.count }
            var unread = Set<VBucketID>()
            for (i, ok) in read.enumerated() where ok != true {
                unread.insert(VBucketHash.vbucket(forKey: ids[i].0, count: count))
            }
            var changed = 0
            for (name, isRole, sequence) in principals {
                switch await recheckPrincipal(name, isRole: isRole, replacing: sequence) {
                case .changed: changed += 1
                case .unchanged: break
                case .unread:
                    unread.insert(VBucketHash.vbucket(forKey: PrincipalRecord.key(name, isRole: isRole), count: count))
                }
            }
            if unread.isEmpty {
                delay = Limits.gatewayRestartRecheckDelayMilliseconds
            } else {
                restarts.withLock { $0.pending.formUnion(unread) }
                delay = min(delay * 2, Limits.gatewayRestartRecheckMaxDelayMilliseconds)
            }
            let options = self.options
            if changed > 0 && !(options.users.isEmpty && options.roles.isEmpty) {
                do { try await applyConfigPrincipals() } catch {
                    logger.warning("cannot write the config's principals again", metadata: ["error": "\(error)"])
                }
            }
            logger.log(
                level: ids.isEmpty && principals.isEmpty ? .debug : .notice,
                "rechecked the documents of restarted vBuckets",
                metadata: [
                    "vbuckets": "\(vbuckets.count)", "documents": "\(ids.count)", "gone": "\(max(0, before - after))",
                    "principalsChanged": "\(changed)", "vbucketsToRetry": "\(unread.count)",
                ])
        }
        restarts.withLock { $0.running = false }
    }

    enum PrincipalRecheck { case changed, unchanged, unread }

    /// Installs the principal as its item holds it now (nil when absent) in place of the version with sequence
    /// `replacing`, unless the stream installed another meanwhile. A failed read leaves it as it is.
    private func recheckPrincipal(_ name: String, isRole: Bool, replacing: UInt64) async -> PrincipalRecheck {
        let bucket = self.bucket
        let key = PrincipalRecord.key(name, isRole: isRole)
        let item: BucketItem?
        do { item = try await bucketCall { () async throws(GatewayBucketError) in try await bucket.get(key) } } catch {
            logger.warning("cannot read a principal to recheck", metadata: ["key": "\(key)", "error": "\(error)"])
            return .unread
        }
        let record = item.flatMap { try? JSON.parse($0.value) }.flatMap { PrincipalRecord(json: $0, isRole: isRole) }
        // An item that is not a principal is skipped, as the stream's handler skips it.
        if item != nil && record == nil { return .unchanged }
        return applyPrincipal(record, name: name, isRole: isRole, replacing: replacing) ? .changed : .unchanged
    }
}
