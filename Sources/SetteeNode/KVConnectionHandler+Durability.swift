import Logging
import NIOCore
import SetteeCore
import SetteeProtocol
import SetteeStorage
import Synchronization

/// Durable writes on the KV port (docs/internals/sync-writes.md): admission (level, majority of copies, a bucket
/// that can persist), then the wait: a prepare committed when its level is met (a majority of copies through
/// `DurabilityMonitor`, this node's disk, or both), aborted and answered ambiguous on a timeout. Also the wait of a
/// read whose value must come back from disk first.
extension KVConnectionHandler {
    /// Whether a durable write may be applied: a mutation with a valid level, a majority of copies able to
    /// acknowledge it (then `pendingMajority` names the monitor), and, for a level that needs this node's disk, a
    /// bucket that can persist. Otherwise the refusal is answered here and the write never reaches the engine.
    func admitDurableWrite(
        _ frame: Frame, level: DurabilityLevel, bucket: ResolvedBucket
    ) -> Bool {
        if !isMutation(frame.opcode) || !level.isValid {
            let status: Status = level.isValid ? .invalidArguments : .durabilityInvalidLevel
            emit { $0.writeResponseHeader(opcode: frame.opcode, status: status, opaque: frame.opaque) }
            return false
        }
        // A vBucket not active here is NOT_MY_VBUCKET, as for any write (the client then finds its active), before its
        // copies are counted: its replica set is empty here, so a write the client sent with a stale map was answered
        // DURABILITY_IMPOSSIBLE, which the client does not retry (ADR 0118).
        if bucket.settings.replicaNumber > 0, bucket.engine.vbucketState(VBucketID(frame.vbucket)) != .active {
            emit { writeNotMyVBucket(frame, bucket: bucket.settings.name, into: &$0) }
            return false
        }
        // Majority of copies (active + configured replicas). The copies that can acknowledge are the
        // active and the replicas in the vBucket's duty (ReplicationManager); fewer than a majority
        // is DURABILITY_IMPOSSIBLE, as Couchbase answers when replica nodes are missing.
        let copies = bucket.settings.replicaNumber + 1
        let majority = copies / 2 + 1
        var available = 1
        if bucket.settings.replicaNumber > 0, Int(frame.vbucket) < bucket.settings.numVBuckets,
            let monitor = node.replication?.durability(bucket: bucket.settings.name)
        {
            guard let (replicas, secondChainCanHoldMajority) = monitor.replicaCount(VBucketID(frame.vbucket)) else {
                // Active in the engine, its copies not known here yet (ADR 0118): TMPFAIL, which clients retry.
                emit {
                    $0.writeResponseHeader(opcode: frame.opcode, status: .temporaryFailure, opaque: frame.opaque)
                }
                return false
            }
            available += replicas
            // While a rebalance moves the vBucket, the chain it moves to must be able to hold a majority too.
            if !secondChainCanHoldMajority { available = 0 }
            pendingMajority = (monitor, majority)
        }
        if bucket.settings.replicaNumber > 2 || available < majority {
            pendingMajority = nil
            emit {
                $0.writeResponseHeader(opcode: frame.opcode, status: .durabilityImpossible, opaque: frame.opaque)
            }
            return false
        }
        // A durable write that needs this node's disk fails fast while the bucket cannot persist, before it
        // is applied: TMPFAIL with the reason (the flusher retries; the client may too).
        if level.requiresPersistenceOnActive, let reason = bucket.engine.persistenceFailure {
            pendingMajority = nil
            let error = EngineError.persistenceFailing(reason)
            emit {
                $0.writeResponse(
                    opcode: frame.opcode, status: error.status, opaque: frame.opaque, datatype: error.messageDatatype,
                    value: error.message)
            }
            return false
        }
        return true
    }

    /// Schedules a durable write's timeout (the request's, 0 or none: `Limits.durabilityDefaultTimeoutMs`), owned by
    /// its slot: `complete` cancels it when the write is answered first, so nothing of the write outlives its answer
    /// (ADR 0083). `durableTimeoutsScheduled` counts the armed ones; `complete` counts them off.
    private func armTimeout(
        _ slot: Slot, on loop: any EventLoop, timeoutMs: UInt16?, _ body: @escaping @Sendable () -> Void
    ) {
        let ms =
            timeoutMs.map { $0 == 0 ? Limits.durabilityDefaultTimeoutMs : Int($0) } ?? Limits.durabilityDefaultTimeoutMs
        node.counters.durableTimeoutsScheduled.wrappingAdd(1, ordering: .relaxed)
        slot.timeout = loop.scheduleTask(in: .milliseconds(Int64(ms)), body)
    }

