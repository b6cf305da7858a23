import Foundation
import NIOHTTP1
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeReplication
import SetteeTestSupport
import Testing

/// SetteeLite over BLIP against a real `settee-gateway` with a sync function, users and channels (issue 68, Must
/// show: a user granted a channel mid-subscription receives its documents; a conflict made on two Lite databases
/// resolves to the same winner as on a client syncing the same database over REST). Reuses
/// `LiteBLIPGatewayProcessTests`' helpers.
@Suite(.serialized, .onTestThreads) struct LiteBLIPGatewaySemanticsProcessTests {
    typealias Helpers = LiteBLIPGatewayProcessTests

    /// A gateway whose sync function puts each document in its `channels`; GUEST disabled; user `u` (password `pw-u`)
    /// sees channel `a`, user `alice` (password `secret`) every channel. `allow_conflicts` as given.
    static func startedGateway(_ name: String, allowConflicts: Bool = true) async throws -> GatewayProcess {
        let sync = #""function(doc, oldDoc) { channel(doc.channels); }""#
        let gw = try GatewayProcess(
            name: "liteblip-sem-\(name)",
            config: #"{"databases":{"db":{"server":"walrus:","allow_conflicts":\#(allowConflicts),"sync":\#(sync),"#
                + #""users":{"GUEST":{"disabled":true},"u":{"password":"pw-u","admin_channels":["a"]},"#
                + #""alice":{"password":"secret","admin_channels":["*"]}}}}}"#
        )
        let admin = "http://127.0.0.1:\(gw.adminPort)/db/"
        try await gw.start {
            (try? await GatewayHTTP.request(.GET, admin))?.status == 200
        }
        return gw
    }

    /// Writes `count` documents `prefix-NNNN` in `channel` over REST (`_bulk_docs` on the admin port).
    static func restWrite(_ admin: String, prefix: String, count: Int, channel: String) async throws {
        let docs = (0..<count).map { n in
            JSON.object([
                ("_id", .string(String(format: "\(prefix)-%04d", n))), ("n", .number(Double(n))),
                ("channels", .array([.string(channel)])),
            ])
        }
        let reply = try await GatewayHTTP.request(
            .POST, "\(admin)/_bulk_docs", body: Array(JSON.object([("docs", .array(docs))]).text.utf8))
        #expect(reply.status == 201, "\(reply.text)")
    }

