import SetteeClient
import SetteeCore
import SetteeStorage
import Synchronization

// `_ensure_full_commit` on the bucket under a gateway database: returns once every write the bucket
// acknowledged before the call is on disk. A replicator calls it before it checkpoints past a batch
// (ADR 0013), so a gateway killed between acknowledging a `_bulk_docs` and flushing it cannot make
// a checkpoint skip documents it never kept. On a cluster bucket it waits for the actives to persist this
// gateway's acknowledged writes (ADR 0039).

extension EmbeddedBucket {
    /// Waits for each vBucket's flusher to reach the high seqno it had when called.
    public func ensureFullCommit() async throws(GatewayBucketError) {
        let engine = self.engine
        for index in 0..<engine.settings.numVBuckets {
            let vb = VBucketID(UInt16(truncatingIfNeeded: index))
            let high = engine.seqnoInfo(vb).highSeqno
            let result = await withCheckedContinuation { (c: CheckedContinuation<Result<Void, EngineError>, Never>) in
                engine.waitForPersistence(vb, high) { c.resume(returning: $0) }
            }
            if case .failure(let error) = result { throw Self.map(error) }
        }
    }
}

extension RemoteBucket {
    /// Waits until, for every vBucket this gateway wrote to since the last barrier that passed, the active copy has
    /// persisted the highest acknowledged write under the same vBucket uuid (OBSERVE_SEQNO polls,
    /// `FullCommitBarrier`, ADR 0039). Fails `.temporary` when that does not happen within
    /// `Limits.gatewayFullCommitTimeoutMs` (the marks stay for the next call) or when a vBucket failed over since (the
    /// write may be lost): the replicator then retries from its checkpoint instead of moving past writes the cluster
    /// may not keep. Writes whose reply carried no mutation token (a server without MutationSeqno) are not tracked.
    public func ensureFullCommit() async throws(GatewayBucketError) {
        var open = fullCommit.withLock { $0.take() }
        if open.isEmpty { return }
        let deadline = ContinuousClock.now + .milliseconds(Limits.gatewayFullCommitTimeoutMs)
        var lost: [VBucketID] = []
        while true {
            let verdicts = await observe(open)
            for (vb, verdict) in verdicts {
                switch verdict {
                case .reached: open[vb] = nil
                case .lost:
                    open[vb] = nil
                    lost.append(vb)
                case .waiting: break
                }
            }
            if open.isEmpty || ContinuousClock.now >= deadline { break }
            try? await Task.sleep(for: .milliseconds(Limits.gatewayFullCommitPollMs))
        }
        if !open.isEmpty {
            let unsettled = open
            fullCommit.withLock { $0.restore(unsettled) }
            throw .temporary(
                "_ensure_full_commit: \(open.count) vBuckets did not persist this gateway's writes within "
                    + "\(Limits.gatewayFullCommitTimeoutMs) ms")
        }
        if !lost.isEmpty {
            throw .temporary(
                "_ensure_full_commit: vBuckets \(lost.map(\.rawValue).sorted()) failed over since this gateway's "
                    + "writes were acknowledged; they may be lost")
        }
    }

    /// One OBSERVE_SEQNO per vBucket of `marks`, concurrently; a vBucket without an answer (no active in the map,
    /// a timeout, NOT_MY_VBUCKET during a move) is `.waiting`.
    func observe(_ marks: [VBucketID: FullCommitBarrier.Mark]) async -> [VBucketID: FullCommitBarrier.Verdict] {
        let client = self.client
        return await withTaskGroup(of: (VBucketID, FullCommitBarrier.Verdict).self) { group in
            for (vb, mark) in marks {
                group.addTask {
                    guard
                        let o = try? await client.observeSeqno(
                            vb, uuid: mark.uuid, timeoutMs: Limits.gatewayFullCommitObserveTimeoutMs)
                    else { return (vb, .waiting) }
                    return (
                        vb,
                        FullCommitBarrier.verdict(
                            mark, uuid: o.uuid, persisted: o.persistedSeqno, failedOver: o.failedOver)
                    )
                }
            }
            var out: [VBucketID: FullCommitBarrier.Verdict] = [:]
            for await (vb, v) in group { out[vb] = v }
            return out
        }
    }

    /// Records an acknowledged write's token for the next `_ensure_full_commit`; returns its CAS.
    func noted(_ result: SetteeClient.MutationResult) -> CAS {
        note(result.token)
        return result.cas
    }

    func note(_ token: SetteeClient.MutationToken?) {
        guard let token else { return }
        fullCommit.withLock { $0.record(vbucket: token.vbucket, uuid: token.vbucketUUID, seqno: token.seqno) }
    }
}

extension GatewayDatabase {
    /// `POST /db/_ensure_full_commit`: everything this database acknowledged is on disk when it returns.
    func ensureFullCommit() async throws(GatewayError) {
        let bucket = self.bucket
        try await bucketCall { () async throws(GatewayBucketError) in try await bucket.ensureFullCommit() }
    }
}
