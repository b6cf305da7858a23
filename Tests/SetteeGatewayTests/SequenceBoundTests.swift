import Foundation
import SetteeCore
import SetteeDocument
import SetteeJSON
import Testing

@testable import SetteeGateway

/// Sequences a KV client wrote (the `_sync:seq` counter, a document's `_sync.sequence`) past any a gateway allocates.
@Suite struct SequenceBoundTests {
    /// Proves the tracker never overflows, whatever it is told: skipping through 2^64 - 1 stops at the bound, larger
    /// sequences are ignored, and abandoning gaps at the bound stays there. Before, `skip(through: 2^64 - 1)` trapped.
    @Test func theTrackerStopsAtItsBound() {
        var t = SequenceTracker()
        t.skip(through: .max)
        #expect(t.next == SequenceTracker.maxSequence + 1)
        #expect(t.stable == SequenceTracker.maxSequence)
        let seenMax = t.see(.max)
        let seenPast = t.see(SequenceTracker.maxSequence + 1)
        #expect(!seenMax && !seenPast)
        let abandoned = t.abandonFirstGap()
        #expect(!t.hasGap && !abandoned)
        var u = SequenceTracker()
        u.skip(through: SequenceTracker.maxSequence - 2)
        let seenAtBound = u.see(SequenceTracker.maxSequence)
        #expect(!seenAtBound && u.hasGap)
        let firstAbandon = u.abandonFirstGap()
        #expect(firstAbandon && u.stable == SequenceTracker.maxSequence)
        let secondAbandon = u.abandonFirstGap()
        let seenMaxAgain = u.see(.max)
        #expect(!u.hasGap && !secondAbandon && !seenMaxAgain)
    }

    /// Proves a gateway opens on a bucket whose `_sync:seq` a KV client set to 2^64 - 1 (it trapped at open), and
    /// still writes and reads documents there.
    @Test func aGatewayOpensOverAHostileSequenceCounter() async throws {
        let bucket = try EmbeddedBucket(server: "walrus:", name: "test", logger: quietLogger())
        _ = try await bucket.upsert("_sync:seq", value: Array(String(UInt64.max).utf8), expiry: 0)
        let db = try await GatewayDatabase(options: DatabaseOptions(name: "db"), bucket: bucket, logger: quietLogger())
        let rev = try await db.put("doc", body: json(#"{"v":1}"#), user: nil)
        #expect(try await db.get("doc", user: nil).body["_rev"]?.stringValue == rev.description)
        _ = try await db.changes(ChangesQuery(), user: nil)
        await db.close()
        await bucket.close()
    }
}
