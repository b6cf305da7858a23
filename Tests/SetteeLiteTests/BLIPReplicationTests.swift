import Foundation
import SetteeBLIP
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeReplication
import SetteeTestSupport
import Synchronization
import Testing

// MARK: An in-memory BLIP connection and a small BLIP replication server over a Lite database

/// Both ends of one in-memory connection: open until either side closes it; the close code is kept.
final class MemoryLink: Sendable {
    private struct State {
        var open = true
        var code: UInt16?
        var waiters: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())

    var isOpen: Bool { state.withLock { $0.open } }
    var closeCode: UInt16? { state.withLock { $0.code } }

    func close(code: UInt16) {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            guard s.open else { return [] }
            s.open = false
            s.code = code
            defer { s.waiters = [] }
            return s.waiters
        }
        for w in waiters { w.resume() }
    }

    func waitUntilClosed() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let closed = state.withLock { s -> Bool in
                if !s.open { return true }
                s.waiters.append(c)
                return false
            }
            if closed { c.resume() }
        }
    }
}

/// One side's view of the other: a request is handed straight to the other side's handler.
struct MemoryPeer: BLIPPeer {
    let link: MemoryLink
    let handler: @Sendable () -> any BLIPRequestHandler
    let back: @Sendable () -> any BLIPPeer

    func send(_ request: BLIPMessage) async throws -> BLIPMessage? {
        guard link.isOpen else { throw BLIPConnectionError.closed }
        let h = handler()
        let b = back()
        if request.noReply {
            Task { _ = await h.handle(request, peer: b) }
            return nil
        }
        let answer = await h.handle(request, peer: b)
        guard link.isOpen else { throw BLIPConnectionError.closed }
        return answer
    }
}

struct MemoryConnection: BLIPReplicationConnection {
    let link: MemoryLink
    let peer: any BLIPPeer
    func close(code: UInt16) async { link.close(code: code) }
    func waitUntilClosed() async { await link.waitUntilClosed() }
}

/// A BLIP replication server over a Lite database, answering as Sync Gateway does in conflict-free mode
/// (replication-protocol.adoc §3): checkpoints, subChanges (one-shot or continuous, activeOnly), changes → rev,
/// proposeChanges with conflictIncludesRev, rev with noconflicts, getAttachment of what a pushed rev names. It
/// records every request the client sends.
final class FakeBLIPServer: Sendable {
    let db: Database
    private struct State {
        var checkpoints: [String: (rev: Int, body: [UInt8])] = [:]
        var received: [BLIPMessage] = []
        var links: [MemoryLink] = []
        var feeds: [Task<Void, Never>] = []
        var refuseConnections = 0
        /// Attachments of the revisions sent, by digest (the client asks for them with `getAttachment`).
        var served: [String: [UInt8]] = [:]
        var connections = 0
        /// Documents whose pushed `rev` is refused with 403, as a sync function's `forbidden` is.
        var forbidden: Set<String> = []
    }
    private let state = Mutex(State())

    init(_ db: Database) { self.db = db }

    var received: [BLIPMessage] { state.withLock { $0.received } }
    var closeCodes: [UInt16?] { state.withLock { $0.links.map(\.closeCode) } }
    var connections: Int { state.withLock { $0.connections } }
    func refuseNext(_ n: Int) { state.withLock { $0.refuseConnections = n } }
    func forbidRevisions(of ids: Set<String>) { state.withLock { $0.forbidden = ids } }
    func requests(_ profile: String) -> [BLIPMessage] { received.filter { $0.profile == profile } }
    /// Drops every open connection as a network failure would.
    func dropConnections() {
        let links = state.withLock { $0.links }
        for l in links { l.close(code: 1006) }
    }

    var connector: Connector { Connector(server: self) }

    struct Connector: BLIPConnector {
        let server: FakeBLIPServer
        func connect(handler: any BLIPRequestHandler) async throws -> any BLIPReplicationConnection {
            try server.open(client: handler)
        }
    }

    func open(client: any BLIPRequestHandler) throws -> any BLIPReplicationConnection {
        let link = MemoryLink()
        let refused = state.withLock { s -> Bool in
            if s.refuseConnections > 0 {
                s.refuseConnections -= 1
                return true
            }
            s.connections += 1
            s.links.append(link)
            return false
        }
        if refused { throw ReplicationError.network("connection refused (test)") }
        let session = Session(server: self, link: link)
        let box = Mutex<(any BLIPPeer)?>(nil)
        let toClient = MemoryPeer(link: link, handler: { client }, back: { box.withLock { $0! } })
        let toServer = MemoryPeer(link: link, handler: { session }, back: { toClient })
        box.withLock { $0 = toServer }
        session.clientPeer.withLock { $0 = toClient }
        return MemoryConnection(link: link, peer: toServer)
    }

