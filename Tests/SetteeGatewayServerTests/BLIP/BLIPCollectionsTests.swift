import Foundation
import SetteeBLIP
import SetteeCore
import SetteeDocument
import SetteeJSON
import Testing

@testable import SetteeGateway

/// `getCollections` and collection-indexed requests (ADR 0149) over a database of several keyspaces, in memory: each
/// named collection a `GatewayDatabase` on a `KeyspaceBucket` (its own walrus bucket for documents, the shared one for
/// metadata), linked as `GatewayServer.openKeyspaces` links them.
@Suite struct BLIPCollectionsTests {
    /// A database over `s.c1` and `s.c2` (and the default collection when `withDefault`).
    struct Keyspaces {
        let metadata: EmbeddedBucket
        let buckets: [EmbeddedBucket]
        let spaces: [Keyspace: GatewayDatabase]
        let primary: GatewayDatabase

        static let c1 = Keyspace(scope: "s", collection: "c1")
        static let c2 = Keyspace(scope: "s", collection: "c2")

        static func open(withDefault: Bool) async throws -> Keyspaces {
            let metadata = try EmbeddedBucket(server: "walrus:", name: "meta", logger: quietLogger())
            let links = KeyspaceLinks()
            var spaces: [Keyspace: GatewayDatabase] = [:]
            var buckets: [EmbeddedBucket] = []
            var order: [Keyspace] = []
            if withDefault {
                var options = DatabaseOptions(name: "db")
                options.links = links
                spaces[.defaultCollection] = try await GatewayDatabase(
                    options: options, bucket: metadata, logger: quietLogger())
                order.append(.defaultCollection)
            }
            for k in [c1, c2] {
                let data = try EmbeddedBucket(server: "walrus:", name: k.collection, logger: quietLogger())
                buckets.append(data)
                var options = DatabaseOptions(name: "db")
                options.keyspace = k
                options.links = links
                spaces[k] = try await GatewayDatabase(
                    options: options, bucket: KeyspaceBucket(data: data, metadata: metadata), logger: quietLogger())
                order.append(k)
            }
            let primary = try #require(spaces[order[0]])
            return Keyspaces(metadata: metadata, buckets: buckets, spaces: spaces, primary: primary)
        }

        func db(_ k: Keyspace) throws -> GatewayDatabase { try #require(spaces[k]) }

        func handler(user: String? = nil) -> BLIPSyncHandler {
            BLIPSyncHandler(
                keyspaces: BLIPKeyspaces(primary: primary, keyspaces: spaces),
                user: user.flatMap { primary.userContext($0) }, subprotocol: .cbMobile3, logger: quietLogger())
        }

        func close() async {
            for db in spaces.values { await db.close() }
            for b in buckets { await b.close() }
            await metadata.close()
        }
    }

    static func errorCode(_ m: BLIPMessage) -> Int? { BLIPSyncHandlerTests.errorCode(m) }

    static func getCollections(_ names: [String], ids: [String]) -> BLIPMessage {
        let body = JSON.object([
            ("collections", .array(names.map(JSON.string))), ("checkpoint_ids", .array(ids.map(JSON.string))),
        ])
        return .request("getCollections", body: String(decoding: body.serialized(), as: UTF8.self))
    }

