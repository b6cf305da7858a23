import SetteeClient
import SetteeCore
import SetteeStorage
import Synchronization

// `_ensure_full_commit` on the bucket under a gateway database: returns once every write the bucket
// acknowledged before the call is on disk. A replicator calls it before it checkpoints past a batch
// (ADR 0013), so a gateway killed between acknowledging a `_bulk_docs` and flushing it cannot make
// a checkpoint skip documents it never kept. On a cluster bucket it waits for them to be persisted on the
// active and on a majority of each vBucket's copies (ADR 0039 decision 6).

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
    /// Waits until, for every vBucket this gateway wrote to since the last barrier that passed, the highest
    /// acknowledged write is persisted under the same vBucket uuid on the active and on a majority of the vBucket's
    /// `replicaNumber + 1` copies (OBSERVE_SEQNO to every copy in the map's chain, `FullCommitBarrier`, ADR 0039
    /// decision 6): acknowledged then means kept through a failover too. Fails `.temporary` when that does not
    /// happen within `Limits.gatewayFullCommitTimeoutMs`, at once when the map names fewer copies than a majority
    /// (the marks stay for the next call in both cases), or when a vBucket failed over since (the write may be
    /// lost): the replicator then retries from its checkpoint instead of moving past writes the cluster may not keep.
    /// Writes whose reply carried no mutation token (a server without MutationSeqno) are not tracked.
    public func ensureFullCommit() async throws(GatewayBucketError) {
        var open = fullCommit.withLock { $0.take() }
        if open.isEmpty { return }
        let deadline = ContinuousClock.now + .milliseconds(Limits.gatewayFullCommitTimeoutMs)
        var lost: [VBucketID] = []
        var impossible: [VBucketID] = []
        while true {
            let verdicts = await observe(open)
            for (vb, verdict) in verdicts {
                switch verdict {
                case .reached: open[vb] = nil
                case .lost:
                    open[vb] = nil
                    lost.append(vb)
                case .impossible: impossible.append(vb)
                case .waiting: break
                }
            }
            if open.isEmpty || !impossible.isEmpty || ContinuousClock.now >= deadline { break }
            try? await Task.sleep(for: .milliseconds(Limits.gatewayFullCommitPollMs))
        }
        if !open.isEmpty {
            let unsettled = open
            fullCommit.withLock { $0.restore(unsettled) }
            if !impossible.isEmpty {
                throw .temporary(
                    "_ensure_full_commit: vBuckets \(impossible.map(\.rawValue).sorted()) have fewer copies in the "
                        + "cluster map than a majority; this gateway's writes there cannot be made durable until a "
                        + "rebalance. " + Self.fewerCopiesRemedy)
            }
            throw .temporary(
                "_ensure_full_commit: \(open.count) vBuckets did not persist this gateway's writes on a majority of "
                    + "their copies within \(Limits.gatewayFullCommitTimeoutMs) ms")
        }
        if !lost.isEmpty {
            throw .temporary(
                "_ensure_full_commit: vBuckets \(lost.map(\.rawValue).sorted()) failed over since this gateway's "
                    + "writes were acknowledged; they may be lost")
        }
    }

    /// What an operator does when the map names fewer copies than a majority (a node failed over and not rebalanced
    /// out, or back in): the end of that 503's message, so a Lite app's log or a curl of `_ensure_full_commit` names
    /// the fix, not only the fault. A rebalance removes failed-over nodes and rebuilds every vBucket's copies on the
    /// rest; one set to recovery first (`setRecoveryType`) comes back instead. Lowering the bucket's `replicaNumber`
    /// lowers the majority, but it too takes effect at a rebalance.
    static let fewerCopiesRemedy =
        "To restore them, rebalance the cluster: `settee rebalance`, or POST /controller/rebalance with every "
        + "otpNode in knownNodes (failed-over nodes leave; to bring one back instead, POST /controller/setRecoveryType "
        + "with otpNode and recoveryType=full first). Fewer copies (a lower replicaNumber) also takes effect at a "
        + "rebalance."

    /// One pass: OBSERVE_SEQNO to every copy the current map names for each vBucket of `marks`, concurrently. A
    /// copy without an answer (a timeout, a paused node, NOT_MY_VBUCKET during a move) holds nothing this pass; a
    /// vBucket the map does not know is `.waiting`.
    func observe(_ marks: [VBucketID: FullCommitBarrier.Mark]) async -> [VBucketID: FullCommitBarrier.Verdict] {
        let client = self.client
        var chains: [VBucketID: [NodeAddress?]] = [:]
        for vb in marks.keys { chains[vb] = client.chainAddresses(of: vb) }
        let nodes = client.currentConfig?.nodes.count ?? 0
        let asked = chains
        let replies = await withTaskGroup(of: (VBucketID, Int, FullCommitBarrier.CopyReport?).self) { group in
            for (vb, chain) in asked {
                guard let mark = marks[vb] else { continue }
                for (position, address) in chain.enumerated() {
                    guard let address else { continue }
                    group.addTask {
                        guard
                            let o = try? await client.observeSeqno(
                                vb, uuid: mark.uuid, on: address, timeoutMs: Limits.gatewayFullCommitObserveTimeoutMs)
                        else { return (vb, position, nil) }
                        return (
                            vb, position,
                            FullCommitBarrier.CopyReport(
                                uuid: o.uuid, persisted: o.persistedSeqno, failedOver: o.failedOver)
                        )
                    }
                }
            }
            var out: [VBucketID: [Int: FullCommitBarrier.CopyReport]] = [:]
            for await (vb, position, report) in group {
                if let report { out[vb, default: [:]][position] = report }
            }
            return out
        }
        var verdicts: [VBucketID: FullCommitBarrier.Verdict] = [:]
        for (vb, mark) in marks {
            guard let chain = asked[vb], !chain.isEmpty else {
                verdicts[vb] = .waiting
                continue
            }
            let got = replies[vb] ?? [:]
            verdicts[vb] = FullCommitBarrier.verdict(
                mark, active: got[0], replicas: (1..<chain.count).map { got[$0] },
                configured: FullCommitBarrier.configuredCopies(chainLength: chain.count, nodes: nodes),
                named: chain.reduce(0) { $0 + ($1 == nil ? 0 : 1) })
        }
        return verdicts
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