    /// One connection's server side.
    final class Session: BLIPRequestHandler {
        let server: FakeBLIPServer
        let link: MemoryLink
        let clientPeer = Mutex<(any BLIPPeer)?>(nil)
        init(server: FakeBLIPServer, link: MemoryLink) {
            self.server = server
            self.link = link
        }

        func handle(_ request: BLIPMessage, peer: any BLIPPeer) async -> BLIPMessage {
            server.state.withLock { $0.received.append(request) }
            do {
                return try await server.answer(request, peer: peer, link: link)
            } catch let e as CouchError {
                return .error(answering: request.number, code: e.status, message: e.reason)
            } catch {
                return .error(answering: request.number, code: 500, message: "\(error)")
            }
        }
    }

    private func answer(_ r: BLIPMessage, peer: any BLIPPeer, link: MemoryLink) async throws -> BLIPMessage {
        switch r.profile {
        case "getCheckpoint":
            guard let client = r["client"], let cp = state.withLock({ $0.checkpoints[client] }) else {
                throw CouchError.notFound("missing")
            }
            return BLIPMessage(type: .response, properties: [(name: "rev", value: "0-\(cp.rev)")], body: cp.body)
        case "setCheckpoint":
            guard let client = r["client"] else { throw CouchError.badRequest("no client") }
            let rev = try state.withLock { s throws(CouchError) -> Int in
                let current = s.checkpoints[client].map { "0-\($0.rev)" }
                guard current == r["rev"] else { throw CouchError.conflict("checkpoint rev mismatch") }
                let next = (s.checkpoints[client]?.rev ?? 0) + 1
                s.checkpoints[client] = (next, r.body)
                return next
            }
            return BLIPMessage(type: .response, properties: [(name: "rev", value: "0-\(rev)")])
        case "subChanges":
            let since = r["since"].flatMap { Int($0) } ?? 0
            let feed = Task { [self] in
                await self.feed(
                    since: since, continuous: r["continuous"] == "true", activeOnly: r["activeOnly"] == "true",
                    batch: r["batch"].flatMap { Int($0) } ?? 200, peer: peer, link: link)
            }
            state.withLock { $0.feeds.append(feed) }
            return BLIPMessage(type: .response)
        case "proposeChanges":
            let items = try JSON.parse(r.body).arrayValue ?? []
            var answers: [JSON] = []
            for item in items {
                let a = item.arrayValue ?? []
                guard a.count >= 3, let id = a[0].stringValue, let rev = a[1].stringValue.flatMap(RevID.init) else {
                    throw CouchError.badRequest("bad proposal")
                }
                guard let tree = try db.revisionTree(of: id), let winner = tree.winner else {
                    answers.append(0)
                    continue
                }
                if tree.contains(rev) {
                    answers.append(304)
                } else if winner.description == a[2].stringValue {
                    answers.append(0)
                } else {
                    answers.append(.object([("status", 409), ("rev", .string(winner.description))]))
                }
            }
            return BLIPMessage(type: .response, body: JSON.array(answers).serialized())
        case "rev":
            let incoming = try BLIPReplicationWire.parseRev(r)
            if state.withLock({ $0.forbidden.contains(incoming.id) }) {
                throw CouchError.forbidden("rejected by the sync function")
            }
            let history = (r["history"] ?? "").split(separator: ",").map(String.init)
            if r["noconflicts"] == "1", let winner = try db.revisionTree(of: incoming.id)?.winner,
                !([incoming.rev] + history).contains(winner.description)
            {
                throw CouchError.conflict("Document revision conflict")
            }
            var body = incoming.body
            var bytes: [String: [UInt8]] = [:]
            if let atts = body["_attachments"]?.objectValue {
                var entries: [(String, JSON)] = []
                for (name, var entry) in atts {
                    let digest = entry["digest"]?.stringValue ?? ""
                    let got = try await peer.send(
                        BLIPMessage(properties: [
                            (name: "Profile", value: "getAttachment"), (name: "digest", value: digest),
                            (name: "docID", value: incoming.id),
                        ]))
                    guard let got, got.type == .response else { throw CouchError.status(502, "no attachment") }
                    bytes[name] = got.body
                    entry.set("stub", nil)
                    entry.set("follows", true)
                    entries.append((name, entry))
                }
                body.set("_attachments", .object(entries))
            }
            let rows = try db.bulkInsert([ReplicatedRevision(body: body, attachments: bytes)])
            if let e = rows.first?["error"]?.stringValue { throw CouchError.status(400, e) }
            return BLIPMessage(type: .response)
        case "getAttachment":
            guard let digest = r["digest"], let bytes = state.withLock({ $0.served[digest] }) else {
                throw CouchError.notFound("no attachment")
            }
            return BLIPMessage(type: .response, body: bytes)
        default:
            return .error(answering: r.number, domain: "BLIP", code: 404, message: "no handler")
        }
    }