    /// Finishes an operation that could not complete synchronously: fetches an evicted value and
    /// retries, or holds a durable write's response until its batch is fsynced (or it times out).
    func handleAsync(
        _ outcome: Outcome, frame: Frame, bucket: ResolvedBucket, infos: FrameInfos,
        slot: Slot, response: ByteBuffer = ByteBuffer(), fetchAttempt: Int = 1
    ) {
        guard let loop = context?.eventLoop else { return }
        let handler = NIOLoopBound(self, eventLoop: loop)
        let engine = bucket.engine
        switch outcome {
        case .done:
            complete(slot, response)
        case .wouldBlock(let vb, let key):
            let majority = pendingMajority  // the retry must wait for the same majority
            engine.fetch(vb, key) {
                loop.execute {
                    let h = handler.value
                    var b = ByteBuffer()
                    h.pendingMajority = majority
                    let again = h.execute(frame, bucket: bucket, infos: infos, into: &b)
                    defer { h.pendingMajority = nil }
                    switch again {
                    case .wouldBlock where fetchAttempt >= Limits.backgroundFetchAttempts:
                        // The item pager keeps evicting it before we get to it (memory is that
                        // tight): answer TMPFAIL rather than loop; the client retries.
                        var t = ByteBuffer()
                        t.writeResponseHeader(opcode: frame.opcode, status: .temporaryFailure, opaque: frame.opaque)
                        h.complete(slot, t)
                    default:
                        h.handleAsync(
                            again, frame: frame, bucket: bucket, infos: infos, slot: slot,
                            response: b, fetchAttempt: fetchAttempt + 1)
                    }
                }
            }
        case .majority(let vb, let seqno, let level, let timeoutMs, let monitor, let copies):
            let (opcode, opaque) = (frame.opcode, frame.opaque)  // not the frame: it shares the read buffer
            let finish: @Sendable (Status?) -> Void = { status in
                loop.execute {
                    let h = handler.value
                    guard slot.buffer == nil else { return }
                    guard let status else { return h.complete(slot, response) }
                    var b = ByteBuffer()
                    b.writeResponseHeader(opcode: opcode, status: status, opaque: opaque)
                    h.complete(slot, b)
                }
            }
            // The write is a prepare: committed (made visible) once its level is met, aborted otherwise.
            let key = Array(frame.key.readableBytesView)
            let id = monitor.wait(
                vb, seqno: seqno, history: engine.seqnoInfo(vb).uuid, majority: copies,
                persistReplicas: level == .persistToMajority, activeHolds: !level.requiresPersistenceOnActive
            ) { outcome in
                switch outcome {
                case .satisfied: if engine.commitSyncWrite(vb, key, seqno: seqno) { return finish(nil) }
                case .failed: engine.abortSyncWrite(vb, key, seqno: seqno)
                // The vBucket's new active decides the prepare: aborting it here would only drop its record. Unless
                // the vBucket is active here again (a write re-run after a background fetch can apply its prepare
                // after the hand-over): nobody else would end it, and its key would stay SYNC_WRITE_IN_PROGRESS.
                case .handedOver:
                    if engine.vbucketState(vb) == .active { engine.abortSyncWrite(vb, key, seqno: seqno) }
                }
                finish(.syncWriteAmbiguous)
            }
            if level.requiresPersistenceOnActive {
                engine.waitForPersistence(vb, seqno) { result in
                    switch result {
                    case .success: monitor.activePersisted(vb, id: id)
                    case .failure(let error):
                        if monitor.cancel(vb, id: id) {
                            engine.abortSyncWrite(vb, key, seqno: seqno)
                            finish(error.statusForAppliedWrite)
                        }
                    }
                }
            }
            // Timed out: aborted here, but a replica may hold the prepare and be promoted before the abort
            // reaches it (it would commit it), so the outcome is unknown to the client: ambiguous, as
            // Couchbase answers. Cancelled when the write is answered first (`complete`); `finish` answers on this
            // loop in a later task, so the timer is in place by then.
            armTimeout(slot, on: loop, timeoutMs: timeoutMs) {
                if monitor.cancel(vb, id: id) {
                    engine.abortSyncWrite(vb, key, seqno: seqno)
                    handler.value.logger.warning(
                        "durable write timed out before its copies acknowledged it; answered ambiguous",
                        metadata: ["vb": "\(vb)", "seqno": "\(seqno)", "durability": "\(monitor.describe(vb))"])
                    finish(.syncWriteAmbiguous)
                }
            }
        case .persist(let vb, let seqno, let timeoutMs):
            // A prepare too (no replicas): committed once persisted on this node, aborted otherwise.
            let key = Array(frame.key.readableBytesView)
            let (opcode, opaque) = (frame.opcode, frame.opaque)
            armTimeout(slot, on: loop, timeoutMs: timeoutMs) {
                let h = handler.value
                guard slot.buffer == nil else { return }
                engine.abortSyncWrite(vb, key, seqno: seqno)
                var b = ByteBuffer()
                b.writeResponseHeader(opcode: opcode, status: .syncWriteAmbiguous, opaque: opaque)
                h.complete(slot, b)
            }
            engine.waitForPersistence(vb, seqno) { result in
                loop.execute {
                    let h = handler.value
                    guard slot.buffer == nil else { return }
                    switch result {
                    case .success where engine.commitSyncWrite(vb, key, seqno: seqno):
                        h.complete(slot, response)
                    case .success:
                        var b = ByteBuffer()
                        b.writeResponseHeader(opcode: opcode, status: .syncWriteAmbiguous, opaque: opaque)
                        h.complete(slot, b)
                    case .failure(let error):
                        engine.abortSyncWrite(vb, key, seqno: seqno)
                        h.logger.error(
                            "durable write failed to persist", metadata: ["vb": "\(vb)", "error": "\(error)"])
                        var b = ByteBuffer()
                        b.writeResponse(
                            opcode: opcode, status: error.statusForAppliedWrite, opaque: opaque,
                            datatype: error.messageDatatype, value: error.messageDatatype == 0 ? [] : error.message)
                        h.complete(slot, b)
                    }
                }
            }
        }
    }

    func persistIfNeeded(_ r: MutationResult, infos: FrameInfos) -> Outcome {
        if let level = infos.durabilityLevel, let (monitor, majority) = pendingMajority {
            return .majority(
                r.token.vbucket, r.token.seqno, level, timeoutMs: infos.durabilityTimeout, monitor: monitor,
                copies: majority)
        }
        guard let level = infos.durabilityLevel, level.requiresPersistenceOnActive else { return .done }
        return .persist(r.token.vbucket, r.token.seqno, timeoutMs: infos.durabilityTimeout)
    }
}
