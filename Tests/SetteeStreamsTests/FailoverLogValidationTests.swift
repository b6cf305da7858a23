import SetteeCore
import SetteeStreams
import Testing

@Suite struct FailoverLogValidationTests {
    static func entry(_ uuid: UInt64, _ seqno: UInt64) -> FailoverEntry {
        FailoverEntry(uuid: VBucketUUID(uuid), seqno: SeqNo(seqno))
    }

    @Test func aPeersLogIsCheckedNotTrusted() {
        // Proves `FailoverLog(validating:)` refuses an empty log and one whose seqnos grow from newest to
        // oldest (the shapes that reached `init(entries:)`'s preconditions from a stream-request answer),
        // and keeps a good one as `init(entries:)` would.
        #expect(FailoverLog(validating: []) == nil)
        #expect(FailoverLog(validating: [Self.entry(1, 5), Self.entry(2, 9)]) == nil)
        let good = [Self.entry(1, 9), Self.entry(2, 9), Self.entry(3, 0)]
        #expect(FailoverLog(validating: good) == FailoverLog(entries: good))
    }

    @Test func aLogNamingAHistoryTwiceIsRefusedAndRollBackCannotKeepIt() {
        // Proves a peer's log that repeats an entry (or a uuid) is refused, so the consumer closes the stream instead
        // of adopting it; and that rolling back a log holding a duplicate (only the trusted initialiser builds one)
        // still leaves every entry at or below the target, so the promotion's `add` after it cannot trap. Before,
        // rollBack kept every copy of the oldest entry and `branch` hit `add`'s precondition on each promotion.
        #expect(FailoverLog(validating: [Self.entry(1, 100), Self.entry(1, 100)]) == nil)
        #expect(FailoverLog(validating: [Self.entry(1, 100), Self.entry(2, 50), Self.entry(1, 0)]) == nil)
        var c = StreamConsumer(vbucket: VBucketID(3), resume: .empty, failoverLog: nil)
        _ = c.start()
        let directives = c.accepted(producerEntries: [Self.entry(1, 100), Self.entry(1, 100)])
        guard case .close? = directives.last else {
            Issue.record("expected a close, got \(directives)")
            return
        }
        #expect(c.failoverLog == nil)

        var log = FailoverLog(entries: [Self.entry(1, 100), Self.entry(1, 100)])
        log.rollBack(to: SeqNo(40))
        #expect(log.entries == [Self.entry(1, 40)])
        log.add(uuid: VBucketUUID(9), at: SeqNo(40))
        #expect(log.entries == [Self.entry(9, 40), Self.entry(1, 40)])
        var ordinary = FailoverLog(entries: [Self.entry(3, 90), Self.entry(2, 30), Self.entry(1, 10)])
        ordinary.rollBack(to: SeqNo(50))
        #expect(ordinary.entries == [Self.entry(2, 30), Self.entry(1, 10)])
        ordinary.rollBack(to: SeqNo(5))
        #expect(ordinary.entries == [Self.entry(1, 5)])
    }

    @Test func anOutOfOrderLogFromTheProducerClosesTheStream() {
        // Proves the consumer turns a producer's out-of-order failover log into a protocol violation
        // (close, state failed, nothing persisted) instead of trapping, and accepts a good one.
        var c = StreamConsumer(vbucket: VBucketID(3), resume: .empty, failoverLog: nil)
        _ = c.start()
        let directives = c.accepted(producerEntries: [Self.entry(1, 5), Self.entry(2, 9)])
        guard case .close? = directives.last else {
            Issue.record("expected a close, got \(directives)")
            return
        }
        #expect(!directives.contains { if case .persistFailoverLog = $0 { true } else { false } })
        guard case .failed = c.state else {
            Issue.record("expected failed, got \(c.state)")
            return
        }
        #expect(c.failoverLog == nil)

        var ok = StreamConsumer(vbucket: VBucketID(3), resume: .empty, failoverLog: nil)
        _ = ok.start()
        let log = FailoverLog(entries: [Self.entry(7, 0)])
        #expect(ok.accepted(producerEntries: log.entries) == [.persistFailoverLog(log)])
    }
}