    /// Sends the database's changes after `since` as `changes` requests, then each wanted revision as `rev`; an
    /// empty `changes` once caught up; when continuous, keeps watching.
    private func feed(
        since start: Int, continuous: Bool, activeOnly: Bool, batch: Int, peer: any BLIPPeer, link: MemoryLink
    ) async {
        let source = LocalEndpoint(db, feedTimeoutMs: 100)
        var since = start
        var caughtUp = false
        do {
            while link.isOpen && !Task.isCancelled {
                let rows = try await source.changes(
                    since: String(since), limit: batch, feed: caughtUp ? .longpoll : .normal, filter: nil,
                    heartbeatMs: nil
                ).rows
                if rows.isEmpty {
                    if !caughtUp {
                        _ = try await peer.send(BLIPMessage(properties: [(name: "Profile", value: "changes")]))
                        caughtUp = true
                    }
                    if !continuous { return }
                    continue
                }
                since = rows.last?.seq.json.intValue ?? since
                var changes: [(id: String, rev: String)] = []
                var body: [JSON] = []
                for row in rows where !(activeOnly && row.deleted) {
                    for rev in row.revs {
                        changes.append((row.id, rev))
                        body.append(
                            row.deleted
                                ? [row.seq.json, .string(row.id), .string(rev), true]
                                : [
                                    row.seq.json, .string(row.id), .string(rev),
                                ])
                    }
                }
                if body.isEmpty { continue }
                let answer = try await peer.send(
                    BLIPMessage(properties: [(name: "Profile", value: "changes")], body: JSON.array(body).serialized()))
                let wanted = (try? JSON.parse(answer?.body ?? [])).flatMap(\.arrayValue) ?? []
                for (i, w) in wanted.enumerated() {
                    guard let known = w.arrayValue else { continue }
                    let got = try await source.bulkGet([
                        BulkGetRequest(
                            id: changes[i].id, rev: changes[i].rev, attsSince: known.compactMap(\.stringValue))
                    ])
                    guard let revision = got.first, revision.error == nil else { continue }
                    let seq = rows.first { $0.id == revision.id }?.seq
                    let (message, attachments) = BLIPReplicationWire.revRequest(revision, sequence: seq)
                    state.withLock { s in for (d, b) in attachments { s.served[d] = b } }
                    _ = try await peer.send(message)
                }
            }
        } catch {
            return
        }
    }
}

// MARK: Tests

@Suite struct BLIPReplicationTests {
    static func databases() throws -> (client: Database, server: Database) {
        let dir = TemporaryDirectory.make("lite-blip")
        return (try Database(name: "client", directory: dir), try Database(name: "server", directory: dir))
    }

    static func replicator(
        _ client: Database, _ server: FakeBLIPServer, _ role: BLIPEndpoint.Role, continuous: Bool = false
    ) -> Replicator {
        Replicator(
            blip: server.connector, remoteIdentity: "ws://test.invalid/db", local: LocalEndpoint(client), role: role,
            options: ReplicatorOptions(continuous: continuous, backoffInitialMs: 10, backoffMaxMs: 50))
    }

    static func run(_ r: Replicator) async -> ReplicationStatus {
        r.start()
        return await r.waitUntilStopped()
    }

    static let image: [UInt8] = (0..<20_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }

    static func attachmentBytes(_ db: Database, _ id: String) throws -> [UInt8]? {
        guard let blob = try db.document(id)?.attachments["photo"] else { return nil }
        return try db.attachmentData(digest: blob.digest)
    }

