import SetteeBLIP
import SetteeCore
import SetteeJSON
import Synchronization
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

    @Test func aPullFromZeroAfterAPurgeResumesFromItsOwnSequencesBelowTheHorizon() async throws {
        // Proves the ADR 0145 amendment on BLIP: after a purge whose horizon lies above 12 old documents, a pull from
        // 0 is offered them in batches whose sequences carry the horizon it began at (JSON strings `S@H`); a
        // checkpoint at the first batch's last sequence, sent back as Couchbase Lite sends it, resumes the pull
        // (the plain sequence alone is refused, as before) and is offered the rest.
        let f = try await BLIPPullTests.open()
        for i in 0..<12 { _ = try await f.db.put("old\(i)", body: json(#"{"channels":["a"]}"#), user: nil) }
        var doomed: [String: [String]] = [:]
        for i in 0..<3 {
            let rev = try await f.db.put("new\(i)", body: json(#"{"channels":["a"]}"#), user: nil)
            _ = try await f.db.delete("new\(i)", rev: rev, user: nil)
            doomed["new\(i)"] = ["*"]
        }
        _ = try await f.db.purge(doomed)
        let horizon = f.db.purgeHorizon.withLock { $0.purgedThrough }

        let peer = InMemoryBLIPPeer()
        _ = await BLIPPullTests.handler(f, "alice").subscribe(.request("subChanges", [("batch", "10")]), peer: peer)
        let first = try #require(await peer.request(0))
        #expect(BLIPPullTests.ids(first) == (0..<10).map { "old\($0)" })
        let checkpoint = try #require(first.json?.arrayValue?.last?.arrayValue?[0])
        let token = try #require(ChangesSince(json: checkpoint))
        #expect(checkpoint == .string(token.description) && token.seq < horizon && token.pullHorizon == horizon)

        let plain = await BLIPPullTests.handler(f, "alice")
            .subscribe(.request("subChanges", [("since", String(token.seq))]), peer: InMemoryBLIPPeer())
        #expect(BLIPSyncHandlerTests.errorCode(plain) == 410)
        let resumedPeer = InMemoryBLIPPeer()
        let resumed = await BLIPPullTests.handler(f, "alice")
            .subscribe(
                .request("subChanges", [("since", String(decoding: checkpoint.serialized(), as: UTF8.self))]),
                peer: resumedPeer)
        #expect(resumed.type == .response)
        let rest = try #require(await resumedPeer.request(0))
        #expect(BLIPPullTests.ids(rest) == ["old10", "old11"])
        await f.close()
    }
}
