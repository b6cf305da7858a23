import SetteeCore
import SetteeStreams
import Synchronization

extension BucketEngine {
    /// Installs one whole snapshot received from the active copy into replica vBucket `vb`: every item
    /// with the producer's seqno, CAS, revSeqno, flags, expiry, datatype and deleted bit (no new seqno or
    /// CAS is assigned), then the high seqno becomes `end` (the snapshot's end, even if its last item was
    /// deduplicated away). With `failoverLog` the vBucket adopts the producer's history in the same step.
    ///
    /// Atomic: readers and change feeds see all of the snapshot or none of it, and the flusher writes a
    /// non-active vBucket's whole dirty queue with its state row (high seqno = `end`, failover log) in one
    /// transaction, so after a crash the file holds whole snapshots only (change-streams.md §2).
    /// `items` must be in increasing seqno order, above the current high seqno and at most `end`.
    /// Throws `.notMyVBucket` unless the vBucket is a replica, `.temporaryFailure` when memory or the
    /// flusher cannot absorb it now (retry later), `.invalidArguments` for out-of-order seqnos, an `end` above
    /// `Limits.maxSeqno` or a revSeqno above `Limits.maxRevSeqno`. `purgeSeqno` is the producer's when its marker
    /// said (ADR 0095): tombstones up to it may be missing from the snapshot, so the copy's purge seqno rises to it,
    /// at most to `end`, and a change feed from this copy below it is rolled back to 0 as on the producer.
    public func applySnapshot(
        _ vb: VBucketID, end: SeqNo, items: [ChangeRecord], failoverLog: FailoverLog? = nil,
        purgeSeqno: SeqNo = .zero
    ) throws(EngineError) {
        guard vb.index < core.vbuckets.count else { throw .notMyVBucket }
        if core.stop != .running { throw .temporaryFailure }
        if core.dirtyCount.load(ordering: .relaxed) + items.count > core.options.maxDirtyQueueItems {
            throw .temporaryFailure
        }
        if core.memory.aboveMutationLimit {
            core.wakeFlusherIfIdle()
            throw .temporaryFailure
        }
        for r in items where r.key.isEmpty || r.key.count > Limits.maxKeyLength { throw .invalidArguments }
        // An item keeps its seqnos in 48 bits (ADR 0048): a producer's larger one is refused, not cut.
        if end.rawValue > Limits.maxSeqno { throw .invalidArguments }
        for r in items where r.meta.revSeqno.rawValue > Limits.maxRevSeqno { throw .invalidArguments }
        // A CAS is nanoseconds of a hybrid clock, below 2^63; warmup refuses a state row past that, so a producer's
        // larger one, kept, would leave the replica unable to start again.
        for r in items where r.meta.cas.rawValue >= 1 << 63 { throw .invalidArguments }
        var fx = Effects()
        var prepares = 0
        let r = core.vbuckets[vb.index].table.withLock { t -> Result<Void, EngineError> in
            guard t.state == .replica else { return .failure(.notMyVBucket) }
            var last = t.highSeqno
            for r in items {
                guard r.meta.bySeqno > last else { return .failure(.invalidArguments) }
                last = r.meta.bySeqno
            }
            guard end >= last else { return .failure(.invalidArguments) }
            for r in items {
                t.installReplicated(r, fx: &fx)
                if r.prepare { prepares += 1 }
            }
            if end > t.highSeqno { t.highSeqno = end }
            let purge = min(purgeSeqno, end)
            if purge > t.purgeSeqno {
                t.purgeSeqno = purge
                t.stateDirty = true
            }
            fx.lastSeqno = t.highSeqno
            if let failoverLog, failoverLog != t.failoverLog {
                t.failoverLog = failoverLog
                t.stateDirty = true
            }
            if t.dirtyQueue.isEmpty { t.stateDirty = true }  // a snapshot of nothing still moves the high seqno
            return .success(())
        }
        try r.get()
        if prepares != 0 { core.replicaPreparesAccepted.wrappingAdd(prepares, ordering: .relaxed) }
        core.stateRowChanged(vb)
        core.apply(fx, vb: vb)
        // Wakes an idle flusher only: one that gathers keeps gathering (ADR 0082), the snapshot's items and state
        // row go with its batch.
        core.wakeFlusherIfIdle()
    }