    @Test func pullCopiesDocumentsAndAttachmentsThenResumesFromItsCheckpoint() async throws {
        // Proves a one-shot BLIP pull asks what Couchbase Lite asks (getCheckpoint client=cp-…, subChanges batch=200
        // versioning=rev-trees activeOnly on a first pull), stores every live document with its revision and
        // attachment bytes (fetched with getAttachment), saves {"remote":N} with setCheckpoint, closes with 1000,
        // and a second run resumes from that checkpoint (since=N, no activeOnly) and copies only the new documents.
        let (client, serverDB) = try Self.databases()
        defer {
            try? client.delete()
            try? serverDB.delete()
        }
        try serverDB.save(
            Document(
                id: "img", properties: ["type": "image"],
                attachments: ["photo": Blob(data: Self.image, contentType: "image/png")]))
        var img = try #require(try serverDB.document("img"))
        img["edited"] = true
        try serverDB.save(img)
        for i in 0..<250 {
            try serverDB.save(Document(id: "d\(i)", properties: ["i": .number(Double(i))]))
            if i == 0 { try serverDB.delete("d0") }
        }
        let server = FakeBLIPServer(serverDB)

        let status = await Self.run(Self.replicator(client, server, .pullSource))
        #expect(status.lastError == nil)
        #expect(status.docsWritten == 250)  // img and d1...d249; the tombstone d0 is not sent to a first pull
        var expected = try state(serverDB)
        expected["d0"] = nil
        #expect(try state(client) == expected)
        #expect(try Self.attachmentBytes(client, "img") == Self.image)
        #expect(server.closeCodes == [1000])

        let first = try #require(server.requests("getCheckpoint").first)
        #expect(first["client"]?.hasPrefix("cp-") == true)
        let sub = try #require(server.requests("subChanges").first)
        #expect(sub["batch"] == "200" && sub["versioning"] == "rev-trees" && sub["activeOnly"] == "true")
        #expect(sub["since"] == nil && sub["continuous"] == nil)
        let checkpoint = try #require(server.requests("setCheckpoint").last)
        let lastSeq = Int(serverDB.lastSequence.rawValue)
        #expect(try JSON.parse(checkpoint.body) == ["remote": .number(Double(lastSeq))])
        #expect(server.requests("getAttachment").count == 1)

        for i in 0..<2 { try serverDB.save(Document(id: "new\(i)", properties: [:])) }
        let again = await Self.run(Self.replicator(client, server, .pullSource))
        #expect(again.lastError == nil)
        #expect(again.docsWritten == 2)
        let resumed = try #require(server.requests("subChanges").last)
        #expect(resumed["since"] == String(lastSeq) && resumed["activeOnly"] == nil)
        #expect(try client.document("new1") != nil)
    }

    @Test func pushProposesSendsRevisionsWithAttachmentsAndCheckpoints() async throws {
        // Proves a one-shot BLIP push proposes its changes (proposeChanges conflictIncludesRev, [docID, revID,
        // parent]), sends each revision as rev with sequence, history and noconflicts, serves the server's
        // getAttachment, saves {"local":N}, closes with 1000; and that after two local edits (the server then knows
        // neither parent) the server's 409 naming an ancestor still gets the revision sent.
        let (client, serverDB) = try Self.databases()
        defer {
            try? client.delete()
            try? serverDB.delete()
        }
        try client.save(
            Document(
                id: "img", properties: ["type": "image"],
                attachments: ["photo": Blob(data: Self.image, contentType: "image/png")]))
        for i in 0..<30 { try client.save(Document(id: "d\(i)", properties: ["i": .number(Double(i))])) }
        var d1 = try #require(try client.document("d1"))
        d1["edited"] = 1
        try client.save(d1)
        let server = FakeBLIPServer(serverDB)

        let status = await Self.run(Self.replicator(client, server, .pushTarget))
        #expect(status.lastError == nil)
        #expect(status.docsWritten == 31)
        #expect(try state(serverDB) == state(client))
        #expect(try Self.attachmentBytes(serverDB, "img") == Self.image)
        #expect(server.closeCodes == [1000])
        let propose = try #require(server.requests("proposeChanges").first)
        #expect(propose["conflictIncludesRev"] == "true")
        let revs = server.requests("rev")
        #expect(revs.count == 31)
        #expect(revs.allSatisfy { $0["noconflicts"] == "1" && $0["sequence"] != nil && $0["id"] != nil })
        let d1rev = try #require(revs.first { $0["id"] == "d1" })
        #expect(d1rev["history"]?.hasPrefix("1-") == true)
        let checkpoint = try #require(server.requests("setCheckpoint").last)
        #expect(try JSON.parse(checkpoint.body) == ["local": .number(Double(client.lastSequence.rawValue))])

        for n in 2...3 {
            var d2 = try #require(try client.document("d2"))
            d2["edit"] = .number(Double(n))
            try client.save(d2)
        }
        let again = await Self.run(Self.replicator(client, server, .pushTarget))
        #expect(again.lastError == nil)
        #expect(again.docsWritten == 1 && again.docWriteFailures == 0)
        #expect(try serverDB.revisionTree(of: "d2")?.winner == client.revisionTree(of: "d2")?.winner)
    }

