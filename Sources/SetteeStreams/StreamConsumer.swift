import SetteeCore

// The consumer side of one change stream on one vBucket (a replica, or a rebalance's new copy).
//
// States:
//   requesting   a stream request is out; waiting for accept or rollback
//   rollingBack  the producer asked for a rollback; the shell is rolling local data back
//   streaming    accepted; `open` is the snapshot being received, if any
//   ended        stream-end received (or reported by the shell); terminal
//   failed       the producer broke the contract; terminal
//
//             start()                 accepted(log)
//   (init) ──────────▶ requesting ─────────────────▶ streaming ◀──┐ marker / item
//                        │    ▲                        │   │       │
//        rollback(to:)   ▼    │ rolledBack(to:)        │   └───────┘
//                     rollingBack                      │ streamEnd
//                                                      ▼
//                 any state ── violation ──▶ failed   ended
//
// Invariants:
// 1. Staged items become visible only through `.commitSnapshot`, which the shell applies atomically together with
//    the resume point it carries; a snapshot cut short (violation, disconnect) is dropped with `.discardStaged`.
//    So the local copy only ever holds whole snapshots: never a half-received one.
// 2. Within a stream, item seqnos strictly increase, and exceed the resume point's `start`.
// 3. An item is accepted only inside the open snapshot's `[start, end]`; a marker's start must exceed every seqno
//    seen before it. Anything else is a `StreamViolation`: the stream closes and staged items are dropped.
// 4. `resume` is always the point of the last committed snapshot, normalised as whole: `start == snapEnd`.
//
// When a snapshot is complete: the item with seqno == `end` arrives, or a SEQNO_ADVANCED to `end` (the records there
// are another collection's), or — if the producer has no item at `end` (a purged tombstone) — the next marker or a
// `reachedEnd` stream-end arrives, which says nothing more belongs to it. Other stream-ends leave it incomplete.

/// What the shell must do for the consumer.
public enum ConsumerDirective: Sendable, Hashable {
    /// Send this stream request to the producer.
    case sendRequest(StreamRequest)
    /// Persist the failover log (the producer's, adopted on accept; or ours, pruned after a rollback).
    case persistFailoverLog(FailoverLog)
    /// Roll local data of the vBucket back to at most this seqno, then report with `rolledBack(to:)`.
    case rollBack(to: SeqNo)
    /// Persist this resume point (after a rollback: the data now ends there).
    case persistResumePoint(ResumePoint)
    /// Hold this item aside, invisible to readers, until commit or discard.
    case stage(StreamItem)
    /// Apply every staged item and persist `resume` in one atomic step; then readers may see them.
    case commitSnapshot(SnapshotMarker, resume: ResumePoint)
    /// Drop staged items unapplied.
    case discardStaged
    /// Close the stream: the producer broke the contract.
    case close(StreamViolation)
    /// The stream is over; reopen from the persisted resume point if more is wanted.
    case finished(StreamEndReason)
}

/// The consumer's state machine for one stream. Feed it the producer's messages; do what its directives say.
public struct StreamConsumer: Sendable {
    public enum State: Sendable, Hashable {
        case idle
        case requesting
        case rollingBack(to: SeqNo)
        /// `open` is the snapshot being received; `lastSeqno` the last item or marker end seen.
        case streaming(open: SnapshotMarker?, lastSeqno: SeqNo)
        case ended(StreamEndReason)
        case failed(StreamViolation)
    }

    public let vbucket: VBucketID
    public let end: SeqNo
    /// The last committed position (what a reconnect asks from).
    public private(set) var resume: ResumePoint
    /// The history the consumer's data belongs to: the producer's log once accepted.
    public private(set) var failoverLog: FailoverLog?
    public private(set) var state: State = .idle
    /// Items staged in the open snapshot, and their key + value bytes: a producer may not make the consumer hold
    /// more than `Limits.dcpConsumerMaxSnapshotItems` / `…Bytes` of one snapshot.
    public private(set) var openItems = 0
    public private(set) var openBytes = 0

