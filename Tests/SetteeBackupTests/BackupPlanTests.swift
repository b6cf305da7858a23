import SetteeClient
import SetteeCore
import Testing

@testable import SetteeBackup

@Suite struct BackupPlanTests {
    static func pos(_ s: UInt64, _ u: UInt64 = 1) -> ChangeStreamPosition {
        ChangeStreamPosition(seqno: SeqNo(s), vbucketUUID: VBucketUUID(u))
    }
    static let vb0 = VBucketID(0)
    static let vb1 = VBucketID(1)

    @Test func fullBackupFinishesEachVBucketAtItsTarget() {
        var p = BackupPlan(collection: 0, vbuckets: 2, starts: [:], alreadyDone: [])
        let start = p.start()
        #expect(
            start == [
                .openSegment(SegmentHeader(vbucket: Self.vb0, collection: 0, start: .zero, restarted: false)),
                .observeTarget(Self.vb0),
                .openSegment(SegmentHeader(vbucket: Self.vb1, collection: 0, start: .zero, restarted: false)),
                .observeTarget(Self.vb1),
            ])
        // A batch before the target is known is appended, not finished.
        #expect(p.batch(Self.vb0, position: Self.pos(10), restarted: false) == [.append(Self.vb0)])
        #expect(p.targetObserved(Self.vb0, highSeqno: SeqNo(20)) == [])
        #expect(
            p.batch(Self.vb0, position: Self.pos(25), restarted: false) == [
                .append(Self.vb0), .finishSegment(Self.vb0, end: Self.pos(25)),
            ])
        // Later batches of a finished vBucket are ignored (they belong to the next backup).
        #expect(p.batch(Self.vb0, position: Self.pos(30), restarted: false) == [])
        // An empty vBucket: target 0 is reached at once.
        #expect(p.targetObserved(Self.vb1, highSeqno: .zero) == [.finishSegment(Self.vb1, end: .zero), .complete])
        #expect(p.remaining == 0)
    }

    @Test func incrementalStartsFromThePreviousEndsAndAnUnchangedVBucketFinishesAtOnce() {
        var p = BackupPlan(collection: 8, vbuckets: 2, starts: [Self.vb0: Self.pos(40, 9)], alreadyDone: [Self.vb1])
        #expect(p.streamPositions[Self.vb0] == Self.pos(40, 9))
        #expect(p.remaining == 1)
        #expect(
            p.start() == [
                .openSegment(SegmentHeader(vbucket: Self.vb0, collection: 8, start: Self.pos(40, 9), restarted: false)),
                .observeTarget(Self.vb0),
            ])
        #expect(
            p.targetObserved(Self.vb0, highSeqno: SeqNo(40)) == [
                .finishSegment(Self.vb0, end: Self.pos(40, 9)), .complete,
            ])
    }

    @Test func rollbackRestartsTheSegmentFromZeroAndObservesAgain() {
        var p = BackupPlan(collection: 0, vbuckets: 1, starts: [Self.vb0: Self.pos(40)], alreadyDone: [])
        _ = p.start()
        _ = p.targetObserved(Self.vb0, highSeqno: SeqNo(100))
        #expect(p.batch(Self.vb0, position: Self.pos(60), restarted: false) == [.append(Self.vb0)])
        // The new active lacks seqnos above 50: the stream restarts from 0; the segment is rewritten whole.
        #expect(
            p.batch(Self.vb0, position: .zero, restarted: true) == [
                .openSegment(SegmentHeader(vbucket: Self.vb0, collection: 0, start: .zero, restarted: true)),
                .observeTarget(Self.vb0),
            ])
        // The old target no longer applies: nothing finishes until the new history's target is observed...
        #expect(p.batch(Self.vb0, position: Self.pos(50, 2), restarted: false) == [.append(Self.vb0)])
        // ...and the segment ends at the new history's position, not silently at the old target.
        #expect(p.targetObserved(Self.vb0, highSeqno: SeqNo(55)) == [])
        #expect(p.behind == [Self.vb0])
        #expect(
            p.batch(Self.vb0, position: Self.pos(55, 2), restarted: false) == [
                .append(Self.vb0), .finishSegment(Self.vb0, end: Self.pos(55, 2)), .complete,
            ])
    }

    @Test func resumedBackupWithEveryVBucketDoneCompletesAtOnce() {
        var p = BackupPlan(collection: 0, vbuckets: 2, starts: [:], alreadyDone: [Self.vb0, Self.vb1])
        #expect(p.start() == [.complete])
    }

    @Test func chainMergeKeepsTheLastChangeAndIgnoresHistoryBeforeARestart() {
        func e(_ k: String, _ s: UInt64, _ kind: ChangeEvent.Kind = .mutation) -> ChangeEvent {
            ChangeEvent(
                kind: kind, key: Array(k.utf8), value: [], cas: CAS(s), flags: 0, expiry: 0, datatype: 0,
                vbucket: VBucketID(0), seqno: SeqNo(s), revSeqno: RevSeqNo(1))
        }
        let full = [e("a", 1), e("b", 2), e("c", 3)]
        let incr = [e("a", 4), e("b", 5, .deletion)]
        let merged = ChainMerge.merge([(false, full), (false, incr)])
        #expect(merged.map { String(decoding: $0.key, as: UTF8.self) } == ["a", "b", "c"])
        #expect(merged.map(\.seqno.rawValue) == [4, 5, 3])
        #expect(merged[1].kind == .deletion)
        // A restarted segment is the whole history: "c", absent from it, is not restored.
        let restarted = ChainMerge.merge([(false, full), (true, [e("a", 1)])])
        #expect(restarted.map { String(decoding: $0.key, as: UTF8.self) } == ["a"])
    }

    @Test func dataMappingParsesBucketsAndCollections() throws {
        let m = try DataMapping.parse("src=dst,src.s1.c1=dst.s2.c2")
        #expect(m.bucket("src") == "dst")
        #expect(m.bucket("other") == "other")
        let t = m.collection(BackupCollection(id: 8, scope: "s1", name: "c1"))
        #expect(t.scope == "s2" && t.name == "c2")
        #expect(throws: BackupError.self) { _ = try DataMapping.parse("a=b.c") }
        #expect(throws: BackupError.self) { _ = try DataMapping.parse("a") }
    }
}
