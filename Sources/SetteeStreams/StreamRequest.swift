import SetteeCore

/// Where a consumer stands in a vBucket's history, as it tells the producer when it (re)opens a stream.
///
/// `start` is the last seqno the consumer holds; `[snapStart, snapEnd]` is the snapshot that seqno belongs to
/// (the consumer may hold only part of it); `uuid` names the history it was received under (0: nothing held).
public struct ResumePoint: Sendable, Hashable, CustomStringConvertible {
    public var start: SeqNo
    public var snapStart: SeqNo
    public var snapEnd: SeqNo
    public var uuid: VBucketUUID

    public init(start: SeqNo, snapStart: SeqNo, snapEnd: SeqNo, uuid: VBucketUUID) {
        self.start = start
        self.snapStart = snapStart
        self.snapEnd = snapEnd
        self.uuid = uuid
    }

    /// "I have nothing": start and uuid 0.
    public static let empty = ResumePoint(start: .zero, snapStart: .zero, snapEnd: .zero, uuid: VBucketUUID(0))

    public var description: String { "start \(start) snap [\(snapStart), \(snapEnd)] uuid \(uuid)" }
}

/// A consumer's request to open a stream on one vBucket (the fields of a DCP stream request).
public struct StreamRequest: Sendable, Hashable, CustomStringConvertible {
    /// "Follow forever": the producer keeps sending new mutations.
    public static let endless = SeqNo(UInt64.max)

    public var vbucket: VBucketID
    public var resume: ResumePoint
    /// The last seqno wanted; `endless` to keep following.
    public var end: SeqNo

    public init(vbucket: VBucketID, resume: ResumePoint, end: SeqNo = StreamRequest.endless) {
        self.vbucket = vbucket
        self.resume = resume
        self.end = end
    }

    public var start: SeqNo { resume.start }
    public var snapStart: SeqNo { resume.snapStart }
    public var snapEnd: SeqNo { resume.snapEnd }
    public var uuid: VBucketUUID { resume.uuid }

    public var description: String { "\(vbucket) \(resume) end \(end)" }
}

/// What the producer's vBucket knows when it judges a stream request.
public struct ProducerHistory: Sendable, Hashable {
    public var failoverLog: FailoverLog
    /// The last seqno assigned.
    public var highSeqno: SeqNo
    /// Tombstones at or below this seqno have been purged: a consumer that has not seen them cannot learn of
    /// those deletions from a stream.
    public var purgeSeqno: SeqNo

    public init(failoverLog: FailoverLog, highSeqno: SeqNo, purgeSeqno: SeqNo) {
        precondition(purgeSeqno <= highSeqno, "purge seqno \(purgeSeqno) above high seqno \(highSeqno)")
        precondition(
            failoverLog.newest.seqno <= highSeqno, "newest failover entry \(failoverLog.newest) above \(highSeqno)")
        self.failoverLog = failoverLog
        self.highSeqno = highSeqno
        self.purgeSeqno = purgeSeqno
    }
}

/// The producer's answer to a stream request.
public enum StreamRequestDecision: Sendable, Hashable {
    /// Open the stream; the reply carries the producer's failover log, which the consumer adopts.
    case accept
    /// The consumer's history diverges (or cannot be continued): it must roll back to this seqno, then ask again.
    case rollback(to: SeqNo)
    /// Malformed request (DCP's ERANGE): `snapStart <= start <= snapEnd` or `start <= end` does not hold.
    case invalidRange
}

extension ProducerHistory {
    /// Judges a stream request by DCP's producer rules, in this order:
    /// 1. start 0 and uuid 0 ("I have nothing"): accept;
    /// 2. a range that is not `snapStart <= start <= snapEnd`, `start <= end`: invalid;
    /// 3. normalise: `start == snapEnd` means the consumer holds the whole snapshot, so treat it as
    ///    `[start, start]`; otherwise `start == snapStart` means it holds nothing of it, so likewise `[start, start]`;
    /// 4. `snapStart < purgeSeqno` and `start` above 0: roll back to 0 (deletions it never saw are gone); a consumer at
    ///    0 is sent everything there is, so a rollback to 0 would tell it nothing (kv_engine's rule, too);
    /// 5. uuid not in the failover log: roll back to 0;
    /// 6. with `upper` = where that history ends (the next newer entry's seqno, or the high seqno):
    ///    `snapEnd <= upper` accept; `snapStart > upper` roll back to `upper`; otherwise roll back to `snapStart`.
    public func decide(_ request: StreamRequest) -> StreamRequestDecision {
        if request.start == .zero && request.uuid == VBucketUUID(0) { return .accept }
        var snapStart = request.snapStart
        var snapEnd = request.snapEnd
        guard snapStart <= request.start, request.start <= snapEnd, request.start <= request.end else {
            return .invalidRange
        }
        if request.start == snapEnd || request.start == snapStart {
            snapStart = request.start
            snapEnd = request.start
        }
        if request.start != .zero && snapStart < purgeSeqno { return .rollback(to: .zero) }
        guard let upper = failoverLog.upperBound(of: request.uuid, highSeqno: highSeqno) else {
            return .rollback(to: .zero)
        }
        if snapEnd <= upper { return .accept }
        if snapStart > upper { return .rollback(to: upper) }
        return .rollback(to: snapStart)
    }
}