    /// A consumer resuming from `resume` (`.empty` for a new copy), with the failover log persisted alongside it.
    public init(vbucket: VBucketID, resume: ResumePoint, failoverLog: FailoverLog?, end: SeqNo = StreamRequest.endless)
    {
        precondition(
            resume.snapStart <= resume.start && resume.start <= resume.snapEnd, "resume point out of order: \(resume)")
        self.vbucket = vbucket
        self.resume = resume
        self.failoverLog = failoverLog
        self.end = end
    }

    /// The request to send for the current resume point.
    public var request: StreamRequest { StreamRequest(vbucket: vbucket, resume: resume, end: end) }

    /// Opens the stream.
    public mutating func start() -> [ConsumerDirective] {
        precondition(state == .idle, "start() in \(state)")
        state = .requesting
        return [.sendRequest(request)]
    }

    /// The producer accepted, sending its failover log.
    public mutating func accepted(producerLog: FailoverLog) -> [ConsumerDirective] {
        guard state == .requesting else { return violate(.unexpected(message: "accept", state: "\(state)")) }
        failoverLog = producerLog
        state = .streaming(open: nil, lastSeqno: resume.start)
        return [.persistFailoverLog(producerLog)]
    }

    /// The producer accepted, sending a failover log off the wire (newest first): an empty or out-of-order one,
    /// or one naming a history twice, is a protocol violation that closes the stream, never a trap.
    public mutating func accepted(producerEntries: [FailoverEntry]) -> [ConsumerDirective] {
        guard let log = FailoverLog(validating: producerEntries) else {
            let text = producerEntries.map(\.description).joined(separator: " ")
            return violate(
                .unexpected(message: "failover log empty, out of order or repeating a uuid: \(text)", state: "\(state)")
            )
        }
        return accepted(producerLog: log)
    }

    /// The producer answered with a rollback.
    public mutating func rollbackRequested(to seqno: SeqNo) -> [ConsumerDirective] {
        guard state == .requesting else { return violate(.unexpected(message: "rollback", state: "\(state)")) }
        guard seqno < resume.start || (resume.start == .zero && resume != .empty) else {
            // A rollback that removes nothing would loop forever. At 0 one rollback is useful (to forget a history the
            // producer does not know); from the empty resume point, which a producer always accepts, it is not: a
            // producer answering every request so made the stream restart without end, queueing a batch each time.
            return violate(.unexpected(message: "rollback to \(seqno) from \(resume.start)", state: "\(state)"))
        }
        state = .rollingBack(to: seqno)
        return [.rollBack(to: seqno)]
    }

    /// The shell rolled local data back to `seqno` (at most the requested one; storage may go further, to 0).
    public mutating func rolledBack(to seqno: SeqNo) -> [ConsumerDirective] {
        guard case .rollingBack(let target) = state else { preconditionFailure("rolledBack in \(state)") }
        precondition(seqno <= target, "rolled back to \(seqno), above the requested \(target)")
        var directives: [ConsumerDirective] = []
        if seqno == .zero {
            resume = .empty  // uuid 0 with start 0: the producer always accepts, so rollbacks cannot loop
        } else {
            var log = failoverLog ?? FailoverLog(initialUUID: resume.uuid)
            log.rollBack(to: seqno)
            failoverLog = log
            directives.append(.persistFailoverLog(log))
            resume = ResumePoint(start: seqno, snapStart: seqno, snapEnd: seqno, uuid: log.uuid(forResumeAt: seqno))
        }
        state = .requesting
        directives.append(.persistResumePoint(resume))
        directives.append(.sendRequest(request))
        return directives
    }

    /// A snapshot marker arrived.
    public mutating func snapshotMarker(_ marker: SnapshotMarker) -> [ConsumerDirective] {
        guard case .streaming(let open, let last) = state else {
            return violate(.unexpected(message: "\(marker)", state: "\(state)"))
        }
        // The open snapshot, if any, covers everything up to its end even when its last items were not sent.
        let covered = open?.end ?? last
        guard marker.start > covered, marker.start <= marker.end else {
            return violate(.markerOutOfOrder(marker, lastSeqno: covered))
        }
        var directives: [ConsumerDirective] = []
        if let open { directives.append(commit(open)) }  // the next marker says the open one is whole
        state = .streaming(open: marker, lastSeqno: covered)
        (openItems, openBytes) = (0, 0)
        return directives
    }