    @Test func aConflictRefusedOnPushIsPulledResolvedAndPushed() async throws {
        // Proves the conflict-free flow: a push of a revision conflicting with the server's is refused (409, one
        // document failure, the replication still succeeds); a pull brings the server's revision in as a conflict;
        // resolved locally (Database.resolve), the next push is taken (its history holds the server's revision) and
        // both sides end with the same winner and no conflict.
        let (client, serverDB) = try Self.databases()
        defer {
            try? client.delete()
            try? serverDB.delete()
        }
        try client.save(Document(id: "c", properties: ["v": 0]))
        let server = FakeBLIPServer(serverDB)
        #expect(await Self.run(Self.replicator(client, server, .pushTarget)).lastError == nil)
        var mine = try #require(try client.document("c"))
        mine["v"] = "client"
        try client.save(mine)
        var theirs = try #require(try serverDB.document("c"))
        theirs["v"] = "server"
        try serverDB.save(theirs)

        let refused = await Self.run(Self.replicator(client, server, .pushTarget))
        #expect(refused.lastError == nil)
        #expect(refused.docWriteFailures == 1 && refused.docsWritten == 0)

        let pulled = await Self.run(Self.replicator(client, server, .pullSource))
        #expect(pulled.lastError == nil)
        let leaves = try client.conflicts(of: "c")
        #expect(leaves.count == 2)
        // Resolved on the server's revision, as Couchbase Lite resolves: the merge descends from what the server has.
        let serverRev = try serverDB.revisionTree(of: "c")?.winner
        var merged = try #require(leaves.first { $0.revision == serverRev })
        merged["v"] = "merged"
        _ = try client.resolve(merged)

        let pushed = await Self.run(Self.replicator(client, server, .pushTarget))
        #expect(pushed.lastError == nil && pushed.docWriteFailures == 0)
        #expect(try serverDB.document("c")?["v"] == "merged")
        #expect(try serverDB.revisionTree(of: "c")?.winner == client.revisionTree(of: "c")?.winner)
        #expect(try serverDB.conflicts(of: "c").count == 1)
    }

    @Test func aRevisionTheServerRefusesIsAPerDocumentFailureNotASilentPass() async throws {
        // Proves: a pushed rev the server refuses for a non-conflict reason (403, HTTP domain, as the gateway answers
        // a sync function's forbidden) is counted as that document's write failure and logged with its id and
        // error, while the other documents are written and the replication itself succeeds and checkpoints.
        let (client, serverDB) = try Self.databases()
        defer {
            try? client.delete()
            try? serverDB.delete()
        }
        for id in ["ok1", "bad", "ok2"] { try client.save(Document(id: id, properties: ["v": 1])) }
        let server = FakeBLIPServer(serverDB)
        server.forbidRevisions(of: ["bad"])
        let log = CapturedLog()
        let replicator = Replicator(
            blip: server.connector, remoteIdentity: "ws://test.invalid/db", local: LocalEndpoint(client),
            role: .pushTarget, options: ReplicatorOptions(backoffInitialMs: 10, backoffMaxMs: 50),
            logger: log.logger())
        let status = await Self.run(replicator)
        #expect(status.lastError == nil)
        #expect(status.docsWritten == 2 && status.docWriteFailures == 1, "\(status)")
        #expect(try serverDB.document("bad") == nil)
        #expect(try serverDB.document("ok1") != nil && serverDB.document("ok2") != nil)
        let refusal = try #require(log.records("revision not written").first)
        #expect(refusal.metadata["doc"] == "bad")
        #expect(refusal.metadata["error"] == "forbidden")
        #expect(log.records("revision not written").count == 1)
        #expect(server.requests("setCheckpoint").count >= 1)
    }

