import Foundation
import SetteeBLIP
import SetteeCore
import SetteeDocument
import SetteeJSON
import Testing

@testable import SetteeGateway

/// The BLIP replication handler's one-request messages: checkpoints, collections, proposals, attachments, unknown
/// profiles. Each test drives `BLIPSyncHandler.handle` directly with an in-memory client (`InMemoryBLIPPeer`).
@Suite struct BLIPSyncHandlerTests {
    static func handler(_ f: Fixture, user: String?, subprotocol: BLIPSubprotocol = .cbMobile3) -> BLIPSyncHandler {
        BLIPSyncHandler(
            db: f.db, user: user.flatMap { f.db.userContext($0) }, subprotocol: subprotocol, logger: quietLogger())
    }

    static func errorCode(_ m: BLIPMessage) -> Int? { m.type == .error ? m["Error-Code"].flatMap { Int($0) } : nil }

    @Test func checkpointsAreLocalDocumentsWithRevisionsAndConflicts() async throws {
        // Proves: getCheckpoint of an unknown client is 404; setCheckpoint without rev creates it (rev 0-1), with the
        // stored rev replaces it (0-2), with a stale rev is 409 and with a rev for a never-stored one 404; an empty
        // rev counts as none (pythonblip); REST reads the same checkpoint as _local/checkpoint/<client>.
        let f = try await Fixture.open()
        let h = Self.handler(f, user: nil)
        let peer = InMemoryBLIPPeer()
        let client = [("client", "cp-abc")]
        #expect(Self.errorCode(await h.handle(.request("getCheckpoint", client), peer: peer)) == 404)
        let set1 = await h.handle(.request("setCheckpoint", client + [("rev", "")], body: #"{"remote":5}"#), peer: peer)
        #expect(set1.type == .response)
        #expect(set1["rev"] == "0-1")
        let got = await h.handle(.request("getCheckpoint", client), peer: peer)
        #expect(got["rev"] == "0-1")
        #expect(got.json == json(#"{"remote":5}"#))
        let set2 = await h.handle(
            .request("setCheckpoint", client + [("rev", "0-1")], body: #"{"remote":9}"#), peer: peer)
        #expect(set2["rev"] == "0-2")
        let stale = await h.handle(
            .request("setCheckpoint", client + [("rev", "0-1")], body: #"{"remote":10}"#), peer: peer)
        #expect(Self.errorCode(stale) == 409)
        let noRev = await h.handle(.request("setCheckpoint", client, body: #"{"remote":10}"#), peer: peer)
        #expect(Self.errorCode(noRev) == 409)
        let missing = await h.handle(
            .request("setCheckpoint", [("client", "cp-new"), ("rev", "0-3")], body: "{}"), peer: peer)
        #expect(Self.errorCode(missing) == 404)
        let rest = try await f.db.local("checkpoint/cp-abc")
        #expect(rest["_rev"] == .string("0-2"))
        #expect(rest["remote"] == .integer(9))
        #expect(Self.errorCode(await h.handle(.request("getCheckpoint"), peer: peer)) == 400)
        await f.close()
    }

    @Test func getCollectionsServesTheDefaultCollectionOnly() async throws {
        // Proves: getCollections answers the default collection's checkpoint ({} when none) and null for any other
        // collection; a later request may name index 0 but not an unknown or null one; mismatched lengths are 400.
        let f = try await Fixture.open()
        let h = Self.handler(f, user: nil)
        let peer = InMemoryBLIPPeer()
        _ = try await f.db.putLocal("checkpoint/cp-1", json(#"{"remote":3}"#))
        let body =
            #"{"collections":["_default._default","inventory.items","_default"],"checkpoint_ids":["cp-1","cp-2","cp-3"]}"#
        let answer = await h.handle(.request("getCollections", body: body), peer: peer)
        #expect(answer.type == .response)
        #expect(answer.json == json(#"[{"_rev":"0-1","remote":3},null,{}]"#))
        let ok = await h.handle(.request("getCheckpoint", [("client", "cp-1"), ("collection", "0")]), peer: peer)
        #expect(ok["rev"] == "0-1")
        let other = await h.handle(.request("getCheckpoint", [("client", "cp-1"), ("collection", "1")]), peer: peer)
        #expect(Self.errorCode(other) == 404)
        let beyond = await h.handle(.request("getCheckpoint", [("client", "cp-1"), ("collection", "7")]), peer: peer)
        #expect(Self.errorCode(beyond) == 404)
        let bad = await h.handle(
            .request("getCollections", body: #"{"collections":["_default"],"checkpoint_ids":[]}"#), peer: peer)
        #expect(Self.errorCode(bad) == 400)
        await f.close()
    }

    @Test func aCollectionPropertyNeedsGetCollectionsFirst() async throws {
        let f = try await Fixture.open()
        let h = Self.handler(f, user: nil)
        let m = await h.handle(
            .request("getCheckpoint", [("client", "x"), ("collection", "0")]), peer: InMemoryBLIPPeer())
        #expect(Self.errorCode(m) == 400)
        await f.close()
    }

    @Test func unknownProfilesAreBLIPErrors() async throws {
        let f = try await Fixture.open()
        let h = Self.handler(f, user: nil)
        let m = await h.handle(.request("getRev"), peer: InMemoryBLIPPeer())
        #expect(m.type == .error)
        #expect(m["Error-Domain"] == "BLIP")
        #expect(m["Error-Code"] == "404")
        await f.close()
    }

    @Test func proposeChangesAnswersAsSyncGatewayDoes() async throws {
        // Proves: a new document or one whose winner is the named parent may be sent (0, trailing zeros left out);
        // the winner itself is 304; another parent is 409, with the winner when conflictIncludesRev; a tombstoned
        // winner takes a revision naming no parent.
        let f = try await Fixture.open()
        let h = Self.handler(f, user: nil)
        let peer = InMemoryBLIPPeer()
        let r1 = try await f.db.put("doc", body: json(#"{"v":1}"#), user: nil)
        let gone = try await f.db.put("gone", body: json(#"{"v":1}"#), user: nil)
        _ = try await f.db.delete("gone", rev: gone, user: nil)
        let body =
            #"[["new","1-aaaa",""],["doc","\#(r1)"],["doc","2-bbbb","1-cccc"],["doc","2-dddd","\#(r1)"],["gone","1-eeee",""]]"#
        let plain = await h.handle(.request("proposeChanges", body: body), peer: peer)
        #expect(plain.json == json("[0,304,409]"))
        let withRev = await h.handle(
            .request("proposeChanges", [("conflictIncludesRev", "true")], body: body), peer: peer)
        #expect(withRev.json == json(#"[0,304,{"status":409,"rev":"\#(r1)"}]"#))
        let none = await h.handle(.request("proposeChanges", body: #"[["new2","1-ffff"]]"#), peer: peer)
        #expect(none.json == json("[]"))
        await f.close()
    }

    @Test func changesFromAClientAnswerWhatIsMissing() async throws {
        // Proves: a pushed `changes` is answered per entry with the ancestors this database has (an array: send it)
        // or 0 (already here), and refused with 409 on a database without conflicts.
        let f = try await Fixture.open()
        let h = Self.handler(f, user: nil)
        let peer = InMemoryBLIPPeer()
        let r1 = try await f.db.put("doc", body: json(#"{"v":1}"#), user: nil)
        let body = #"[[1,"doc","\#(r1)"],[2,"doc","2-abcd"],[3,"new","1-abcd"]]"#
        let answer = await h.handle(.request("changes", body: body), peer: peer)
        #expect(answer.json == json(#"[0,["\#(r1)"],[]]"#))

        let g = try await Fixture.open(DatabaseOptions(name: "db", allowConflicts: false))
        let refused = await Self.handler(g, user: nil).handle(.request("changes", body: body), peer: peer)
        #expect(Self.errorCode(refused) == 409)
        await f.close()
        await g.close()
    }

    @Test func getAttachmentOnlyForRevisionsTheConnectionWasSent() async throws {
        // Proves: an attachment digest is served only after a revision holding it went to this connection (403
        // before, even to a reader who could see it), and under CBMobile_3 the request must name the document.
        let f = try await Fixture.open()
        let data = Array("hello attachment".utf8)
        let b64 = Data(data).base64EncodedString()
        _ = try await f.db.put(
            "doc",
            body: json(#"{"_attachments":{"a.txt":{"content_type":"text/plain","data":"\#(b64)"}}}"#), user: nil)
        let digest = AttachmentInfo.digest(of: data)
        let h = Self.handler(f, user: nil)
        let peer = InMemoryBLIPPeer()
        let ask = BLIPMessage.request("getAttachment", [("digest", digest), ("docID", "doc")])
        #expect(Self.errorCode(await h.handle(ask, peer: peer)) == 403)
        #expect(Self.errorCode(await h.handle(.request("getAttachment", [("digest", digest)]), peer: peer)) == 400)
        _ = await h.subscribe(.request("subChanges"), peer: peer)
        let rev = try #require(await peer.request(2))
        #expect(rev.profile == "rev")
        let served = await h.handle(ask, peer: peer)
        #expect(served.type == .response)
        #expect(served.body == data)
        await f.close()
    }

    @Test func proveAttachmentAnswersTheProofOfStoredData() async throws {
        let f = try await Fixture.open()
        let data = Array("proof data".utf8)
        let b64 = Data(data).base64EncodedString()
        _ = try await f.db.put("doc", body: json(#"{"_attachments":{"a":{"data":"\#(b64)"}}}"#), user: nil)
        let digest = AttachmentInfo.digest(of: data)
        let h = Self.handler(f, user: "")
        let nonce: [UInt8] = Array(0..<20)
        var ask = BLIPMessage.request("proveAttachment", [("digest", digest)])
        ask.body = nonce
        let proof = await h.handle(ask, peer: InMemoryBLIPPeer())
        #expect(String(decoding: proof.body, as: UTF8.self) == AttachmentInfo.digest(of: [20] + nonce + data))
        var unknown = BLIPMessage.request("proveAttachment", [("digest", "sha1-nope")])
        unknown.body = nonce
        #expect(Self.errorCode(await h.handle(unknown, peer: InMemoryBLIPPeer())) == 404)
        await f.close()
    }

    @Test func subprotocolNegotiationPicksTheFirstSpoken() {
        #expect(BLIPSubprotocol.negotiate("BLIP_3+CBMobile_3,BLIP_3+CBMobile_2") == .cbMobile3)
        #expect(BLIPSubprotocol.negotiate("BLIP_3+CBMobile_4, BLIP_3+CBMobile_2") == .cbMobile2)
        #expect(BLIPSubprotocol.negotiate("BLIP_2+CBMobile_1") == nil)
        #expect(BLIPSubprotocol.negotiate(nil) == nil)
    }

    @Test(arguments: [
        ([("filter", "other")], "Unknown filter; try sync_gateway/bychannel"),
        ([("filter", "sync_gateway/bychannel")], "Missing 'channels' filter parameter"),
        ([("filter", "sync_gateway/bychannel"), ("channels", ",")], "Empty channel list"),
        ([("since", "x:y")], "Invalid subChanges parameters: since x:y"),
        ([("batch", "-3")], "Invalid subChanges parameters: batch -3"),
    ])
    func subChangesRefusesBadParameters(properties: [(String, String)], reason: String) async throws {
        let f = try await Fixture.open()
        let m = await Self.handler(f, user: nil).subscribe(.request("subChanges", properties), peer: InMemoryBLIPPeer())
        #expect(Self.errorCode(m) == 400)
        #expect(String(decoding: m.body, as: UTF8.self) == reason)
        await f.close()
    }

    @Test func subChangesWithDocIDsMustBeOneShot() async throws {
        let f = try await Fixture.open()
        let m = await Self.handler(f, user: nil).subscribe(
            .request("subChanges", [("continuous", "true")], body: #"{"docIDs":["a"]}"#), peer: InMemoryBLIPPeer())
        #expect(Self.errorCode(m) == 400)
        await f.close()
    }
}
