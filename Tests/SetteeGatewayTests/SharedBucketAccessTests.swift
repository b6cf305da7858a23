import Foundation
import SetteeClient
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeStorage
import SetteeSubdoc
import Testing

@testable import SetteeGateway

/// Shared bucket access (`enable_shared_bucket_access`, ADR 0037): the pure decisions, then a database on an
/// embedded bucket written by the gateway and by a KV client (the engine, as an SDK's writes reach it).
@Suite struct SharedBucketAccessTests {
    // MARK: pure

    @Test(arguments: [
        (false, false, false, SharedBucketAccess.Transition.create),
        (false, false, true, .createDeleted),
        (true, false, false, .update),
        (true, false, true, .delete),
        (true, true, true, .updateTombstone),
        (true, true, false, .revive),
    ])
    func transitions(exists: Bool, itemDeleted: Bool, winnerDeleted: Bool, expected: SharedBucketAccess.Transition) {
        // Proves: each (item, new winner) pair maps to the one item change that keeps invariant 3 (a deleted
        // winner is a KV tombstone carrying `_sync`).
        #expect(
            SharedBucketAccess.transition(exists: exists, itemDeleted: itemDeleted, winnerDeleted: winnerDeleted)
                == expected)
    }

    @Test func importDecisions() {
        // Proves: the import rule of invariant 2 — the gateway's own version by CAS, or by body digest when only
        // metadata changed (a touch); an application's write or delete otherwise; a tombstone without `_sync`
        // is nothing of the gateway's. The digest is not computed when the CAS decides.
        func decide(
            deleted: Bool = false, sync: Bool = true, winnerDeleted: Bool = false, syncCAS: UInt64? = 7,
            itemCAS: UInt64 = 7, digest: UInt64 = 1
        ) -> SharedBucketAccess.Decision {
            SharedBucketAccess.decide(
                itemDeleted: deleted, hasSync: sync, winnerDeleted: winnerDeleted, syncCAS: syncCAS.map { CAS($0) },
                itemCAS: CAS(itemCAS), storedDigest: 1, bodyDigest: { digest })
        }
        #expect(decide() == .gateway)
        #expect(decide(itemCAS: 8) == .gateway)
        #expect(decide(itemCAS: 8, digest: 2) == .importBody)
        #expect(decide(syncCAS: nil, digest: 2) == .importBody)
        #expect(decide(sync: false) == .importBody)
        #expect(decide(deleted: true, sync: false) == .absent)
        #expect(decide(deleted: true, winnerDeleted: true) == .gateway)
        #expect(decide(deleted: true) == .importDeletion)
        var computed = false
        _ = SharedBucketAccess.decide(
            itemDeleted: false, hasSync: true, winnerDeleted: false, syncCAS: CAS(5), itemCAS: CAS(5), storedDigest: 0,
            bodyDigest: {
                computed = true
                return 0
            })
        #expect(!computed)
    }

    @Test func macroCASDecoding() {
        // Proves: `_sync.cas` is read as the node expands `${Mutation.CAS}` (little-endian hex), and junk is nil.
        let cas: UInt64 = 0x1234_5678_9abc_def0
        let text = "0x" + String(decoding: MutationMacro.digits(.cas, cas: cas, seqno: 0), as: UTF8.self)
        #expect(SharedBucketAccess.decodeMacroCAS(text) == CAS(cas))
        #expect(SharedBucketAccess.decodeMacroCAS("${Mutation.CAS}") == nil)
        #expect(SharedBucketAccess.decodeMacroCAS("0x12") == nil)
    }

    @Test func writeRequestsHaveTheXattrLayout() throws {
        // Proves: every write sets `_sync` whole and its `cas` by macro (XATTR specs first), then the body or the
        // deletion, with the document flags of its transition; each request passes the KV port's decoder.
        let sync = Array(#"{"rev":"1-a"}"#.utf8)
        let body = Array(#"{"v":1}"#.utf8)
        for (t, flags, last) in [
            (SharedBucketAccess.Transition.create, SubdocDocFlags.add, SubdocSpec.Operation.wholeDocumentSet),
            (.update, [], .wholeDocumentSet), (.delete, [], .wholeDocumentDelete),
            (.revive, [.accessDeleted, .reviveDocument], .wholeDocumentSet),
        ] {
            let r = SharedBucketAccess.write(t, sync: sync, body: body, expiry: 0)
            #expect(r.docFlags == flags)
            #expect(r.specs.count == 3 && r.specs[2].operation == last)
            #expect(r.specs[0].path == Array("_sync".utf8) && r.specs[0].value == sync)
            #expect(r.specs[1].flags.contains(.expandMacros))
            _ = try SubdocRequest.decode(opcode: r.multiOpcode, extras: r.encodedExtras, value: r.encodedValue)
        }
        let tombstone = SharedBucketAccess.write(.updateTombstone, sync: sync, body: body, expiry: 0)
        #expect(tombstone.specs.count == 2 && tombstone.docFlags == .accessDeleted)
        // A pushed tombstone with no item: one CREATE_AS_DELETED write of `_sync`, no body, no expiry.
        let created = SharedBucketAccess.write(.createDeleted, sync: sync, body: body, expiry: 30)
        #expect(created.specs.count == 2 && created.docFlags == [.add, .accessDeleted, .createAsDeleted])
        #expect(created.expiry == nil)
        _ = try SubdocRequest.decode(
            opcode: created.multiOpcode, extras: created.encodedExtras, value: created.encodedValue)
        #expect(SharedBucketAccess.write(.update, sync: sync, body: body, expiry: 30).expiry == 30)
    }

    // MARK: a database on an embedded bucket

    static func open() async throws -> Fixture {
        var options = DatabaseOptions(name: "db", importDocs: true)
        options.sharedBucketAccess = true
        return try await Fixture.open(options)
    }

    /// The item's body (what GET answers) and its `_sync` XATTR, tombstones included.
    static func item(_ f: Fixture, _ id: String) async throws -> (body: [UInt8], sync: JSON?, cas: CAS, deleted: Bool)?
    {
        guard let r = try await f.bucket.lookupIn(id, SharedBucketAccess.lookup) else { return nil }
        let sync: JSON? = r.results[0].status == 0 ? .some(try JSON.parse(r.results[0].value)) : .none
        return (r.results[1].value, sync, r.cas, r.deleted)
    }

    @Test func gatewayWritesLeaveTheBodyAsTheApplicationSeesIt() async throws {
        // Proves: a gateway document's item is the body alone (no `_sync`, `_id`, `_rev`), GET returns exactly it,
        // and `_sync` lives in the XATTR with the revision and the CAS of that very write (macro).
        let f = try await Self.open()
        let r1 = try await f.db.put("doc", body: json(#"{"channels":["a"],"v":1}"#), user: nil)
        let stored = try #require(try await f.bucket.get("doc"))
        #expect(String(decoding: stored.value, as: UTF8.self) == #"{"channels":["a"],"v":1}"#)
        let item = try #require(try await Self.item(f, "doc"))
        #expect(item.sync?["rev"]?.stringValue == r1.description)
        #expect(item.sync?["cas"]?.stringValue.flatMap(SharedBucketAccess.decodeMacroCAS) == item.cas)
        #expect(try await f.db.get("doc", user: nil).body["v"]?.intValue == 1)
        await f.close()
    }

    @Test func kvUpdateIsImportedAsAChildAndKVDeleteAsATombstone() async throws {
        // Proves: an SDK-style upsert (which keeps XATTRs) of a gateway document becomes `3-…` on `2-…` (one
        // leaf, no fork) with the application's body untouched; a KV delete leaves `_sync` on the tombstone and
        // reaches `_changes` as a deleted `4-…` child, the item staying a KV tombstone.
        let f = try await Self.open()
        let r1 = try await f.db.put("doc", body: json(#"{"channels":["a"],"v":1}"#), user: nil)
        let r2 = try await f.db.put("doc", body: json(#"{"_rev":"\#(r1)","channels":["a"],"v":2}"#), user: nil)
        let app = #"{"channels":["a"],"v":3,"by":"sdk"}"#
        _ = try await f.bucket.upsert("doc", value: Array(app.utf8), expiry: 0)
        #expect(await eventually { (try? await f.db.get("doc", user: nil).body["v"]?.intValue) == 3 })
        let (body, _) = try await f.db.get("doc", revs: true, user: nil)
        #expect(body["_rev"]?.stringValue?.hasPrefix("3-") == true)
        #expect(body["_revisions"]?["ids"]?.arrayValue?.dropFirst().first?.stringValue == r2.digest)
        #expect(try await f.db.openRevs("doc", revs: nil, revs: true, user: nil).count == 1)
        #expect(String(decoding: try #require(try await f.bucket.get("doc")).value, as: UTF8.self) == app)

        try await f.bucket.remove("doc", cas: .zero)
        #expect(
            await eventually {
                let rows = try await f.db.changes(ChangesQuery(), user: nil).rows.filter { $0.id == "doc" }
                return rows.count == 1 && rows[0].deleted && rows[0].changes.first?.generation == 4
            })
        let tomb = try #require(try await Self.item(f, "doc"))
        #expect(tomb.deleted && tomb.sync?["deleted"]?.boolValue == true)
        #expect(try await f.bucket.get("doc") == nil)
        await f.close()
    }

    @Test func gatewayDeleteIsAKVTombstoneAndRecreationRevivesIt() async throws {
        // Proves: a gateway delete makes the item a KV tombstone that keeps `_sync` (GET: not found); a new
        // revision on top revives it with the new body; a document born deleted (new_edits=false) is a tombstone
        // too; `_purge` removes `_sync` so nothing is imported back.
        let f = try await Self.open()
        let r1 = try await f.db.put("doc", body: json(#"{"v":1}"#), user: nil)
        let r2 = try await f.db.delete("doc", rev: r1, user: nil)
        #expect(try await f.bucket.get("doc") == nil)
        let tomb = try #require(try await Self.item(f, "doc"))
        #expect(tomb.deleted && tomb.sync?["rev"]?.stringValue == r2.description)
        let r3 = try await f.db.put("doc", body: json(#"{"_rev":"\#(r2)","v":3}"#), user: nil)
        #expect(r3.generation == 3)
        #expect(String(decoding: try #require(try await f.bucket.get("doc")).value, as: UTF8.self) == #"{"v":3}"#)

        _ = try await f.db.put(
            "born-deleted", body: json(#"{"_rev":"1-abc","_deleted":true}"#), newEdits: false, user: nil)
        let born = try #require(try await Self.item(f, "born-deleted"))
        #expect(born.deleted && born.sync?["rev"]?.stringValue == "1-abc")

        _ = try await f.db.purge(["doc": ["*"]])
        let purged = try await Self.item(f, "doc")
        #expect(purged == nil || purged?.sync == nil, "\(String(describing: purged))")
        try await Task.sleep(for: .milliseconds(200))
        await #expect(throws: GatewayError.self) { try await f.db.get("doc", user: nil) }
        await f.close()
    }

    @Test func aStaleWriteIsRefusedNotClobbered() async throws {
        // Proves invariant 1: a gateway write prepared against an older CAS fails with `.exists` when a KV client
        // wrote in between, and the KV client's body stays.
        let f = try await Self.open()
        _ = try await f.db.put("doc", body: json(#"{"v":1}"#), user: nil)
        guard case .found(var doc) = try await f.db.load("doc") else {
            Issue.record("not loaded")
            return
        }
        let old = doc
        _ = try await f.bucket.upsert("doc", value: Array(#"{"v":"sdk"}"#.utf8), expiry: 0)
        doc.body = [("v", .string("gateway"))]
        await #expect(throws: GatewayBucketError.exists) { try await f.db.writeItem(&doc, old: old, expiry: 0) }
        #expect(String(decoding: try #require(try await f.bucket.get("doc")).value, as: UTF8.self) == #"{"v":"sdk"}"#)
        await f.close()
    }
}