    /// A mutation, deletion or expiration arrived.
    public mutating func item(_ item: StreamItem) -> [ConsumerDirective] {
        guard case .streaming(let open, let last) = state else {
            return violate(.unexpected(message: "item \(item.seqno)", state: "\(state)"))
        }
        guard let open else { return violate(.itemWithoutSnapshot(item.seqno)) }
        guard item.seqno > last else { return violate(.seqnoNotIncreasing(item.seqno, lastSeqno: last)) }
        guard item.seqno >= open.start && item.seqno <= open.end else {
            return violate(.itemOutsideSnapshot(item.seqno, open))
        }
        // Our producers send at most `Limits.dcpBatchItems` items of `dcpBatchBytes` (one larger item) per snapshot,
        // and honour flow control; a peer that does neither could make the shell stage without end.
        openItems += 1
        openBytes += item.key.count + item.value.count
        guard openItems <= Limits.dcpConsumerMaxSnapshotItems, openBytes <= Limits.dcpConsumerMaxSnapshotBytes else {
            return violate(.snapshotTooLarge(open, items: openItems, bytes: openBytes))
        }
        if item.seqno == open.end {
            state = .streaming(open: nil, lastSeqno: item.seqno)
            return [.stage(item), commit(open)]
        }
        state = .streaming(open: open, lastSeqno: item.seqno)
        return [.stage(item)]
    }

    /// SEQNO_ADVANCED: the vBucket's seqno reached `seqno` through records this stream does not receive (another
    /// collection's); at the open snapshot's end it makes the snapshot whole, as its last item would (kv_engine
    /// `docs/dcp/documentation/commands/seqno-advanced.md`). Bounded as an item is: inside the open snapshot, above
    /// every seqno seen.
    public mutating func seqnoAdvanced(_ seqno: SeqNo) -> [ConsumerDirective] {
        guard case .streaming(let open, let last) = state else {
            return violate(.unexpected(message: "seqno advanced \(seqno)", state: "\(state)"))
        }
        guard let open else { return violate(.itemWithoutSnapshot(seqno)) }
        guard seqno > last else { return violate(.seqnoNotIncreasing(seqno, lastSeqno: last)) }
        guard seqno >= open.start && seqno <= open.end else { return violate(.itemOutsideSnapshot(seqno, open)) }
        if seqno == open.end {
            state = .streaming(open: nil, lastSeqno: seqno)
            return [commit(open)]
        }
        state = .streaming(open: open, lastSeqno: seqno)
        return []
    }

    /// The stream ended: a stream-end message, or the shell noticed the connection drop.
    public mutating func streamEnd(_ reason: StreamEndReason) -> [ConsumerDirective] {
        switch state {
        case .ended, .failed:
            return []
        case .streaming(let open, _):
            state = .ended(reason)
            guard let open else { return [.finished(reason)] }
            // Only the producer's "everything sent" proves the open snapshot whole.
            return [reason == .reachedEnd ? commit(open) : .discardStaged, .finished(reason)]
        case .idle, .requesting, .rollingBack:
            state = .ended(reason)
            return [.finished(reason)]
        }
    }

    private mutating func commit(_ marker: SnapshotMarker) -> ConsumerDirective {
        (openItems, openBytes) = (0, 0)
        let uuid = failoverLog.map { $0.uuid(forResumeAt: marker.end) } ?? resume.uuid
        resume = ResumePoint(start: marker.end, snapStart: marker.end, snapEnd: marker.end, uuid: uuid)
        return .commitSnapshot(marker, resume: resume)
    }

    private mutating func violate(_ violation: StreamViolation) -> [ConsumerDirective] {
        switch state {
        case .ended, .failed:
            return []  // messages still in flight after we stopped listening
        case .streaming(let open, _):
            state = .failed(violation)
            return (open == nil ? [] : [.discardStaged]) + [.close(violation)]
        case .idle, .requesting, .rollingBack:
            state = .failed(violation)
            return [.close(violation)]
        }
    }
}
