import Foundation
import SetteeCore
import SetteeStorage

/// One vBucket a pass indexes: from `since` up to at least `high` (its high seqno when the pass started).
/// `uuid`: the newest failover-log entry when the pass started (the history its changes are stored under).
/// `fresh`: nothing of it is in the index yet (first build, or dropped and rebuilt).
struct VBucketWork: Sendable {
    var vb: Int
    var since: UInt64
    var high: UInt64
    var uuid: VBucketUUID
    var fresh: Bool
    /// The vBucket's purge seqno when the pass began, raised by a read from 0 (ADR 0095).
    var purgeFloor = PurgeFloor()

    /// Checks a batch read from `since`: tombstones purged above both `since` and the floor since the pass began
    /// mean deletions the index never saw are gone (`ViewSourcePurged`). The same rule as a DCP producer's open
    /// stream (`PurgeFloor`).
    mutating func check(since: UInt64, purgeSeqno: SeqNo) throws(ViewSourcePurged) {
        if purgeFloor.missesDeletions(since: SeqNo(since), purgeSeqno: purgeSeqno) {
            throw ViewSourcePurged(vbucket: VBucketID(UInt16(vb)), purgeSeqno: purgeSeqno)
        }
    }
}

/// One batch of a vBucket's changes with its rows, ready to write; `seqno` is what the index has of the
/// vBucket once it is written.
struct MappedChanges: Sendable {
    var work: VBucketWork
    var records: [ChangeRecord]
    var seqno: UInt64
    var mapped: MappedDocuments
}

/// The mapping side of a parallel pass: mapper threads take vBuckets one at a time, read their changes in
/// batches, map them, and queue the batches for the index's worker, which writes them (one SQLite writer).
///
/// Invariants:
/// 1. A vBucket is mapped by one thread, its batches queued in seqno order, and the queue is FIFO: the
///    writer applies each vBucket's batches in order.
/// 2. At most `Limits.viewIndexMappedBatchesQueued` batches wait in the queue (a mapper blocks until the
///    writer takes one), so a pass holds a bounded number of batches in memory.
/// 3. After `cancelAndJoin` returns no mapper thread runs (each releases its JavaScript context on its
///    own thread, as JSEngine requires).
final class MapPipeline: @unchecked Sendable {
    private let condition = NSCondition()
    // Guarded by `condition`.
    private var work: [VBucketWork]
    private var nextWork = 0
    private var queue: [MappedChanges] = []
    private var queueHead = 0
    private var running = 0
    private var cancelled = false
    private var failure: (any Error)?

    init(work: [VBucketWork]) { self.work = work }

    /// Counts a mapper thread about to start (before it does, so `next` cannot see zero running too early).
    func started() {
        condition.lock()
        running += 1
        condition.unlock()
    }

    /// The next batch to write, in queue order; nil once every vBucket is mapped and written. Rethrows a
    /// mapper's failure (reading changes, or a map function that failed to compile on its thread).
    func next() throws -> MappedChanges? {
        condition.lock()
        defer { condition.unlock() }
        while queueHead == queue.count && running > 0 && failure == nil { condition.wait() }
        if let failure { throw failure }
        guard queueHead < queue.count else { return nil }
        let batch = queue[queueHead]
        queueHead += 1
        if queueHead == queue.count {
            queue.removeAll(keepingCapacity: true)
            queueHead = 0
        }
        condition.broadcast()
        return batch
    }

    /// Stops the mappers (after the batch each is on) and waits until none runs.
    func cancelAndJoin() {
        condition.lock()
        cancelled = true
        condition.broadcast()
        while running > 0 { condition.wait() }
        condition.unlock()
    }

    /// A mapper thread's body.
    func mapperMain(views: [ViewDefinition], source: any ViewDataSource, stopping: () -> Bool) {
        defer {
            condition.lock()
            running -= 1
            condition.broadcast()
            condition.unlock()
        }
        do {
            let runner = try MapRunner(views: views)
            while var w = take() {
                let id = VBucketID(UInt16(w.vb))
                var since = w.since
                while true {
                    let batch = try source.changes(id, since: SeqNo(since), limit: Limits.viewIndexBatchSize)
                    try w.check(since: since, purgeSeqno: batch.purgeSeqno)
                    let next = max(since, batch.highSeqno.rawValue)
                    let mapped = runner.map(batch.records, vb: id)
                    guard put(MappedChanges(work: w, records: batch.records, seqno: next, mapped: mapped)) else {
                        return
                    }
                    if batch.records.isEmpty || next == since || stopping() { break }
                    if next >= w.high && batch.records.count < Limits.viewIndexBatchSize { break }
                    since = next
                }
            }
        } catch {
            condition.lock()
            if failure == nil { failure = error }
            condition.broadcast()
            condition.unlock()
        }
    }

    private func take() -> VBucketWork? {
        condition.lock()
        defer { condition.unlock() }
        guard !cancelled, failure == nil, nextWork < work.count else { return nil }
        nextWork += 1
        return work[nextWork - 1]
    }

    /// Queues a batch, waiting for room (invariant 2); false when the pass was cancelled.
    private func put(_ batch: MappedChanges) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while queue.count - queueHead >= Limits.viewIndexMappedBatchesQueued && !cancelled && failure == nil {
            condition.wait()
        }
        guard !cancelled, failure == nil else { return false }
        queue.append(batch)
        condition.broadcast()
        return true
    }
}
