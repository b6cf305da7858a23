import SetteeCore
import SetteeStorage

// `_ensure_full_commit` on the bucket under a gateway database: returns once every write the bucket
// acknowledged before the call is on disk. A replicator calls it before it checkpoints past a batch
// (ADR 0013), so a gateway killed between acknowledging a `_bulk_docs` and flushing it cannot make
// a checkpoint skip documents it never kept.

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
    /// A cluster bucket's writes are kept by the cluster: the active acknowledged each one and
    /// replicates it (and a durable write waits for its majority). The gateway holds nothing of its
    /// own to flush, so there is nothing to wait for here.
    public func ensureFullCommit() async throws(GatewayBucketError) {}
}

extension GatewayDatabase {
    /// `POST /db/_ensure_full_commit`: everything this database acknowledged is on disk when it returns.
    func ensureFullCommit() async throws(GatewayError) {
        let bucket = self.bucket
        try await bucketCall { () async throws(GatewayBucketError) in try await bucket.ensureFullCommit() }
    }
}
