import Foundation
import SetteeCore
import SetteeDocument
import SetteeGateway
import SetteeJSON
import Testing

/// Keys no document can have (the gateway's `_sync:` metadata, other `_` resources) on the document paths.
@Suite struct ReservedKeyReadTests {
    /// Proves a read by document id never reaches a reserved key, with imports on (1.x layout) and with shared
    /// bucket access: GET (also `_bulk_get`'s per-row read) and `open_revs` of a user record, a checkpoint, the
    /// sequence counter and a `_design/` id answer 400 "Invalid doc ID"; `_revs_diff` lists them missing. Before,
    /// with imports on, the user record was imported as a document and served, password hash included, and the
    /// checkpoint rewritten so that its next update conflicted. The records are unchanged after it, the user still
    /// logs in, the checkpoint takes its next revision, writes of such ids are refused, and a KV client's item under
    /// such a key is not imported from the change stream.
    @Test func documentReadsNeverReachTheGatewaysOwnKeys() async throws {
        var shared = DatabaseOptions(name: "db", importDocs: true)
        shared.sharedBucketAccess = true
        for options in [DatabaseOptions(name: "db", importDocs: true), shared] {
            let f = try await Fixture.open(options)
            _ = try await f.db.putPrincipal(
                "alice", isRole: false, json(#"{"password":"letmein","admin_channels":["*"]}"#))
            let checkpointRev = try await f.db.putLocal("cp", json(#"{"seq":1}"#))
            _ = try await f.db.put("doc", body: json(#"{"v":1}"#), user: nil)
            let userKey = "_sync:user:alice"
            let userRecord = try #require(try await f.bucket.get(userKey)).value
            let checkpoint = try #require(try await f.bucket.get("_sync:local:cp")).value
            let alice = try #require(await f.db.authenticate(name: "alice", password: "letmein"))
            let reserved = [userKey, "_sync:local:cp", "_sync:seq", "_design/x", "_local/cp", "_user/alice"]
            for id in reserved {
                for user in [nil, alice] as [UserContext?] {
                    let error = await #expect(throws: GatewayError.self, "\(id)") {
                        _ = try await f.db.get(id, revs: true, user: user)
                    }
                    #expect(error?.status == 400, "\(id): \(String(describing: error))")
                    await #expect(throws: GatewayError.self, "\(id)") {
                        _ = try await f.db.openRevs(id, revs: nil, revs: true, user: user)
                    }
                }
            }
            let rev = try #require(RevID("1-abc"))
            let diff = await f.db.revsDiff(Dictionary(uniqueKeysWithValues: reserved.map { ($0, [rev]) }), user: nil)
            for id in reserved {
                #expect(diff[id]?["missing"]?.arrayValue?.compactMap(\.stringValue) == ["1-abc"], "\(id): \(diff)")
            }
            #expect(try await f.bucket.get(userKey)?.value == userRecord, "the user record is untouched")
            #expect(try await f.bucket.get("_sync:local:cp")?.value == checkpoint, "the checkpoint is untouched")
            #expect(await f.db.authenticate(name: "alice", password: "letmein") != nil)
            _ = try await f.db.putLocal("cp", json(#"{"_rev":"\#(checkpointRev)","seq":2}"#))
            // Writes: `_sync:` is reserved (403), other `_` ids are not documents (400).
            for (id, status) in [("_sync:user:bob", 403), ("_design/x", 400), ("_user/bob", 400)] {
                let error = await #expect(throws: GatewayError.self) {
                    _ = try await f.db.put(id, body: json(#"{"v":1}"#), user: nil)
                }
                #expect(error?.status == status, "\(id)")
            }
            // An ordinary document still reads.
            #expect(try await f.db.get("doc", user: nil).body["v"]?.intValue == 1)
            // A KV client's item under such a key is not imported from the change stream (no read could serve it);
            // one written after it under a document id is.
            _ = try await f.bucket.upsert("_design/kv", value: Array(#"{"v":1}"#.utf8), expiry: 0)
            _ = try await f.bucket.upsert("kvdoc", value: Array(#"{"v":1}"#.utf8), expiry: 0)
            let imported = await eventually {
                try await f.db.changes(ChangesQuery(), user: nil).rows.contains { $0.id == "kvdoc" }
            }
            #expect(imported)
            #expect(try await f.db.changes(ChangesQuery(), user: nil).rows.allSatisfy { $0.id != "_design/kv" })
            await f.close()
        }
    }
}
