import SetteeClusterMap
import SetteeJSON
import Testing

/// The seqno report a rebalance reads from each node.
@Suite struct SeqnoReportTests {
    // Proves seqnos above 2^53 (and up to UInt64.max) cross the report exactly; the old reader went through
    // NSNumber and the writer through Int64(bitPattern:), so a seqno above Int64.max came back wrong.
    @Test func seqnosAboveTwoToTheFiftyThreeRoundTrip() throws {
        let rows = [
            SeqnoReport.Row(state: .active, high: (1 << 53) + 1, persisted: 1 << 53),
            SeqnoReport.Row(state: .replica, high: UInt64.max, persisted: UInt64(Int64.max) + 1),
            SeqnoReport.Row(state: .dead, high: 0, persisted: 0),
        ]
        let bytes = SeqnoReport.json(rows).serialized()
        #expect(
            String(decoding: bytes, as: UTF8.self)
                == #"[["active",9007199254740993,9007199254740992],["replica",18446744073709551615,9223372036854775808],["dead",0,0]]"#
        )
        #expect(SeqnoReport.parse(bytes, vBuckets: 3) == rows)
    }

    // Proves a short or odd row reads as dead/0 (never as progress it did not report), and a reply that is
    // not an array of rows is refused.
    @Test func partialRowsAndGarbage() {
        #expect(
            SeqnoReport.parse(Array(#"[["active"],[],["replica",-1,2.5]]"#.utf8), vBuckets: 3) == [
                .init(state: .active, high: 0, persisted: 0), .init(state: .dead, high: 0, persisted: 0),
                .init(state: .replica, high: 0, persisted: 0),
            ])
        // A state the report does not know reads as dead: a rebalance's takeover goes on only on `pending`.
        #expect(
            SeqnoReport.parse(Array(#"[["takeover",3,3],["pending",4,4]]"#.utf8), vBuckets: 2) == [
                .init(state: .dead, high: 3, persisted: 3), .init(state: .pending, high: 4, persisted: 4),
            ])
        #expect(SeqnoReport.parse(Array("{}".utf8), vBuckets: 1) == nil)
        #expect(SeqnoReport.parse(Array("[1]".utf8), vBuckets: 1) == nil)
        #expect(SeqnoReport.parse(Array("[[".utf8), vBuckets: 1) == nil)
    }

    // Proves a report whose row count is not the bucket's vBucket count is refused (a failed answer): the rebalance
    // indexed `seqnos[vb]` and a peer's `[]` trapped the orchestrator mid-rebalance.
    @Test func reportWithAnotherRowCountIsRefused() {
        let three = SeqnoReport.json(Array(repeating: .init(state: .active, high: 1, persisted: 1), count: 3))
            .serialized()
        #expect(SeqnoReport.parse(Array("[]".utf8), vBuckets: 1024) == nil)
        #expect(SeqnoReport.parse(three, vBuckets: 4) == nil)
        #expect(SeqnoReport.parse(three, vBuckets: 2) == nil)
        #expect(SeqnoReport.parse(three, vBuckets: 3)?.count == 3)
    }
}
