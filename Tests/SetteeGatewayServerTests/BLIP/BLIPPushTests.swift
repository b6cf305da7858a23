import Foundation
import SetteeBLIP
import SetteeCore
import SetteeDocument
import SetteeJSON
import Synchronization
import Testing

@testable import SetteeGateway

/// A Couchbase Lite push: `rev` requests written through the REST `new_edits=false` path, so the sync function's
/// refusals, channels, the revision tree and attachments are REST's.
@Suite struct BLIPPushTests {
    static let sync = """
        function(doc, oldDoc) {
            if (doc._deleted) { return; }
            requireAccess(doc.channels);
            channel(doc.channels);
        }
        """

    static func open(allowConflicts: Bool = true) async throws -> Fixture {
        try await Fixture.open(
            DatabaseOptions(
                name: "db", syncSource: sync, allowConflicts: allowConflicts,
                users: ["alice": json(#"{"password":"pass","admin_channels":["a"]}"#)]))
    }

    static func rev(_ id: String, _ rev: String, history: String? = nil, body: String, extra: [(String, String)] = [])
        -> BLIPMessage
    {
        var props = [("id", id), ("rev", rev), ("sequence", "1")] + extra
        if let history { props.append(("history", history)) }
        return .request("rev", props, body: body)
    }

    static func code(_ m: BLIPMessage) -> Int? { BLIPSyncHandlerTests.errorCode(m) }

    @Test func pushedRevisionsRunTheSyncFunctionAndRejectionsAreReportedPerDocument() async throws {
        // Proves: a pushed revision in a channel the user has is written (empty answer) and readable over REST with
        // its history; one in a channel the user lacks is refused by requireAccess with 403 and not written.
        let f = try await Self.open()
        let h = BLIPSyncHandlerTests.handler(f, user: "alice")
        let peer = InMemoryBLIPPeer()
        let ok = await h.handle(Self.rev("d1", "1-aa", body: #"{"channels":["a"],"v":1}"#), peer: peer)
        #expect(ok.type == .response)
        let ok2 = await h.handle(
            Self.rev("d1", "2-bb", history: "1-aa", body: #"{"channels":["a"],"v":2}"#), peer: peer)
        #expect(ok2.type == .response)
        let got = try await f.db.get("d1", revs: true, user: nil).body
        #expect(got["_rev"] == .string("2-bb"))
        #expect(got["_revisions"] == json(#"{"start":2,"ids":["bb","aa"]}"#))
        #expect(got["v"] == .integer(2))
        let refused = await h.handle(Self.rev("d2", "1-cc", body: #"{"channels":["b"]}"#), peer: peer)
        #expect(Self.code(refused) == 403)
        await #expect(throws: GatewayError.self) { try await f.db.get("d2", user: nil) }
        let reserved = await h.handle(Self.rev("d3", "1-dd", body: #"{"_sync":{},"channels":["a"]}"#), peer: peer)
        #expect(Self.code(reserved) == 400)
        await f.close()
    }

    @Test func noconflictsRefusesARevisionThatWouldBranch() async throws {
        // Proves: with noconflicts a revision whose history misses the live winner is 409; without it (allow_conflicts)
        // the branch is kept, and the winner is the REST winner; a deleted property makes a tombstone.
        let f = try await Self.open()
        let h = BLIPSyncHandlerTests.handler(f, user: nil)
        let peer = InMemoryBLIPPeer()
        let w = try await f.db.put("d", body: json(#"{"channels":["a"]}"#), user: nil)
        let branch = Self.rev("d", "2-ff", history: "1-ee", body: #"{"channels":["a"]}"#, extra: [("noconflicts", "1")])
        #expect(Self.code(await h.handle(branch, peer: peer)) == 409)
        let allowed = Self.rev("d", "2-ff", history: "1-ee", body: #"{"channels":["a"]}"#)
        #expect(await h.handle(allowed, peer: peer).type == .response)
        let leaves = try await f.db.openRevs("d", revs: nil, revs: false, user: nil)
        #expect(leaves.count == 2)
        #expect(
            leaves.contains {
                if case .ok(let b) = $0 { return b["_rev"] == .string(w.description) } else { return false }
            })
        // The branch 2-ff now wins (higher generation); a child of it passes noconflicts, here a tombstone.
        let child = Self.rev(
            "d", "3-00", history: "2-ff,1-ee", body: "{}", extra: [("noconflicts", "true"), ("deleted", "1")])
        #expect(await h.handle(child, peer: peer).type == .response)
        let tomb = try await f.db.get("d", rev: RevID("3-00"), user: nil).body
        #expect(tomb["_deleted"] == .bool(true))
        await f.close()
    }

    @Test func pushedAttachmentsAreFetchedOrProvedAndSharedWithREST() async throws {
        // Proves: an attachment this database lacks is fetched from the client with getAttachment (docID named)
        // and stored once, readable over REST; the same digest pushed again is proved with proveAttachment instead
        // of sent; a wrong proof refuses the revision with 403; bytes that do not match the digest are 400.
        let f = try await Self.open()
        let data = Array("attachment bytes".utf8)
        let digest = AttachmentInfo.digest(of: data)
        let proving = ProofSwitch(wrongProof: false)
        let peer = InMemoryBLIPPeer { request in
            switch request.profile {
            case "getAttachment": return BLIPMessage(type: .response, body: data)
            case "proveAttachment":
                let nonce = request.body
                let proof =
                    proving.wrong ? "sha1-wrong" : AttachmentInfo.digest(of: [UInt8(nonce.count)] + nonce + data)
                return BLIPMessage(type: .response, body: Array(proof.utf8))
            default: return BLIPMessage(type: .response)
            }
        }
        let h = BLIPSyncHandlerTests.handler(f, user: "alice")
        let atts =
            #"{"f.txt":{"content_type":"text/plain","digest":"\#(digest)","length":\#(data.count),"revpos":1,"stub":true}}"#
        let first = await h.handle(
            Self.rev("att1", "1-a1", body: #"{"channels":["a"],"_attachments":\#(atts)}"#), peer: peer)
        #expect(first.type == .response)
        let asked = try #require(peer.sent.first)
        #expect(asked.profile == "getAttachment")
        #expect(asked["digest"] == digest)
        #expect(asked["docID"] == "att1")
        let rest = try await f.db.attachment(docID: "att1", name: "f.txt", rev: nil, user: nil)
        #expect(rest.data == data)
        let second = await h.handle(
            Self.rev("att2", "1-a2", body: #"{"channels":["a"],"_attachments":\#(atts)}"#), peer: peer)
        #expect(second.type == .response)
        #expect(peer.sent.last?.profile == "proveAttachment")
        #expect(peer.sent.filter { $0.profile == "getAttachment" }.count == 1)
        proving.wrong = true
        let third = await h.handle(
            Self.rev("att3", "1-a3", body: #"{"channels":["a"],"_attachments":\#(atts)}"#), peer: peer)
        #expect(Self.code(third) == 403)

        let liar = InMemoryBLIPPeer { _ in BLIPMessage(type: .response, body: Array("other bytes!!!!!".utf8)) }
        let other = #"{"g":{"digest":"sha1-AAAAAAAAAAAAAAAAAAAAAAAAAAA=","length":16,"revpos":1,"stub":true}}"#
        let lied = await h.handle(
            Self.rev("att4", "1-a4", body: #"{"channels":["a"],"_attachments":\#(other)}"#), peer: liar)
        #expect(Self.code(lied) == 400)
        await f.close()
    }
}

/// A flag the test's client closure reads while the test flips it.
final class ProofSwitch: Sendable {
    private let state: Synchronization.Mutex<Bool>
    init(wrongProof: Bool) { state = .init(wrongProof) }
    var wrong: Bool {
        get { state.withLock { $0 } }
        set { state.withLock { $0 = newValue } }
    }
}