    /// Proves: user `u` (channel `a`) runs a continuous Lite BLIP pull and has only channel `a`'s documents; the admin
    /// grants `u` channel `b` (`PUT /db/_user/u` with `admin_channels`); the open subscription then delivers every
    /// channel-`b` document written before the grant (the time from the grant is printed; 5 s allowed).
    @Test func userGrantedAChannelMidSubscriptionReceivesItsDocuments() async throws {
        let gw = try await Self.startedGateway("grant")
        defer { gw.stop() }
        let admin = "http://127.0.0.1:\(gw.adminPort)/db"
        try await Self.restWrite(admin, prefix: "a", count: 20, channel: "a")
        try await Self.restWrite(admin, prefix: "b", count: 30, channel: "b")
        let dir = URL(fileURLWithPath: TemporaryDirectory.make("liteblip-grant"))
        defer { try? FileManager.default.removeItem(at: dir) }
        let db = try Database(name: "phone", directory: dir.path)
        defer { db.close() }
        let pull = try Replicator(
            db, .pull(from: "ws://127.0.0.1:\(gw.port)/db"), continuous: true,
            authenticator: .basic(user: "u", password: "pw-u"))
        pull.start()
        try await Helpers.waitFor(30, "channel a pulled") {
            try db.document("a-0019") != nil && pull.currentStatus.activity == .idle
        }
        let before = try LiteConvergence.liteIDs(db)
        #expect(before.count == 20 && before.allSatisfy { $0.hasPrefix("a-") }, "before the grant: \(before.sorted())")

        let granted = ContinuousClock.now
        let reply = try await GatewayHTTP.request(
            .PUT, "\(admin)/_user/u", body: Array(#"{"password":"pw-u","admin_channels":["a","b"]}"#.utf8))
        #expect(reply.status == 200 || reply.status == 201, "PUT _user/u: \(reply.status) \(reply.text)")
        let wanted = Set((0..<30).map { String(format: "b-%04d", $0) })
        var waitError: (any Error)? = nil
        do {
            try await Helpers.waitFor(10, "channel b pulled after the grant") {
                wanted.isSubset(of: try LiteConvergence.liteIDs(db))
            }
        } catch {
            waitError = error
        }
        let took = ContinuousClock.now - granted
        let status = pull.currentStatus
        let after = try LiteConvergence.liteIDs(db)
        await pull.stop()
        print(
            "LiteBLIPGatewaySemanticsProcessTests.grant: channel b's 30 documents reached the Lite database \(took) "
                + "after the grant (\(after.intersection(wanted).count) of 30); status \(status)")
        #expect(waitError == nil, "\(after.intersection(wanted).count) of 30 channel-b documents after \(took)")
        #expect(took < .seconds(5), "\(took)")
        #expect(after.count == 50, "\(after.count) documents")
        #expect(status.lastError == nil, "\(status)")
        for id in ["b-0000", "b-0029"] {
            #expect(try db.document(id)?.properties["channels"] == .array([.string("b")]), "\(id)")
        }
    }

    /// The winner and body of `id` in a Lite database, its leaves left out (a database that resolved a conflict
    /// keeps its own losing branch's tombstone, which a conflict-free gateway never takes).
    static func winner(_ db: Database, _ id: String) throws -> String {
        guard let s = try LiteConvergence.liteState(db, id) else { return "absent" }
        return "\(s.winner)\(s.winnerDeleted ? " deleted" : "") \(s.body)"
    }

    /// Proves: with `allow_conflicts: false`, two Lite databases edit the same document apart; the first pushes over
    /// BLIP, the second's push gets a 409 (`proposeChanges`); the second pulls the gateway's revision over BLIP, has
    /// the conflict, resolves it on the gateway's branch (`Database.resolve`) and pushes the merge; then both Lite
    /// databases, the gateway over REST (`GET /db/doc` as the user, `open_revs=all`), and a Lite replica pulling
    /// over the CouchDB protocol (an `http://` URL, as PouchDB syncs) agree on the winning revision and its body.
    @Test func conflictOnTwoLiteDatabasesResolvesToOneWinnerEverywhere() async throws {
        let gw = try await Self.startedGateway("conflict", allowConflicts: false)
        defer { gw.stop() }
        let admin = "http://127.0.0.1:\(gw.adminPort)/db"
        let ws = "ws://127.0.0.1:\(gw.port)/db"
        let alice = ReplicationAuthenticator.basic(user: "alice", password: "secret")
        let dir = URL(fileURLWithPath: TemporaryDirectory.make("liteblip-conflict"))
        defer { try? FileManager.default.removeItem(at: dir) }
        let phoneA = try Database(name: "phone-a", directory: dir.path)
        defer { phoneA.close() }
        let phoneB = try Database(name: "phone-b", directory: dir.path)
        defer { phoneB.close() }
        let id = "shared"

        // A common ancestor on both phones.
        _ = try phoneA.save(Document(id: id, properties: ["v": .number(0), "channels": .array([.string("a")])]))
        let seeded = await LiteConvergence.replicate(try Replicator(phoneA, .push(to: ws), authenticator: alice))
        #expect(seeded.lastError == nil && seeded.docsWritten == 1, "\(seeded)")
        let fetched = await LiteConvergence.replicate(try Replicator(phoneB, .pull(from: ws), authenticator: alice))
        #expect(fetched.docsWritten == 1, "\(fetched)")
        let base = try #require(try phoneB.document(id))

        // Offline edits on both, then A pushes first and B's push is refused as a conflict.
        var editA = try #require(try phoneA.document(id))
        editA["v"] = .number(1)
        editA["by"] = .string("a")
        _ = try phoneA.save(editA)
        var editB = base
        editB["v"] = .number(1)
        editB["by"] = .string("b")
        editB["note"] = .string("edited on b")
        _ = try phoneB.save(editB)
        let pushA = await LiteConvergence.replicate(try Replicator(phoneA, .push(to: ws), authenticator: alice))
        #expect(pushA.lastError == nil && pushA.docsWritten == 1, "A's push: \(pushA)")
        let pushB = await LiteConvergence.replicate(try Replicator(phoneB, .push(to: ws), authenticator: alice))
        #expect(pushB.docsWritten == 0 && pushB.docWriteFailures == 1, "B's push should get a 409: \(pushB)")
        let serverRev = try #require(try await LiteConvergence.gatewayState(admin, id)).winner
        #expect(serverRev == (try phoneA.revisionTree(of: id)?.winner?.description), "the gateway took A's edit")

        // B pulls the gateway's revision, sees the conflict, resolves it on the gateway's branch and pushes.
        let pullB = await LiteConvergence.replicate(try Replicator(phoneB, .pull(from: ws), authenticator: alice))
        #expect(pullB.lastError == nil && pullB.docsWritten == 1, "B's pull: \(pullB)")
        let leaves = try phoneB.conflicts(of: id)
        #expect(leaves.count == 2, "B's live leaves after the pull: \(leaves.map { $0.revision?.description ?? "?" })")
        var merged = try #require(leaves.first { $0.revision?.description == serverRev })
        let mine = try #require(leaves.first { $0.revision?.description != serverRev })
        merged["note"] = mine["note"]
        merged["v"] = .number(2)
        let resolution = try phoneB.resolve(merged)
        let repush = await LiteConvergence.replicate(try Replicator(phoneB, .push(to: ws), authenticator: alice))
        #expect(repush.lastError == nil && repush.docsWritten == 1, "B's push of the merge: \(repush)")
        let pullA = await LiteConvergence.replicate(try Replicator(phoneA, .pull(from: ws), authenticator: alice))
        #expect(pullA.lastError == nil && pullA.docsWritten == 1, "A's pull of the merge: \(pullA)")

        // A REST replica (the CouchDB protocol, as PouchDB syncs) of the same database.
        let restReplica = try Database(name: "rest-replica", directory: dir.path)
        defer { restReplica.close() }
        let rest = await LiteConvergence.replicate(
            try Replicator(restReplica, .pull(from: "http://127.0.0.1:\(gw.port)/db"), authenticator: alice))
        #expect(rest.lastError == nil && rest.docsWritten >= 1, "REST pull: \(rest)")

        let expected = try #require(resolution.revision?.description)
        let gateway = try #require(try await LiteConvergence.gatewayState(admin, id))
        let plain = try await GatewayHTTP.request(
            .GET, "http://127.0.0.1:\(gw.port)/db/\(id)", headers: [GatewayHTTP.basic("alice", "secret")])
        let plainRev = plain.status == 200 ? try JSON.parse(plain.body)["_rev"]?.stringValue : "HTTP \(plain.status)"
        let states = [
            "phone A": try Self.winner(phoneA, id), "phone B": try Self.winner(phoneB, id),
            "REST replica": try Self.winner(restReplica, id),
            "gateway": "\(gateway.winner)\(gateway.winnerDeleted ? " deleted" : "") \(gateway.body)",
        ]
        print(
            "LiteBLIPGatewaySemanticsProcessTests.conflict: A pushed \(pushA), B's push \(pushB), B's pull \(pullB), "
                + "merge \(expected) pushed \(repush); winners \(states); public GET _rev \(plainRev ?? "none")")
        #expect(Set(states.values).count == 1, "the winners differ: \(states)")
        #expect(states["gateway"]?.hasPrefix(expected + " ") == true, "\(states)")
        #expect(plainRev == expected, "GET /db/\(id) as alice: \(plain.status) \(plain.text)")
        #expect(gateway.leaves.count == 1, "the conflict-free gateway holds one branch: \(gateway.leaves)")
        #expect(try phoneB.conflicts(of: id).count == 1)
        #expect(try phoneA.conflicts(of: id).count == 1)
        #expect(try restReplica.document(id)?.properties["note"] == .string("edited on b"))
        #expect(try restReplica.document(id)?.properties["by"] == .string("a"))
    }
}
