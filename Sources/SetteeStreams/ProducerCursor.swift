import SetteeCore

// The producer side of one accepted stream: which snapshot to send next.
//
// The vBucket's history is in two places: everything up to `persistedSeqno` is on disk (deduplicated: only the
// latest change per key), and everything from `memoryLowSeqno` to `highSeqno` is in memory. Memory overlaps disk or
// starts right after it, so every seqno is in at least one place.
//
// States:
//   streaming(sentThrough)  everything up to `sentThrough` has been announced; more may follow
//   ended                   `sentThrough >= end`; the shell sends stream-end(reachedEnd)
//
//   streaming ──next: sentThrough+1 < memoryLow──▶ disk snapshot [sentThrough+1, min(persisted, end)]  ─┐
//       ▲    ──next: otherwise, below high──────▶ memory snapshot [sentThrough+1, min(high, end)]       ─┤
//       └──────────────────────────────────────────────────────────────────────────────────────────────┘
//   streaming ──next: sentThrough >= end──▶ ended
//
// Invariants:
// 1. snapshots are contiguous and ascending: each starts at the previous end + 1 (the first at the request's
//    start + 1), so the consumer's "marker after the last seqno" rule always holds;
// 2. a disk snapshot is chosen exactly when the next seqno is no longer in memory; memory is used otherwise, so
//    backfill from disk comes first and in-memory snapshots follow;
// 3. no snapshot ends past the requested end. (A finite end that is not a snapshot point of the deduplicated
//    history gives a state that may lack keys changed later; replication uses endless streams.)
// 4. `sentThrough` never exceeds `highSeqno`; a producer history below it is a programmer error (a vBucket that
//    rolls back must end its streams with `stateChanged` first).

/// Where the producer's vBucket history is, at the moment the cursor is asked for the next snapshot.
public struct HistoryPositions: Sendable, Hashable {
    /// Highest seqno written to disk.
    public var persistedSeqno: SeqNo
    /// Lowest seqno still held in memory; seqnos from here to `highSeqno` are readable from memory.
    public var memoryLowSeqno: SeqNo
    /// Last seqno assigned.
    public var highSeqno: SeqNo

    public init(persistedSeqno: SeqNo, memoryLowSeqno: SeqNo, highSeqno: SeqNo) {
        precondition(persistedSeqno <= highSeqno, "persisted \(persistedSeqno) above high \(highSeqno)")
        precondition(
            memoryLowSeqno <= persistedSeqno.next, "memory starts at \(memoryLowSeqno), disk ends at \(persistedSeqno)")
        self.persistedSeqno = persistedSeqno
        self.memoryLowSeqno = memoryLowSeqno
        self.highSeqno = highSeqno
    }
}

/// What the producer does next on a stream.
public enum CursorStep: Sendable, Hashable {
    /// Send this marker, then every item with a seqno in its range from the named source.
    case send(SnapshotMarker)
    /// Nothing new: wait until the high seqno moves.
    case wait
    /// Everything up to the requested end is sent: send stream-end (`reachedEnd`).
    case end
}

/// Chooses the snapshots of one accepted stream.
public struct ProducerCursor: Sendable, Hashable {
    public enum State: Sendable, Hashable {
        case streaming(sentThrough: SeqNo)
        case ended
    }

    public let end: SeqNo
    public private(set) var state: State

    /// A cursor for an accepted request: the consumer holds everything up to `request.start`.
    public init(accepted request: StreamRequest) {
        precondition(request.start <= request.end, "accepted a request with start after end: \(request)")
        self.end = request.end
        self.state = .streaming(sentThrough: request.start)
    }

    /// The next step given where the history is now. A `.send` advances the cursor past that snapshot: the shell
    /// must send all of it (or end the stream).
    public mutating func next(_ history: HistoryPositions) -> CursorStep {
        guard case .streaming(let sent) = state else { return .end }
        if sent >= end {
            state = .ended
            return .end
        }
        precondition(sent <= history.highSeqno, "cursor at \(sent) past the producer's high seqno \(history)")
        if sent == history.highSeqno { return .wait }
        let from = sent.next
        let marker: SnapshotMarker
        if from < history.memoryLowSeqno {
            marker = SnapshotMarker(start: from, end: min(history.persistedSeqno, end), source: .disk)
        } else {
            marker = SnapshotMarker(start: from, end: min(history.highSeqno, end), source: .memory)
        }
        state = .streaming(sentThrough: marker.end)
        return .send(marker)
    }
}
