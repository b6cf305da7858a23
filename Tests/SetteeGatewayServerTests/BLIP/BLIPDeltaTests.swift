import Foundation
import SetteeBLIP
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeReplication
import Testing

@testable import SetteeGateway

/// Delta sync on `/_blipsync` (ADR 0125, Sync Gateway's `delta_sync`): revisions pulled as JSON deltas against a
/// revision the client has, pushed deltas applied to the stored source, attachments carried in the delta, and the
/// refusals Sync Gateway gives (422 for a source or delta it cannot use, 400 with delta sync off).
@Suite struct BLIPDeltaTests {
    static func open(deltas: Bool) async throws -> Fixture {
        var options = DatabaseOptions(
            name: "db", users: ["alice": json(#"{"password":"pass","admin_channels":["a"]}"#)])
        options.deltaSync = DeltaSyncConfig(enabled: deltas)
        return try await Fixture.open(options)
    }

    /// A body with `n` long lines: large next to a one-member edit.
    static func bulk(_ n: Int, edited: Int? = nil) -> String {
        (0..<n).map { i in
            #""line\#(i)":"\#(i == edited ? "edited " : "")\#(String(repeating: "lorem ipsum ", count: 8))""#
        }.joined(separator: ",")
    }

    /// The members of a revision as a `rev` carries them (no `_id`, `_rev`, `_revisions`).
    static func sent(_ body: JSON) -> JSON {
        .object((body.objectValue ?? []).filter { !["_id", "_rev", "_revisions"].contains($0.0) })
    }

    /// Answers `changes` with `known` as the revisions it has of every entry, saying it takes deltas when `deltas`.
    static func client(known: String, deltas: Bool, refuseDeltas: Bool = false) -> InMemoryBLIPPeer {
        InMemoryBLIPPeer { request in
            if request.profile == "rev", refuseDeltas, request["deltaSrc"] != nil {
                return .error(answering: request.number, code: 422, message: "Don't have body of deltaSrc")
            }
            guard request.profile == "changes", let entries = request.json?.arrayValue else {
                return BLIPMessage(type: .response)
            }
            let answer = JSON.array(entries.map { _ in .array([.string(known)]) })
            return BLIPMessage(
                type: .response, properties: deltas ? [(name: "deltas", value: "true")] : [],
                body: answer.serialized())
        }
    }

    @Test func aPullSendsASmallEditAsADeltaAgainstTheRevisionTheClientHas() async throws {
        // Proves: with delta sync on and a client that says `deltas=true`, a revision whose parent the client has (one
        // long member edited, an attachment added) goes
        // as a `rev` with `deltaSrc` = that parent and a JSON delta far smaller than the body, awaiting an answer; the
        // delta applied to the parent as it was sent gives the revision's body byte for byte, `_attachments` included
        // (one kept as a stub, one added); the stats count it.
        let f = try await Self.open(deltas: true)
        let a = Base64.encode(Array("first attachment".utf8))
        let b = Base64.encode(Array("second attachment".utf8))
        let r1 = try await f.db.put(
            "d", body: json(#"{"channels":["a"],\#(Self.bulk(40)),"_attachments":{"a.txt":{"data":"\#(a)"}}}"#),
            user: nil)
        let r2 = try await f.db.put(
            "d",
            body: json(
                #"{"_rev":"\#(r1)","channels":["a"],\#(Self.bulk(40, edited: 3)),"_attachments":{"a.txt":{"stub":true},"b.txt":{"data":"\#(b)"}}}"#
            ), user: nil)
        let peer = Self.client(known: r1.description, deltas: true)
        _ = await BLIPPullTests.handler(f, "alice").subscribe(.request("subChanges"), peer: peer)
        var rev: BLIPMessage? = nil
        var i = 0
        while rev == nil, let m = await peer.request(i) {
            i += 1
            if m.profile == "rev" { rev = m }
        }
        let m = try #require(rev)
        #expect(m["rev"] == r2.description)
        #expect(m["deltaSrc"] == r1.description)
        let noReply = m.noReply
        #expect(!noReply)
        let full = Self.sent(try await f.db.get("d", rev: r2, user: nil).body).serialized()
        let source = Self.sent(try await f.db.get("d", rev: r1, user: nil).body)
        let delta = try #require(m.json)
        #expect(m.body.count * 10 < full.count, "delta \(m.body.count) bytes, body \(full.count)")
        #expect(try JSONDelta.apply(delta, to: source).serialized() == full)
        #expect(delta["_attachments"]?["b.txt"] != nil && delta["_attachments"]?["a.txt"] == nil)
        #expect(f.db.deltaStats.deltasSent == 1 && f.db.deltaStats.deltasRequested == 1)
        #expect(f.db.deltaStats.deltaPullReplicationCount == 1)
        await f.close()
    }

    @Test(arguments: [(true, false), (false, true)])
    func noDeltaUnlessBothSidesTakeThem(gatewayDeltas: Bool, clientDeltas: Bool) async throws {
        // Proves: delta sync off on the database (the default) or a client that does not say `deltas=true` gets the
        // revision whole, no-reply, as before.
        let f = try await Self.open(deltas: gatewayDeltas)
        let r1 = try await f.db.put("d", body: json(#"{"channels":["a"],\#(Self.bulk(20))}"#), user: nil)
        _ = try await f.db.put("d", body: json(#"{"_rev":"\#(r1)","channels":["a"],\#(Self.bulk(21))}"#), user: nil)
        let peer = Self.client(known: r1.description, deltas: clientDeltas)
        _ = await BLIPPullTests.handler(f, "alice").subscribe(.request("subChanges"), peer: peer)
        let rev = try #require(await peer.request(2))
        let (profile, source, noReply) = (rev.profile, rev["deltaSrc"], rev.noReply)
        #expect(profile == "rev" && source == nil && noReply)
        #expect(rev.json?["line20"] != nil)
        await f.close()
    }

    @Test func aClientThatCannotApplyADeltaGetsTheRevisionWhole() async throws {
        // Proves: a 422 answer to a delta `rev` (Couchbase Lite's "delta base unknown") makes the gateway send the same
        // revision again whole (Sync Gateway's resend), so the client never has to store a guess.
        let f = try await Self.open(deltas: true)
        let r1 = try await f.db.put("d", body: json(#"{"channels":["a"],\#(Self.bulk(20))}"#), user: nil)
        let r2 = try await f.db.put(
            "d", body: json(#"{"_rev":"\#(r1)","channels":["a"],\#(Self.bulk(20)),"x":1}"#), user: nil)
        let peer = Self.client(known: r1.description, deltas: true, refuseDeltas: true)
        _ = await BLIPPullTests.handler(f, "alice").subscribe(.request("subChanges"), peer: peer)
        var revs: [BLIPMessage] = []
        var i = 0
        while revs.count < 2, let m = await peer.request(i) {
            i += 1
            if m.profile == "rev" { revs.append(m) }
        }
        #expect(revs.map { $0["deltaSrc"] } == [r1.description, nil])
        #expect(revs.allSatisfy { $0["rev"] == r2.description })
        let whole = revs.last?.body == Self.sent(try await f.db.get("d", rev: r2, user: nil).body).serialized()
        #expect(whole)
        await f.close()
    }

    @Test func aPushedDeltaIsAppliedToTheStoredSourceAttachmentsIncluded() async throws {
        // Proves: with delta sync on, `proposeChanges` and `changes` answers say `deltas=true`; a pushed `rev` with
        // `deltaSrc` is the source's stored body patched (members changed and added, an attachment added: fetched
        // from the client as for a whole body; the kept one stays), counted in `delta_push_doc_count`.
        let f = try await Self.open(deltas: true)
        let first = Array("first attachment".utf8)
        let second = Array("second attachment".utf8)
        let peer = InMemoryBLIPPeer { request in
            if request.profile == "getAttachment" {
                let bytes = request["digest"] == AttachmentInfo.digest(of: first) ? first : second
                return BLIPMessage(type: .response, body: bytes)
            }
            return BLIPMessage(type: .response)
        }
        let h = BLIPSyncHandlerTests.handler(f, user: "alice")
        let proposed = await h.handle(.request("proposeChanges", body: #"[["d","1-aa"]]"#), peer: peer)
        #expect(proposed["deltas"] == "true")
        let offered = await h.handle(.request("changes", body: #"[[1,"d","1-aa"]]"#), peer: peer)
        #expect(offered["deltas"] == "true")
        let da = AttachmentInfo.digest(of: first)
        let db = AttachmentInfo.digest(of: second)
        let one = BLIPPushTests.rev(
            "d", "1-aa",
            body:
                #"{"channels":["a"],"v":1,"keep":"same","_attachments":{"a.txt":{"stub":true,"digest":"\#(da)","length":16,"revpos":1}}}"#
        )
        #expect(await h.handle(one, peer: peer).type == .response)
        let delta =
            #"{"v":2,"w":true,"_attachments":{"b.txt":[{"stub":true,"digest":"\#(db)","length":17,"revpos":2}]}}"#
        let two = BLIPPushTests.rev("d", "2-bb", history: "1-aa", body: delta, extra: [("deltaSrc", "1-aa")])
        let answer = await h.handle(two, peer: peer)
        #expect(answer.type == .response, "\(String(decoding: answer.body, as: UTF8.self))")
        let got = try await f.db.get("d", user: nil).body
        #expect(got["_rev"] == .string("2-bb"))
        #expect(got["v"] == .integer(2) && got["w"] == .bool(true) && got["keep"] == .string("same"))
        #expect(got["_attachments"]?["a.txt"]?["digest"] == .string(da))
        #expect(got["_attachments"]?["b.txt"]?["digest"] == .string(db))
        #expect(try await f.db.attachmentBlob(db) == second)
        #expect(f.db.deltaStats.deltaPushDocCount == 1)
        await f.close()
    }

    @Test(arguments: [
        ("9-zz", #"{"v":2}"#, 422),  // unknown source
        ("1-aa", #"{"v":{"x":1}}"#, 422),  // object delta for a number
        ("1-aa", #"{"v":["1=",0,2]}"#, 422),  // text patch of a number
        ("1-aa", #"{"gone":[]}"#, 422),  // removes a member that is not there
        ("1-aa", #"[]"#, 422),  // removes the document
        ("1-aa", #"{"_sync":[{}]}"#, 400),  // a reserved member, added by the delta
        ("1-aa", #"not json"#, 400),
    ])
    func unusableDeltasAreRefusedAsSyncGatewayRefusesThem(source: String, delta: String, status: Int) async throws {
        // Proves: a delta whose source is unknown, or that does not apply, is HTTP 422 (Sync Gateway's
        // StatusUnprocessableEntity, on which Couchbase Lite resends whole); a result with a reserved member is 400 as
        // a whole body would be; nothing is written.
        let f = try await Self.open(deltas: true)
        let h = BLIPSyncHandlerTests.handler(f, user: "alice")
        let peer = InMemoryBLIPPeer()
        #expect(
            await h.handle(BLIPPushTests.rev("d", "1-aa", body: #"{"channels":["a"],"v":1}"#), peer: peer).type
                == .response)
        let two = BLIPPushTests.rev("d", "2-bb", history: "1-aa", body: delta, extra: [("deltaSrc", source)])
        let answer = await h.handle(two, peer: peer)
        #expect(BLIPPushTests.code(answer) == status)
        #expect(answer["Error-Domain"] == "HTTP")
        #expect(try await f.db.get("d", user: nil).body["_rev"] == .string("1-aa"))
        await f.close()
    }

    @Test func withDeltaSyncOffAPushedDeltaIsRefused() async throws {
        // Proves: delta sync off (the default), `deltaSrc` is 400 "Deltas are disabled for this peer" as in Sync
        // Gateway, and the answers to `proposeChanges` do not offer deltas.
        let f = try await Self.open(deltas: false)
        let h = BLIPSyncHandlerTests.handler(f, user: "alice")
        let peer = InMemoryBLIPPeer()
        #expect(await h.handle(.request("proposeChanges", body: #"[["d","1-aa"]]"#), peer: peer)["deltas"] == nil)
        #expect(
            await h.handle(BLIPPushTests.rev("d", "1-aa", body: #"{"channels":["a"]}"#), peer: peer).type == .response)
        let two = BLIPPushTests.rev("d", "2-bb", history: "1-aa", body: #"{"v":2}"#, extra: [("deltaSrc", "1-aa")])
        #expect(BLIPPushTests.code(await h.handle(two, peer: peer)) == 400)
        await f.close()
    }

    @Test func deltaSyncIsReadFromTheDatabaseConfig() throws {
        // Proves: `delta_sync` parses as Sync Gateway's (`enabled`, `rev_max_age_seconds`, default off and 86400),
        // an unknown key inside it is refused like any other, and 0 seconds means no deltas.
        let on = try DatabaseConfig(
            name: "db", json: json(#"{"delta_sync":{"enabled":true,"rev_max_age_seconds":600}}"#), path: "databases.db")
        #expect(on.deltaSync == DeltaSyncConfig(enabled: true, revMaxAgeSeconds: 600) && on.deltaSync.active)
        let off = try DatabaseConfig(name: "db", json: json("{}"), path: "databases.db")
        #expect(off.deltaSync == DeltaSyncConfig(enabled: false, revMaxAgeSeconds: 86_400) && !off.deltaSync.active)
        #expect(DatabaseOptions(config: on).deltaSync.active)
        #expect(throws: ConfigError.self) {
            try DatabaseConfig(name: "db", json: json(#"{"delta_sync":{"enabeld":true}}"#), path: "databases.db")
        }
        let zero = try DatabaseConfig(
            name: "db", json: json(#"{"delta_sync":{"enabled":true,"rev_max_age_seconds":0}}"#), path: "databases.db")
        #expect(!zero.deltaSync.active)
    }
}
