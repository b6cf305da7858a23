import SetteeBLIP
import SetteeCore
import SetteeJSON
import Testing

@testable import SetteeGateway

/// A Couchbase Lite puller whose checkpoint predates a purged tombstone (issue 71 item 2, ADR 0145).
@Suite struct BLIPPurgeHorizonTests {
    @Test func aSubscriptionFromBeforeAPurgedTombstoneIsRefused() async throws {
        // Proves: once a deleted document's tombstone is purged, `subChanges` from a checkpoint older than the
        // deletion is answered with error 410 (the replicator stops instead of never learning of the deletion);
        // from the deletion's sequence on, and from 0, the subscription is accepted as before.
        let f = try await BLIPPullTests.open()
        let d = try await f.db.put("d", body: json(#"{"channels":["a"]}"#), user: nil)
        _ = try await f.db.put("e", body: json(#"{"channels":["a"]}"#), user: nil)
        let early = try await f.db.changes(ChangesQuery(), user: nil).lastSeq
        _ = try await f.db.delete("d", rev: d, user: nil)
        let late = try await f.db.changes(ChangesQuery(), user: nil).lastSeq
        _ = try await f.db.purge(["d": ["*"]])

        let refused = await BLIPPullTests.handler(f, "alice")
            .subscribe(.request("subChanges", [("since", early.description)]), peer: InMemoryBLIPPeer())
        #expect(BLIPSyncHandlerTests.errorCode(refused) == 410)
        for since in [late.description, "0"] {
            let accepted = await BLIPPullTests.handler(f, "alice")
                .subscribe(.request("subChanges", [("since", since)]), peer: InMemoryBLIPPeer())
            #expect(accepted.type == .response, "since \(since)")
        }
        await f.close()
    }
}
