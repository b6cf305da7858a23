import Logging
import SetteeCore
import SetteeJSON
import Synchronization

/// The vBuckets whose stream restarted from seqno 0, or branched, and whose documents have not been checked yet.
struct RestartedVBuckets {
    /// Restarted from 0: every indexed document and principal of these is read again (ADR 0096).
    var pending = Set<VBucketID>()
    /// First opened, or reopened in a newer history: only this gateway's writes the stream has not delivered yet
    /// (`ChannelIndex.aheadOfStream`) are read again (ADR 0098).
    var branched = Set<VBucketID>()
    var vbucketCount = 0
    /// A recheck task is running (it takes the pending vBuckets until it finds none).
    var running = false

    /// Takes every pending vBucket (one both restarted and branched counts as restarted); when there is none, the task
    /// that asked ends (`running` cleared in the same step, so a restart noted after it starts a new task).
    mutating func take() -> (restarted: Set<VBucketID>, branched: Set<VBucketID>, count: Int)? {
        if pending.isEmpty && branched.isEmpty {
            running = false
            return nil
        }
        defer {
            pending = []
            branched = []
        }
        return (pending, branched.subtracting(pending), vbucketCount)
    }

    /// The ids among `ids` whose key is in one of `vbuckets` of a bucket of `count` vBuckets.
    static func ids<S: Sequence<String>>(
        _ ids: S, in vbuckets: Set<VBucketID>, count: Int, key: (String) -> String = { $0 }
    ) -> [String] {
        guard count > 0, !vbuckets.isEmpty else { return [] }
        return ids.filter { vbuckets.contains(VBucketHash.vbucket(forKey: key($0), count: count)) }
    }

    /// The principals among `names` (users, or roles) whose item (`PrincipalRecord.key`) is in one of `vbuckets`.
    static func principals<S: Sequence<String>>(
        _ names: S, isRole: Bool, in vbuckets: Set<VBucketID>, count: Int
    ) -> [(name: String, isRole: Bool)] {
        ids(names, in: vbuckets, count: count) { PrincipalRecord.key($0, isRole: isRole) }.map { ($0, isRole) }
    }

    /// What an item key written by the gateway names: a document id, or a user or role.
    enum OwnKey: Equatable {
        case document(String)
        case principal(name: String, isRole: Bool)
    }

    static func ownKey(_ key: String) -> OwnKey? {
        if let principal = PrincipalRecord.parse(key: key) {
            return .principal(name: principal.name, isRole: principal.isRole)
        }
        return key.hasPrefix("_sync:") ? nil : .document(key)
    }
}

/// A vBucket restarted from seqno 0 (ADR 0096): its stream may have skipped deletions (a failover promoted a copy
/// without some writes, a bucket flush, purged tombstones), so a document indexed from it and not delivered again
/// would stay in the index, in `_changes`, `_all_docs` and every channel, for as long as the gateway runs. Each
/// indexed document and principal of a restarted vBucket is read from the bucket as it is now: one that is gone
/// leaves the index, one that the bucket holds in another version is indexed as stored, older or not. Principals of
/// the config file that this changed are written again, as at open. A vBucket first opened or branched under the
/// stream (ADR 0098) may have lost only what this gateway wrote and indexed ahead of the stream: those items are read
/// the same way.
extension GatewayDatabase {
    /// Notes `vb`'s restart (or, `branched`, its first open or new history); a task checks the vBuckets' documents
    /// after `Limits.gatewayRestartRecheckDelayMilliseconds`, so a burst of restarts costs one pass over the index.
    func vbucketRestarted(_ vb: VBucketID, vbucketCount: Int, branched: Bool = false) {
        let start = restarts.withLock { r -> Bool in
            if branched { r.branched.insert(vb) } else { r.pending.insert(vb) }
            r.vbucketCount = vbucketCount
            if r.running { return false }
            r.running = true
            return true
        }
        // Every vBucket's first open says so too (ADR 0098): the round's summary is what a reader of the log needs.
        logger.debug(
            "the bucket's change stream restarted, branched or first opened a vBucket",
            metadata: ["vb": "\(vb)", "branched": "\(branched)"])
        if start { Task { await self.recheckRestartedVBuckets() } }
    }