    /// Adopts `log` as the failover log of non-active `vb` (a consumer adopting its producer's history on
    /// stream accept). Persisted with the next flusher batch.
    public func adoptFailoverLog(_ vb: VBucketID, _ log: FailoverLog) throws(EngineError) {
        guard vb.index < core.vbuckets.count else { throw .notMyVBucket }
        let changed = core.vbuckets[vb.index].table.withLock { t -> Result<Bool, EngineError> in
            guard t.state != .active else { return .failure(.notMyVBucket) }
            guard t.failoverLog != log else { return .success(false) }
            t.failoverLog = log
            t.stateDirty = true
            return .success(true)
        }
        if try changed.get() {
            core.stateRowChanged(vb)
            core.flusherWakeup.broadcast()
        }
    }

    /// What a producer judges a stream request of `vb` against, read under one lock: state, failover log,
    /// high seqno.
    public func streamHistory(_ vb: VBucketID) -> (
        state: VBucketState, log: FailoverLog, highSeqno: SeqNo, purgeSeqno: SeqNo
    ) {
        precondition(vb.index < core.vbuckets.count, "\(vb) out of range for \(core.vbuckets.count) vBuckets")
        return core.vbuckets[vb.index].table.withLock { t in (t.state, t.failoverLog, t.highSeqno, t.purgeSeqno) }
    }

    /// The failover log of `vb` (newest entry first).
    public func failoverHistory(_ vb: VBucketID) -> FailoverLog {
        precondition(vb.index < core.vbuckets.count, "\(vb) out of range for \(core.vbuckets.count) vBuckets")
        return core.vbuckets[vb.index].table.withLock { $0.failoverLog }
    }

    /// Where a consumer following into `vb` resumes: its high seqno as a whole snapshot, named by the
    /// history covering it; `.empty` when it holds nothing.
    public func resumePoint(_ vb: VBucketID) -> ResumePoint {
        precondition(vb.index < core.vbuckets.count, "\(vb) out of range for \(core.vbuckets.count) vBuckets")
        return core.vbuckets[vb.index].table.withLock { t in
            guard t.highSeqno != .zero else { return .empty }
            return ResumePoint(
                start: t.highSeqno, snapStart: t.highSeqno, snapEnd: t.highSeqno,
                uuid: t.failoverLog.uuid(forResumeAt: t.highSeqno))
        }
    }

    /// Rolls non-active `vb` back to at most `seqno` and returns the seqno reached. Only rollback to 0 is
    /// implemented below the high seqno (change-streams.md allows storage to go further back): every
    /// document of the vBucket is dropped, in memory and durably on disk, and its seqnos restart at 0.
    /// A `seqno` at or above the high seqno changes nothing. Blocks (a flusher transaction): call off
    /// event loops.
    public func rollback(_ vb: VBucketID, to seqno: SeqNo) throws(EngineError) -> SeqNo {
        guard vb.index < core.vbuckets.count else { throw .notMyVBucket }
        let state = core.vbuckets[vb.index].table.withLock { t -> (VBucketState, SeqNo) in (t.state, t.highSeqno) }
        if state.0 == .active { throw .notMyVBucket }
        if seqno >= state.1 { return state.1 }
        if core.stop != .running { throw .temporaryFailure }
        let latch = Latch()
        let outcome = Mutex<Result<Void, EngineError>>(.success(()))
        core.commands.withLock {
            $0.append(
                .resetVBucket(
                    vb.index,
                    done: { r in
                        outcome.withLock { $0 = r }
                        latch.open()
                    }))
        }
        core.flusherWakeup.broadcast()
        latch.wait()
        try outcome.withLock { $0 }.get()
        return .zero
    }

    /// A document of replica `vb` (Couchbase's GET_REPLICA): only served while the vBucket is a replica.
    public func getReplica(_ vb: VBucketID, _ key: [UInt8]) throws(EngineError) -> Document {
        if key.isEmpty || key.count > Limits.maxKeyLength { throw .invalidArguments }
        guard vb.index < core.vbuckets.count else { throw .notMyVBucket }
        let r = core.vbuckets[vb.index].table.withLock { t -> Result<Document, EngineError> in
            guard t.state == .replica else { return .failure(.notMyVBucket) }
            if !t.pending.isEmpty {
                var doc: Document?
                let r = t.readCommitted(DocKey(key), nowSeconds: 0, into: &doc) { v, m in
                    Document(value: Array(v), meta: m)
                }
                if let r { return r.flatMap { doc.map { .success($0) } ?? .failure(.keyNotFound) } }
            }
            guard let item = t.items[DocKey(key)], !item.deleted else { return .failure(.keyNotFound) }
            guard let value = item.value else { return .failure(.wouldBlock) }
            return .success(Document(value: value, meta: item.meta))
        }
        return try r.get()
    }
}
