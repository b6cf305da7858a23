import SetteeCore
import SetteeDocument
import SetteeJSON
import Testing

@testable import SetteeGateway

/// `_sync` written straight to bytes (issue 69 item 6): the kept bodies an update read are copied into the new
/// `_sync`, not parsed and serialized again, and the result is what `json().serialized()` wrote.
@Suite struct SyncMetaStorageTests {
    /// A meta with four revisions: the winner (its body beside the tree), a kept parent, a kept losing leaf, and a
    /// body stored as text because it is no JSON (a KV client's `_sync`).
    static func meta() throws -> SyncMeta {
        var meta = SyncMeta()
        try meta.tree.add(RevID("1-a")!, parent: nil, deleted: false, body: Array(#"{"v":1,"s":"é\n"}"#.utf8))
        try meta.tree.add(RevID("2-b")!, parent: RevID("1-a")!, deleted: false, body: Array(#"{"v":2}"#.utf8))
        try meta.tree.add(RevID("3-d")!, parent: RevID("2-b")!, deleted: false, body: Array(#"{"v":3}"#.utf8))
        _ = try meta.tree.addHistory([RevID("2-c")!, RevID("1-a")!], deleted: true, body: Array("not json".utf8))
        meta.sequence = 7
        meta.recentSequences = [5, 6, 7]
        meta.channels = ["a"]
        meta.removals["b"] = ChannelRemoval(seq: 6, rev: RevID("2-b")!, deleted: false)
        meta.access = ["u": ["a": 7]]
        meta.revChannels = [RevID("3-d")!: ["a"]]
        meta.bodyDigest = 0xabc
        meta.expiry = 99
        meta.attachments = JSON.object([("f", .object([("stub", .bool(true))]))])
        return meta
    }

    /// Proves `storageBytes` is `json().serialized()` byte for byte, whether the bodies are copied (`verbatim`) or
    /// parsed and written again, the winner's body left out and the text body kept as a string; and that it reads
    /// back as the same meta.
    @Test func storageBytesAreTheJSONsBytes() throws {
        var meta = try Self.meta()
        let expected = meta.json().serialized()
        #expect(meta.storageBytes() == expected)
        meta.verbatim.revs = [RevID("1-a")!, RevID("2-b")!, RevID("3-d")!]
        #expect(meta.storageBytes() == expected)
        #expect(String(decoding: expected, as: UTF8.self).contains(#""not json""#))
        #expect(!String(decoding: expected, as: UTF8.self).contains(#""v":3"#))
        let back = try SyncMeta(json: JSON.parse(meta.storageBytes()))
        var stored = meta
        stored.tree.setBody(nil, of: RevID("3-d")!)  // the winner's body is the item's, beside the tree
        #expect(back == stored)
        // Read back, the object bodies are known to be serialized objects; the text one is not.
        #expect(back.verbatim.revs == [RevID("1-a")!, RevID("2-b")!])
        // An empty tree and a tree without bodies.
        #expect(SyncMeta().storageBytes() == SyncMeta().json().serialized())
    }

    /// Proves the kept bodies named `verbatim` are copied as they are: a body held in a form `serialized()` would not
    /// write (spaces) comes out unchanged, where `json()` rewrites it; one not named is rewritten.
    @Test func verbatimBodiesAreCopiedNotReserialized() throws {
        var meta = SyncMeta()
        try meta.tree.add(RevID("1-a")!, parent: nil, deleted: false, body: Array(#"{"v": 1}"#.utf8))
        try meta.tree.add(RevID("2-b")!, parent: RevID("1-a")!, deleted: false, body: Array(#"{"w": 2}"#.utf8))
        try meta.tree.add(RevID("3-c")!, parent: RevID("2-b")!, deleted: false, body: Array(#"{"x":3}"#.utf8))
        meta.verbatim.revs = [RevID("1-a")!]
        let text = String(decoding: meta.storageBytes(), as: UTF8.self)
        #expect(text.contains(#""0":{"v": 1}"#), "\(text)")
        #expect(text.contains(#""1":{"w":2}"#), "\(text)")
        #expect(try JSON.parse(meta.storageBytes()) == meta.json())
    }

    /// Proves an update through `put` on both layouts keeps the parent's body in `_sync` as it was written, and the
    /// document reads back whole: every body, the winner and the kept ancestors, as put.
    @Test(arguments: [true, false]) func updatesKeepTheirAncestorsBodies(sharedAccess: Bool) async throws {
        let bucket = try EmbeddedBucket(server: "walrus:", name: "sync-meta", logger: quietLogger())
        var options = DatabaseOptions(name: "db")
        options.sharedBucketAccess = sharedAccess
        let db = try await GatewayDatabase(options: options, bucket: bucket, logger: quietLogger())
        var revs: [RevID] = []
        var rev: RevID? = nil
        for i in 0..<4 {
            var members: [(String, JSON)] = [("n", .integer(Int128(i))), ("s", .string("é \(i)"))]
            if let rev { members.insert(("_rev", .string(rev.description)), at: 0) }
            rev = try await db.put("doc", body: .object(members), user: nil)
            revs.append(try #require(rev))
        }
        guard case .found(let doc) = try await db.load("doc") else {
            Issue.record("doc not found")
            return
        }
        #expect(doc.meta.tree.winner == revs[3])
        for (i, r) in revs.enumerated().dropFirst() {
            let bytes = try #require(doc.meta.tree.body(of: r), "\(r)")
            #expect(try JSON.parse(bytes) == JSON.object([("n", .integer(Int128(i))), ("s", .string("é \(i)"))]))
        }
        await db.close()
        await bucket.close()
    }
}
