import SetteeClient
import SetteeCore

/// The decisions of one collection's backup as a pure state machine (ADR 0147): which vBuckets still need a
/// segment, when a vBucket's stream has reached the end it must reach, and what a rollback means. The shell
/// (`BackupRunner`) feeds it change-stream batches and observed high seqnos and performs what it answers.
///
/// Per vBucket: `waiting` (no target yet) ──target──▶ `streaming(target)` ──position ≥ target──▶ `done(end)`.
/// A target is the vBucket's high seqno observed on its active copy after the stream opened, so every write
/// acknowledged before the backup started is at or below it. A batch marked `restarted` (the vBucket's history no
/// longer holds the position streamed from: a failover or rollback) discards what the segment held, reopens it as a
/// restarted segment (the vBucket's whole history from seqno 0, which a restore applies instead of the earlier
/// backups' segments) and asks for a new target: a backup is never silently short.
public struct BackupPlan: Sendable {
    public enum Directive: Sendable, Equatable {
        /// Start (again) the vBucket's segment file with this header, dropping any partial one.
        case openSegment(SegmentHeader)
        /// Append the batch's changes to the vBucket's open segment.
        case append(VBucketID)
        /// Observe the vBucket's high seqno on its active copy and report it with `targetObserved`.
        case observeTarget(VBucketID)
        /// The vBucket's segment is whole: write its trailer with this end and keep the file.
        case finishSegment(VBucketID, end: ChangeStreamPosition)
        /// Every vBucket of the collection has its segment.
        case complete
    }

    enum VBState: Sendable, Equatable {
        case waiting
        case streaming(target: SeqNo)
        case done
    }

    public let collection: UInt32
    var states: [VBState]
    /// The position each vBucket's stream started from (the previous backup's end), and where it stands now.
    var starts: [ChangeStreamPosition]
    var reached: [ChangeStreamPosition]
    var restarted: [Bool]
    public private(set) var remaining: Int
    var completed = false

    /// `vbuckets` vBuckets; `starts` the previous backup's end positions (missing ones start at zero: a full
    /// backup); `alreadyDone` the vBuckets whose segment an interrupted run of this backup already finished.
    public init(
        collection: UInt32, vbuckets: Int, starts: [VBucketID: ChangeStreamPosition], alreadyDone: Set<VBucketID>
    ) {
        self.collection = collection
        var s: [ChangeStreamPosition] = []
        var st: [VBState] = []
        for i in 0..<vbuckets {
            let vb = VBucketID(UInt16(truncatingIfNeeded: i))
            s.append(starts[vb] ?? .zero)
            st.append(alreadyDone.contains(vb) ? .done : .waiting)
        }
        self.starts = s
        self.reached = s
        self.states = st
        self.restarted = Array(repeating: false, count: vbuckets)
        self.remaining = st.filter { $0 != .done }.count
    }

    /// The positions the change stream opens from.
    public var streamPositions: [VBucketID: ChangeStreamPosition] {
        var out: [VBucketID: ChangeStreamPosition] = [:]
        for (i, p) in starts.enumerated() { out[VBucketID(UInt16(truncatingIfNeeded: i))] = p }
        return out
    }

    /// The vBuckets not yet done (a deadline's message names them).
    public var behind: [VBucketID] {
        states.indices.filter { states[$0] != .done }.map { VBucketID(UInt16(truncatingIfNeeded: $0)) }
    }

    /// Opens every unfinished vBucket's segment and asks for its target.
    public mutating func start() -> [Directive] {
        var out: [Directive] = []
        for i in states.indices where states[i] != .done {
            let vb = VBucketID(UInt16(truncatingIfNeeded: i))
            out.append(
                .openSegment(SegmentHeader(vbucket: vb, collection: collection, start: starts[i], restarted: false)))
            out.append(.observeTarget(vb))
        }
        return out + completeIfDone()
    }

    /// The vBucket's high seqno on its active copy.
    public mutating func targetObserved(_ vb: VBucketID, highSeqno: SeqNo) -> [Directive] {
        guard vb.index < states.count, states[vb.index] == .waiting else { return [] }
        states[vb.index] = .streaming(target: highSeqno)
        return finishIfReached(vb)
    }

    /// A batch of the vBucket's change stream (`ChangeStreamBatch`'s position and marks).
    public mutating func batch(
        _ vb: VBucketID, position: ChangeStreamPosition, restarted isRestart: Bool
    ) -> [Directive] {
        guard vb.index < states.count, states[vb.index] != .done else { return [] }
        if isRestart {
            restarted[vb.index] = true
            reached[vb.index] = .zero
            states[vb.index] = .waiting
            return [
                .openSegment(SegmentHeader(vbucket: vb, collection: collection, start: .zero, restarted: true)),
                .observeTarget(vb),
            ]
        }
        reached[vb.index] = position
        return [.append(vb)] + finishIfReached(vb)
    }

    private mutating func finishIfReached(_ vb: VBucketID) -> [Directive] {
        guard case .streaming(let target) = states[vb.index], reached[vb.index].seqno >= target else { return [] }
        states[vb.index] = .done
        remaining -= 1
        return [.finishSegment(vb, end: reached[vb.index])] + completeIfDone()
    }

    private mutating func completeIfDone() -> [Directive] {
        guard remaining == 0, !completed else { return [] }
        completed = true
        return [.complete]
    }
}