    @Test func aFirstPullIntoADatabaseThatHoldsDocumentsGetsTombstones() async throws {
        // Proves `activeOnly` goes only with a first pull into an empty database (LiteCore's `skipDeleted`): a
        // database that pushed a document the server then deleted pulls for the first time (no pull checkpoint)
        // without `activeOnly` and takes the tombstone. Before, it skipped it and its checkpoint passed it for good,
        // so the document stayed live there only (found by the mixed-protocol convergence test).
        let (client, serverDB) = try Self.databases()
        defer {
            try? client.delete()
            try? serverDB.delete()
        }
        try client.save(Document(id: "gone", properties: ["v": 0]))
        let server = FakeBLIPServer(serverDB)
        let pushed = await Self.run(Self.replicator(client, server, .pushTarget))
        #expect(pushed.lastError == nil && pushed.docsWritten == 1, "push: \(pushed)")
        try serverDB.delete("gone")

        let pulled = await Self.run(Self.replicator(client, server, .pullSource))
        #expect(pulled.lastError == nil && pulled.docsWritten == 1, "pull: \(pulled)")
        let sub = try #require(server.requests("subChanges").last)
        #expect(sub["since"] == nil && sub["activeOnly"] == nil, "subChanges \(sub.properties)")
        #expect(try client.revisionTree(of: "gone")?.winnerIsDeleted == true)
        #expect(try client.revisionTree(of: "gone")?.winner == serverDB.revisionTree(of: "gone")?.winner)
    }

    @Test func aDocumentFirstPushedAfterSeveralEditsCarriesItsEarlierAttachments() async throws {
        // Proves a push answers `getAttachment` for an attachment added before the revision's parent when the server
        // has never seen the document (`proposeChanges` answers 0 for a new document as for a known parent): the
        // attachment was added at generation 2, the document is first pushed at generation 3, and the server ends
        // with its bytes. Before, the revision was read with the parent as a known ancestor, the attachment came as a
        // stub with no bytes to offer, and the server's `getAttachment` got 404: the document never reached it (found
        // by the mixed-protocol convergence test).
        let (client, serverDB) = try Self.databases()
        defer {
            try? client.delete()
            try? serverDB.delete()
        }
        try client.save(Document(id: "late", properties: ["v": 1]))
        var doc = try #require(try client.document("late"))
        doc.attachments["photo"] = Blob(data: Self.image, contentType: "image/png")
        doc["v"] = 2
        try client.save(doc)
        doc = try #require(try client.document("late"))
        doc["v"] = 3
        try client.save(doc)
        let server = FakeBLIPServer(serverDB)

        let pushed = await Self.run(Self.replicator(client, server, .pushTarget))
        #expect(pushed.lastError == nil && pushed.docsWritten == 1 && pushed.docWriteFailures == 0, "\(pushed)")
        #expect(try serverDB.revisionTree(of: "late")?.winner == client.revisionTree(of: "late")?.winner)
        #expect(try Self.attachmentBytes(serverDB, "late") == Self.image)
    }

    @Test func aContinuousPullFollowsNewChangesAndStopsWithAClose() async throws {
        // Proves a continuous BLIP pull subscribes with continuous=true, goes idle once caught up, stores a document
        // written on the server afterwards, and closes with 1000 when stopped.
        let (client, serverDB) = try Self.databases()
        defer {
            try? client.delete()
            try? serverDB.delete()
        }
        try serverDB.save(Document(id: "first", properties: [:]))
        let server = FakeBLIPServer(serverDB)
        let pull = Self.replicator(client, server, .pullSource, continuous: true)
        pull.start()
        for await s in pull.status where s.activity == .idle && s.completed >= 1 { break }
        #expect(try client.document("first") != nil)
        try serverDB.save(Document(id: "later", properties: ["x": 1]))
        for await s in pull.status where s.completed >= 2 { break }
        #expect(try client.document("later")?["x"] == 1)
        #expect(server.requests("subChanges").first?["continuous"] == "true")
        await pull.stop()
        #expect(server.closeCodes == [1000])
    }

    @Test func aLostConnectionIsRetriedWithBackoffAndTheRunCompletes() async throws {
        // Proves the replicator's retry covers BLIP: two refused connections are transient failures retried with
        // backoff, and the pull then completes with every document.
        let (client, serverDB) = try Self.databases()
        defer {
            try? client.delete()
            try? serverDB.delete()
        }
        for i in 0..<10 { try serverDB.save(Document(id: "d\(i)", properties: [:])) }
        let server = FakeBLIPServer(serverDB)
        server.refuseNext(2)
        let status = await Self.run(Self.replicator(client, server, .pullSource))
        #expect(status.lastError == nil)
        #expect(status.docsWritten == 10)
        #expect(server.connections == 1)
    }
}