    /// What one round reads: documents and principals, each with the sequence indexed when the round began (nil: not
    /// indexed) and, for this gateway's writes ahead of the stream, the CAS of that write.
    private struct RecheckRound {
        var documents: [(id: String, indexed: UInt64?, own: CAS?)] = []
        var principals: [(name: String, isRole: Bool, indexed: UInt64?, own: CAS?)] = []
    }

    private func recheckRound(restarted: Set<VBucketID>, branched: Set<VBucketID>, count: Int) -> RecheckRound {
        index.withLock { idx in
            var round = RecheckRound()
            for id in RestartedVBuckets.ids(idx.docs.keys, in: restarted, count: count) {
                round.documents.append((id, idx.docs[id]?.seq, idx.aheadOfStream[id]))
            }
            for isRole in [false, true] {
                let names = isRole ? idx.roles.keys : idx.users.keys
                for p in RestartedVBuckets.principals(names, isRole: isRole, in: restarted, count: count) {
                    let indexed = (isRole ? idx.roles[p.name] : idx.users[p.name])?.sequence
                    round.principals.append(
                        (p.name, isRole, indexed, idx.aheadOfStream[PrincipalRecord.key(p.name, isRole: isRole)]))
                }
            }
            // Writes of this gateway ahead of the stream in branched or restarted vBuckets, unless listed above (a
            // restarted vBucket's indexed item): in a restarted one, a write that removed its item from the index.
            for (key, cas) in idx.aheadOfStream {
                let vb = VBucketHash.vbucket(forKey: key, count: count)
                guard branched.contains(vb) || restarted.contains(vb) else { continue }
                switch RestartedVBuckets.ownKey(key) {
                case .document(let id):
                    let indexed = idx.docs[id]?.seq
                    guard indexed == nil || !restarted.contains(vb) else { continue }
                    round.documents.append((id, indexed, cas))
                case .principal(let name, let isRole):
                    let indexed = (isRole ? idx.roles[name] : idx.users[name])?.sequence
                    guard indexed == nil || !restarted.contains(vb) else { continue }
                    round.principals.append((name, isRole, indexed, cas))
                case nil:
                    continue
                }
            }
            return round
        }
    }

    /// Rounds until no restart is pending. A vBucket with a document or principal that could not be read (a node
    /// still failing over) is pending again, and the wait before the next round doubles up to
    /// `Limits.gatewayRestartRecheckMaxDelayMilliseconds`.
    private func recheckRestartedVBuckets() async {
        var failedRounds = 0
        while !closedFlag.load(ordering: .relaxed) {
            let delay = Backoff.doubling(
                Limits.gatewayRestartRecheckDelayMilliseconds, attempt: failedRounds,
                cap: Limits.gatewayRestartRecheckMaxDelayMilliseconds)
            try? await Task.sleep(for: .milliseconds(delay))
            guard let (restarted, branched, count) = restarts.withLock({ $0.take() }) else { return }
            // What the read finds replaces the version indexed now, and only that one (the stream may index a newer
            // version while the item is read).
            let round = recheckRound(restarted: restarted, branched: branched, count: count)
            let documents = round.documents
            let before = index.withLock { $0.docs.count }
            let read = await BoundedConcurrency.map(documents.count) { i in
                await self.handleCurrentItem(documents[i].id, replacing: documents[i].indexed)
            }
            let after = index.withLock { $0.docs.count }
            var unread = (restarted: Set<VBucketID>(), branched: Set<VBucketID>())
            var settled: [(key: String, cas: CAS)] = []
            for (i, ok) in read.enumerated() {
                let (id, _, own) = documents[i]
                let vb = VBucketHash.vbucket(forKey: id, count: count)
                if ok == true {
                    if let own { settled.append((id, own)) }
                } else if restarted.contains(vb) {
                    unread.restarted.insert(vb)
                } else {
                    unread.branched.insert(vb)
                }
            }
            var changed = 0
            for (name, isRole, indexed, own) in round.principals {
                let key = PrincipalRecord.key(name, isRole: isRole)
                switch await recheckPrincipal(name, isRole: isRole, replacing: indexed) {
                case .changed: changed += 1
                case .unchanged: break
                case .unread:
                    let vb = VBucketHash.vbucket(forKey: key, count: count)
                    if restarted.contains(vb) { unread.restarted.insert(vb) } else { unread.branched.insert(vb) }
                    continue
                }
                if let own { settled.append((key, own)) }
            }
            // Read since they were written: no longer ahead of the stream (unless written again meanwhile).
            index.withLock { idx in
                for (key, cas) in settled where idx.aheadOfStream[key] == cas { idx.aheadOfStream[key] = nil }
            }
            if unread.restarted.isEmpty && unread.branched.isEmpty {
                failedRounds = 0
            } else {
                restarts.withLock {
                    $0.pending.formUnion(unread.restarted)
                    $0.branched.formUnion(unread.branched)
                }
                failedRounds = min(failedRounds + 1, Int.bitWidth)
            }
            let options = self.options
            if changed > 0 && !(options.users.isEmpty && options.roles.isEmpty) {
                do { try await applyConfigPrincipals() } catch {
                    logger.warning("cannot write the config's principals again", metadata: ["error": "\(error)"])
                }
            }
            logger.log(
                level: documents.isEmpty && round.principals.isEmpty ? .debug : .notice,
                "rechecked the documents of restarted or branched vBuckets",
                metadata: [
                    "restarted": "\(restarted.count)", "branched": "\(branched.count)",
                    "documents": "\(documents.count)", "gone": "\(max(0, before - after))",
                    "principals": "\(round.principals.count)", "principalsChanged": "\(changed)",
                    "vbucketsToRetry": "\(unread.restarted.count + unread.branched.count)",
                ])
        }
        restarts.withLock { $0.running = false }
    }

