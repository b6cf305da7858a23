import SetteeCore
import SetteeStreams
import Testing

/// One row of the producer-decision table.
struct DecisionCase: Sendable, CustomTestStringConvertible {
    let name: String
    let start: UInt64
    let snapStart: UInt64
    let snapEnd: UInt64
    let uuid: UInt64
    let end: UInt64
    let purge: UInt64
    let expected: StreamRequestDecision
    var testDescription: String { name }

    init(
        _ name: String, start: UInt64, snap: (UInt64, UInt64), uuid: UInt64, end: UInt64 = UInt64.max,
        purge: UInt64 = 0, _ expected: StreamRequestDecision
    ) {
        self.name = name
        self.start = start
        self.snapStart = snap.0
        self.snapEnd = snap.1
        self.uuid = uuid
        self.end = end
        self.purge = purge
        self.expected = expected
    }
}

// Producer history for every row: uuid 0xA from 0, 0xB from 100, 0xC (current) from 200; high seqno 300.
// So history A ends at 100, B at 200, C at the high seqno 300.
let decisionCases: [DecisionCase] = [
    DecisionCase("nothing held: start 0, uuid 0", start: 0, snap: (0, 0), uuid: 0, .accept),
    DecisionCase("nothing held wins over a purge", start: 0, snap: (0, 0), uuid: 0, purge: 50, .accept),
    DecisionCase("start 0 under a known history", start: 0, snap: (0, 0), uuid: 0xA, .accept),
    DecisionCase("start 0 under an unknown history", start: 0, snap: (0, 0), uuid: 0xDEAD, .rollback(to: .zero)),
    DecisionCase("unknown uuid", start: 50, snap: (50, 50), uuid: 0xDEAD, .rollback(to: .zero)),
    DecisionCase("snapshot inverted around start", start: 50, snap: (60, 70), uuid: 0xC, .invalidRange),
    DecisionCase("start after end", start: 50, snap: (50, 50), uuid: 0xC, end: 40, .invalidRange),
    DecisionCase("current history, within high seqno", start: 250, snap: (250, 250), uuid: 0xC, .accept),
    DecisionCase("current history, at high seqno", start: 300, snap: (290, 300), uuid: 0xC, .accept),
    DecisionCase("consumer ahead of the producer", start: 350, snap: (350, 350), uuid: 0xC, .rollback(to: SeqNo(300))),
    DecisionCase(
        "consumer's partial snapshot straddles the high seqno", start: 295, snap: (290, 310), uuid: 0xC,
        .rollback(to: SeqNo(290))),
    DecisionCase("old history B, before its end", start: 150, snap: (150, 150), uuid: 0xB, .accept),
    DecisionCase("old history B, exactly its end", start: 200, snap: (200, 200), uuid: 0xB, .accept),
    DecisionCase(
        "old history B, snapshot wholly past its end", start: 250, snap: (220, 260), uuid: 0xB,
        .rollback(to: SeqNo(200))),
    DecisionCase(
        "old history B, snapshot straddles its end", start: 190, snap: (180, 210), uuid: 0xB,
        .rollback(to: SeqNo(180))),
    DecisionCase(
        "normalise full: start == snapEnd past B's end", start: 210, snap: (180, 210), uuid: 0xB,
        .rollback(to: SeqNo(200))),
    DecisionCase("normalise empty: start == snapStart within B", start: 180, snap: (180, 210), uuid: 0xB, .accept),
    DecisionCase("oldest history A at its end", start: 100, snap: (90, 100), uuid: 0xA, .accept),
    DecisionCase("oldest history A past its end", start: 120, snap: (110, 130), uuid: 0xA, .rollback(to: SeqNo(100))),
    DecisionCase(
        "purge: snapshot starts below purge seqno", start: 60, snap: (40, 70), uuid: 0xC, purge: 50,
        .rollback(to: .zero)),
    DecisionCase(
        "purge: start below purge seqno", start: 40, snap: (30, 40), uuid: 0xC, purge: 50, .rollback(to: .zero)),
    DecisionCase("purge: normalised full snapshot clears it", start: 60, snap: (40, 60), uuid: 0xC, purge: 50, .accept),
    DecisionCase("purge: at the purge seqno is fine", start: 50, snap: (50, 50), uuid: 0xC, purge: 50, .accept),
    DecisionCase("purge: a known history at 0 gets everything", start: 0, snap: (0, 0), uuid: 0xC, purge: 50, .accept),
]

