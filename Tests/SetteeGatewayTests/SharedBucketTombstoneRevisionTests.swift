import SetteeCore
import SetteeDocument
import SetteeJSON
import Testing

@testable import SetteeGateway

/// A replicator pulls a deletion by fetching the deleted revision (`_bulk_get`, `open_revs`): with shared bucket
/// access the winner's body is the item's, which a tombstone does not have, so the deleted winner must read as `{}`
/// (docs/adr/0037). Found by the PouchDB-protocol pull in `SharedBucketSDKAndPouchProcessTests` (404 `missing`).
@Suite struct SharedBucketTombstoneRevisionTests {
    @Test func deletedWinnersAreServedByRevision() async throws {
        // Proves: the tombstone revision of a gateway delete and of an imported KV delete are both readable by rev
        // id, as `{_id, _rev, _deleted: true}` with their `_revisions`, while a plain GET stays 404 `deleted`.
        let f = try await SharedBucketAccessTests.open()
        let r1 = try await f.db.put("gw", body: json(#"{"v":1}"#), user: nil)
        let r2 = try await f.db.delete("gw", rev: r1, user: nil)
        let gwTomb = try await f.db.get("gw", rev: r2, revs: true, user: nil).body
        #expect(gwTomb["_deleted"]?.boolValue == true && gwTomb["_rev"]?.stringValue == r2.description)
        #expect(gwTomb["_revisions"]?["start"]?.intValue == 2, "\(gwTomb)")
        #expect(gwTomb["v"] == nil)

        let k1 = try await f.db.put("kv", body: json(#"{"v":1}"#), user: nil)
        _ = try await f.bucket.remove("kv", cas: .zero)
        await #expect(throws: GatewayError.self) { _ = try await f.db.get("kv", user: nil) }
        guard case .found(let doc) = try await f.db.load("kv"), let tomb = doc.meta.tree.winner else {
            Issue.record("the KV delete was not imported")
            await f.close()
            return
        }
        #expect(doc.meta.tree.winnerIsDeleted && tomb.generation == 2)
        let kvTomb = try await f.db.get("kv", rev: tomb, revs: true, user: nil).body
        #expect(kvTomb["_deleted"]?.boolValue == true, "\(kvTomb)")
        let ids = kvTomb["_revisions"]?["ids"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(ids.count == 2 && "1-" + ids[1] == k1.description, "\(kvTomb)")
        await f.close()
    }
}