    enum PrincipalRecheck { case changed, unchanged, unread }

    /// Installs the principal as its item holds it now (nil when absent) in place of the version with sequence
    /// `replacing` (nil: none was installed), unless the stream installed another meanwhile. A failed read leaves it
    /// as it is.
    private func recheckPrincipal(_ name: String, isRole: Bool, replacing: UInt64?) async -> PrincipalRecheck {
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

/// Writes this gateway indexed ahead of its change stream and that the stream has not delivered for a while. A
/// branch recheck (ADR 0098) reads the writes ahead of the stream when the branch is noticed; a write acknowledged by
/// the old active and indexed after that round took its list (the window of about one request's round trip during a
/// failover), or written to a node that was failed over without knowing it, is on a history the stream no longer
/// follows and would stay indexed until the next branch of its vBucket. Such a write's vBucket is rechecked as
/// branched once the write has been ahead of the stream for `DatabaseOptions.ownWriteStreamWaitSeconds`: the round
/// reads it as the bucket holds it (gone leaves the index) and settles it.
extension GatewayDatabase {
    /// `key` was written by this gateway at `cas` and is indexed before the stream delivered it.
    func noteAheadOfStream(_ key: String, cas: CAS) {
        index.withLock { $0.aheadOfStream[key] = cas }
        armOwnWriteTimer()
    }

    /// Starts the task that looks at the writes ahead of the stream every `ownWriteStreamWaitSeconds`: an entry
    /// present at the same CAS at two looks in a row is late, and its vBucket is rechecked. The task ends when no
    /// write is ahead of the stream (a write noted meanwhile starts it again) or the database closes.
    func armOwnWriteTimer() {
        guard !ownWriteTimer.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let wait = options.ownWriteStreamWaitSeconds
        Task { [weak self] in
            var previous: [String: CAS] = [:]
            while true {
                try? await Task.sleep(for: .seconds(wait))
                guard let self, !self.closedFlag.load(ordering: .relaxed) else { return }
                let ahead = self.index.withLock { $0.aheadOfStream }
                if ahead.isEmpty {
                    self.ownWriteTimer.store(false, ordering: .releasing)
                    // A write noted after the look found the timer still set: keep going for it.
                    guard !self.index.withLock({ $0.aheadOfStream.isEmpty }),
                        !self.ownWriteTimer.exchange(true, ordering: .acquiringAndReleasing)
                    else { return }
                    previous = [:]
                    continue
                }
                let count = self.restarts.withLock { $0.vbucketCount }
                var late = Set<VBucketID>()
                if count > 0 {
                    for (key, cas) in ahead where previous[key] == cas {
                        late.insert(VBucketHash.vbucket(forKey: key, count: count))
                    }
                }
                previous = ahead
                guard !late.isEmpty else { continue }
                self.logger.notice(
                    "writes of this gateway not delivered by the change stream are read again",
                    metadata: ["vbuckets": "\(late.count)", "waitSeconds": "\(wait)"])
                for vb in late { self.vbucketRestarted(vb, vbucketCount: count, branched: true) }
            }
        }
    }
}
