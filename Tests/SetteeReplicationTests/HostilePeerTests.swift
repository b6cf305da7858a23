import SetteeJSON
import Synchronization
import Testing

@testable import SetteeReplication

/// A replication peer's bytes that used to trap the replicating process or exhaust its memory.
@Suite struct HostilePeerTests {
    // Proves a peer's `_local` checkpoint `_rev` at `0-Int.max` (or garbled, or negative) gives `0-1`
    // instead of trapping on `n + 1`; ordinary revs still count on.
    @Test func nextLocalRevNeverTraps() {
        #expect(Replicator.nextLocalRev("0-9223372036854775807") == "0-1")
        #expect(Replicator.nextLocalRev("0-9223372036854775808") == "0-1")
        #expect(Replicator.nextLocalRev("0-9223372036854775806") == "0-9223372036854775807")
        #expect(Replicator.nextLocalRev("0--5") == "0-1")
        #expect(Replicator.nextLocalRev("0-abc") == "0-1")
        #expect(Replicator.nextLocalRev("7-x") == "0-1")
        #expect(Replicator.nextLocalRev(nil) == "0-1")
        #expect(Replicator.nextLocalRev("0-41") == "0-42")
    }

    // Proves a replication whose target holds its checkpoint at `_rev` `0-9223372036854775807` (a peer that
    // counts past `Int.max`, as CouchDB does) completes: every checkpoint after the first meets a 409, reads
    // the peer's `_rev` and is put again. Before, the first checkpoint's `nextLocalRev` trapped the process.
    @Test func aCheckpointRevAtIntMaxIsSavedAgainNotATrap() async throws {
        let a = MemoryEndpoint("a")
        let b = MemoryEndpoint("b")
        for i in 1...300 { a.put("doc\(i)", rev: "1-a\(i)", body: [("n", .number(Double(i)))]) }
        var options = ReplicatorOptions(batchSize: 100)
        options.backoffInitialMs = 5
        let r = Replicator(source: a, target: b, options: options)
        b.store.withLock { $0.locals[r.replicationID] = .object([("_rev", .string("0-9223372036854775807"))]) }
        r.start()
        let s = await r.waitUntilStopped()
        #expect(s.lastError == nil && s.completed == 300, "\(s)")
        #expect(b.docs.count == 300)
        let saved = try await b.getLocal(r.replicationID)
        #expect(saved?["session_id"] != nil, "the checkpoint was written on the target")
        let rev = saved?["_rev"]?.stringValue ?? ""
        let digits = String(rev.dropFirst(2))
        #expect(digits.count == 19 && digits > "9223372036854775808", "counted on past Int.max: \(rev)")
        #expect(try await a.getLocal(r.replicationID)?["_rev"]?.stringValue != nil)
    }
}