@Suite struct StreamRequestDecisionTests {
    static let history = ProducerHistory(
        failoverLog: FailoverLog(entries: [
            FailoverEntry(uuid: VBucketUUID(0xC), seqno: SeqNo(200)),
            FailoverEntry(uuid: VBucketUUID(0xB), seqno: SeqNo(100)),
            FailoverEntry(uuid: VBucketUUID(0xA), seqno: SeqNo(0)),
        ]),
        highSeqno: SeqNo(300), purgeSeqno: .zero)

    /// Proves every rule of the producer's decision (nothing held, range check, normalisation, purge, unknown
    /// uuid, and the three upper-bound outcomes) gives the documented answer.
    @Test(arguments: decisionCases)
    func decision(_ row: DecisionCase) {
        var history = Self.history
        history.purgeSeqno = SeqNo(row.purge)
        let request = StreamRequest(
            vbucket: VBucketID(7),
            resume: ResumePoint(
                start: SeqNo(row.start), snapStart: SeqNo(row.snapStart), snapEnd: SeqNo(row.snapEnd),
                uuid: VBucketUUID(row.uuid)),
            end: SeqNo(row.end))
        #expect(history.decide(request) == row.expected)
    }
}

@Suite struct FailoverLogTests {
    /// Proves entries stay newest first and the log keeps only the newest 25.
    @Test func capsAtTwentyFiveNewestFirst() {
        var log = FailoverLog(initialUUID: VBucketUUID(1000))
        for i in UInt64(1)...30 { log.add(uuid: VBucketUUID(1000 + i), at: SeqNo(i * 10)) }
        #expect(log.entries.count == FailoverLog.maxEntries)
        #expect(log.newest == FailoverEntry(uuid: VBucketUUID(1030), seqno: SeqNo(300)))
        #expect(log.entries.last == FailoverEntry(uuid: VBucketUUID(1006), seqno: SeqNo(60)))
        #expect(zip(log.entries, log.entries.dropFirst()).allSatisfy { $0.seqno >= $1.seqno })
    }

    /// Proves upper bounds: the current history ends at the high seqno, an older one where the next began.
    @Test func upperBounds() {
        let log = StreamRequestDecisionTests.history.failoverLog
        #expect(log.upperBound(of: VBucketUUID(0xC), highSeqno: SeqNo(300)) == SeqNo(300))
        #expect(log.upperBound(of: VBucketUUID(0xB), highSeqno: SeqNo(300)) == SeqNo(200))
        #expect(log.upperBound(of: VBucketUUID(0xA), highSeqno: SeqNo(300)) == SeqNo(100))
        #expect(log.upperBound(of: VBucketUUID(0xF), highSeqno: SeqNo(300)) == nil)
        #expect(log.uuid(forResumeAt: SeqNo(150)) == VBucketUUID(0xB))
        #expect(log.uuid(forResumeAt: SeqNo(200)) == VBucketUUID(0xC))
    }

    /// Proves a rollback drops the histories that began after the rollback point but never empties the log.
    @Test func rollbackPrunesNewerHistories() {
        var log = StreamRequestDecisionTests.history.failoverLog
        log.rollBack(to: SeqNo(150))
        #expect(log.entries.map(\.uuid) == [VBucketUUID(0xB), VBucketUUID(0xA)])
        var single = FailoverLog(entries: [FailoverEntry(uuid: VBucketUUID(9), seqno: SeqNo(40))])
        single.rollBack(to: SeqNo(10))
        #expect(single.entries == [FailoverEntry(uuid: VBucketUUID(9), seqno: SeqNo(10))])
    }
}