    @Test func getCollectionsResolvesKeyspacesAndCheckpointsLiveInEach() async throws {
        // Proves: `scope.collection` names resolve to the database's keyspaces and the rest (another collection, the
        // default collection the database leaves out, a malformed name) answer null; each index's checkpoint is read
        // from and written to its own keyspace's `_local` only; an index answered null is 404; a request without
        // `collection` on a database without the default collection is 400 with Sync Gateway's text.
        let k = try await Keyspaces.open(withDefault: false)
        let h = k.handler()
        let peer = InMemoryBLIPPeer()
        _ = try await k.db(Keyspaces.c1).putLocal("checkpoint/cp-1", json(#"{"remote":7}"#))
        let answer = await h.handle(
            Self.getCollections(
                ["s.c1", "s.c2", "s.nope", "_default", "_default._default", "s.c1.x", ".c1"],
                ids: ["cp-1", "cp-1", "cp-1", "cp-1", "cp-1", "cp-1", "cp-1"]), peer: peer)
        #expect(answer.type == .response)
        #expect(answer.json == json(#"[{"_rev":"0-1","remote":7},{},null,null,null,null,null]"#))
        let set = await h.handle(
            .request("setCheckpoint", [("client", "cp-1"), ("collection", "1")], body: #"{"remote":3}"#), peer: peer)
        #expect(set["rev"] == "0-1")
        #expect(try await k.db(Keyspaces.c2).local("checkpoint/cp-1")["remote"] == .integer(3))
        #expect(try await k.db(Keyspaces.c1).local("checkpoint/cp-1")["remote"] == .integer(7))
        let got = await h.handle(.request("getCheckpoint", [("client", "cp-1"), ("collection", "0")]), peer: peer)
        #expect(got.json == json(#"{"remote":7}"#))
        for index in ["2", "3", "7", "-1"] {
            let m = await h.handle(.request("getCheckpoint", [("client", "cp-1"), ("collection", index)]), peer: peer)
            #expect(Self.errorCode(m) == 404, "index \(index)")
        }
        let noCollection = await h.handle(.request("getCheckpoint", [("client", "cp-1")]), peer: peer)
        #expect(Self.errorCode(noCollection) == 400)
        #expect(String(decoding: noCollection.body, as: UTF8.self).contains("default collection is not configured"))
        await k.close()
    }

    @Test func theDefaultCollectionAnswersRequestsWithoutCollection() async throws {
        // Proves: on a database that serves the default collection, `_default` resolves to it beside the named
        // ones, and a request without `collection` runs on it (not on a named keyspace).
        let k = try await Keyspaces.open(withDefault: true)
        let h = k.handler()
        let peer = InMemoryBLIPPeer()
        let answer = await h.handle(Self.getCollections(["_default", "s.c2"], ids: ["a", "a"]), peer: peer)
        #expect(answer.json == json("[{},{}]"))
        _ = await h.handle(.request("setCheckpoint", [("client", "a")], body: #"{"local":1}"#), peer: peer)
        #expect(try await k.db(.defaultCollection).local("checkpoint/a")["local"] == .integer(1))
        await #expect(throws: GatewayError.self) { try await k.db(Keyspaces.c2).local("checkpoint/a") }
        await k.close()
    }

    @Test func pushedRevisionsGoToTheirIndexesKeyspace() async throws {
        // Proves: `proposeChanges` and `rev` run on the keyspace their index names: the same document id pushed on
        // two indexes is two documents, each body in its own collection; a proposal is answered from its own
        // keyspace (a revision present in c1 is 304 there and still wanted in c2).
        let k = try await Keyspaces.open(withDefault: false)
        let h = k.handler()
        let peer = InMemoryBLIPPeer()
        _ = await h.handle(Self.getCollections(["s.c1", "s.c2"], ids: ["x", "x"]), peer: peer)
        for (index, value) in [("0", "one"), ("1", "two")] {
            let rev = await h.handle(
                .request(
                    "rev", [("id", "doc"), ("rev", "1-a\(index)"), ("collection", index)],
                    body: #"{"v":"\#(value)"}"#), peer: peer)
            #expect(rev.type == .response)
        }
        #expect(try await k.db(Keyspaces.c1).get("doc", user: nil).body["v"] == .string("one"))
        #expect(try await k.db(Keyspaces.c2).get("doc", user: nil).body["v"] == .string("two"))
        let proposals = #"[["doc","1-a0",""]]"#
        let inC1 = await h.handle(.request("proposeChanges", [("collection", "0")], body: proposals), peer: peer)
        #expect(inC1.json == json("[304]"))
        let inC2 = await h.handle(.request("proposeChanges", [("collection", "1")], body: proposals), peer: peer)
        #expect(inC2.json == json("[409]"))
        await k.close()
    }

    @Test func eachIndexHasItsOwnSubscription() async throws {
        // Proves: a `subChanges` per collection index runs at once, each feed offering only its keyspace's documents
        // and echoing its index on every request; a second `subChanges` on an index with a current one is 409;
        // `unsubChanges` with an index ends that index's only, after which it may subscribe again.
        let k = try await Keyspaces.open(withDefault: false)
        _ = try await k.db(Keyspaces.c1).put("only-c1", body: json(#"{"n":1}"#), user: nil)
        _ = try await k.db(Keyspaces.c2).put("only-c2", body: json(#"{"n":2}"#), user: nil)
        let h = k.handler()
        let peer = InMemoryBLIPPeer()
        _ = await h.handle(Self.getCollections(["s.c1", "s.c2"], ids: ["x", "x"]), peer: peer)
        for index in ["0", "1"] {
            let sub = await h.subscribe(
                .request("subChanges", [("continuous", "true"), ("collection", index)]), peer: peer)
            #expect(sub.type == .response)
        }
        // Each feed sends a batch of one and an empty caught-up `changes`, then the wanted `rev`.
        for i in 0..<6 { #expect(await peer.request(i) != nil) }
        var offered: [String: Set<String>] = [:]
        for m in peer.sent {
            let index = try #require(m["collection"])
            if m.profile == "changes" { offered[index, default: []].formUnion(BLIPPullTests.ids(m)) }
            if m.profile == "rev" { offered[index, default: []].insert(m["id"] ?? "") }
        }
        #expect(offered == ["0": ["only-c1"], "1": ["only-c2"]])
        let again = await h.handle(
            .request("subChanges", [("continuous", "true"), ("collection", "0")]), peer: peer)
        #expect(Self.errorCode(again) == 409)
        _ = await h.handle(.request("unsubChanges", [("collection", "0")]), peer: peer)
        let stillOne = await h.handle(
            .request("subChanges", [("continuous", "true"), ("collection", "1")]), peer: peer)
        #expect(Self.errorCode(stillOne) == 409)
        let renewed = await h.subscribe(
            .request("subChanges", [("continuous", "true"), ("collection", "0")]), peer: peer)
        #expect(renewed.type == .response)
        h.close()
        await k.close()
    }

    @Test func feedsPerConnectionAreBounded() async throws {
        // Proves: naming one collection under many indexes does not open a feed per index past
        // `Limits.gatewayBLIPMaxLiveFeedsPerConnection` (429), and the bound counts the connection's feeds, not an
        // index's.
        let k = try await Keyspaces.open(withDefault: false)
        let h = k.handler()
        let peer = InMemoryBLIPPeer()
        let n = Limits.gatewayBLIPMaxLiveFeedsPerConnection + 1
        _ = await h.handle(
            Self.getCollections(Array(repeating: "s.c1", count: n), ids: Array(repeating: "x", count: n)), peer: peer)
        var codes: [Int?] = []
        for i in 0..<n {
            let m = await h.subscribe(
                .request("subChanges", [("continuous", "true"), ("collection", String(i))]), peer: peer)
            codes.append(Self.errorCode(m))
        }
        #expect(codes.dropLast().allSatisfy { $0 == nil })
        #expect(codes.last == 429)
        h.close()
        await k.close()
    }

    @Test func attachmentGrantsAreKeptPerCollection() {
        // Proves: a grant made on one collection index is not the grant of the same document and digest on another,
        // nor of a request without `collection`.
        var grants = BLIPAttachmentGrants()
        grants.grant(BLIPAttachmentGrants.key(docID: "d", digest: "sha1-x", collection: "0"))
        #expect(grants.allows(BLIPAttachmentGrants.key(docID: "d", digest: "sha1-x", collection: "0")))
        #expect(!grants.allows(BLIPAttachmentGrants.key(docID: "d", digest: "sha1-x", collection: "1")))
        #expect(!grants.allows(BLIPAttachmentGrants.key(docID: "d", digest: "sha1-x")))
    }
}
