import Foundation
import NIOHTTP1
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeReplication
import SetteeTestSupport
import Testing

/// SetteeLite's BLIP replicator (`ws://` URLs, `WebSocketBLIPConnector`) against a real `settee-gateway` process's
/// `/db/_blipsync` (issue 68, Must show: Lite over BLIP against the gateway): the two halves of Couchbase Lite's
/// replication protocol built apart, run together.
@Suite(.serialized, .onTestThreads) struct LiteBLIPGatewayProcessTests {
    /// A gateway with database `db` on an in-memory bucket, GUEST allowed every channel (`delta_sync` on when asked).
    static func startedGateway(_ name: String, deltaSync: Bool = false) async throws -> GatewayProcess {
        let deltas = deltaSync ? #","delta_sync":{"enabled":true}"# : ""
        let gw = try GatewayProcess(
            name: "liteblip-\(name)",
            config:
                #"{"databases":{"db":{"server":"walrus:","users":{"GUEST":{"disabled":false,"admin_channels":["*"]}}\#(deltas)}}}"#
        )
        let admin = "http://127.0.0.1:\(gw.adminPort)/db/"
        try await gw.start {
            (try? await GatewayHTTP.request(.GET, admin))?.status == 200
        }
        return gw
    }

    /// Polls `done` every 5 ms until it holds (throws after `seconds`).
    static func waitFor(_ seconds: Double, _ what: String, _ done: () throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        while ContinuousClock.now < deadline {
            if try done() { return }
            try await Task.sleep(for: .milliseconds(5))
        }
        throw HarnessError("timed out waiting for \(what)")
    }

    /// Writes `count` documents `prefix-NNNN` over REST (`_bulk_docs` on the admin port).
    static func restWrite(_ admin: String, prefix: String, count: Int) async throws {
        let docs = (0..<count).map { n in
            JSON.object([("_id", .string(String(format: "\(prefix)-%04d", n))), ("n", .number(Double(n)))])
        }
        let reply = try await GatewayHTTP.request(
            .POST, "\(admin)/_bulk_docs", body: Array(JSON.object([("docs", .array(docs))]).text.utf8))
        #expect(reply.status == 201, "\(reply.text)")
    }

    /// The BLIP checkpoint the gateway holds for `replicator` (`_local/checkpoint/cp-<base64 SHA-1 of its id>`, read
    /// over REST): its presence shows the replication ran over BLIP, not the CouchDB protocol.
    static func gatewayCheckpoint(_ admin: String, _ replicator: Replicator) async throws -> JSON? {
        let client = BLIPReplicationWire.checkpointClient(replicator.replicationID)
        let escaped = client.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? client
        let reply = try await GatewayHTTP.request(.GET, "\(admin)/_local/checkpoint%2F\(escaped)")
        return reply.status == 200 ? try JSON.parse(reply.body) : nil
    }

    /// Proves: a Lite database pushes 300 documents (every tenth with an attachment) over BLIP; the gateway holds
    /// every revision and serves the attachments' bytes over REST; a second, fresh Lite database pulls them over
    /// BLIP and each document (leaves, winner, body, attachment digests and bytes) is identical on both Lite
    /// databases and on the gateway.
    @Test func pushThenPullIntoAFreshDatabaseIsByteIdentical() async throws {
        let gw = try await Self.startedGateway("pushpull")
        defer { gw.stop() }
        let admin = "http://127.0.0.1:\(gw.adminPort)/db"
        let ws = "ws://127.0.0.1:\(gw.port)/db"
        let dir = URL(fileURLWithPath: TemporaryDirectory.make("liteblip-pushpull"))
        defer { try? FileManager.default.removeItem(at: dir) }
        let source = try Database(name: "source", directory: dir.path)
        defer { source.close() }
        let total = 300
        var rng = SplitMix64(seed: 68)
        var attachments: [String: [UInt8]] = [:]
        var docs: [Document] = []
        for n in 0..<total {
            let id = String(format: "doc-%04d", n)
            var doc = Document(id: id, properties: ["n": .number(Double(n)), "name": .string("item \(n)")])
            if n % 10 == 0 {
                let data = LiteConvergence.randomBytes(500 + n * 7, &rng)
                doc.attachments["blob"] = Blob(data: data, contentType: "application/octet-stream")
                attachments[id] = data
            }
            docs.append(doc)
        }
        var revisions: [String: String] = [:]
        for saved in try source.saveAll(docs) { revisions[saved.id!] = saved.revision!.description }

        let pushStarted = ContinuousClock.now
        let push = try Replicator(source, .push(to: ws))
        let pushed = await LiteConvergence.replicate(push)
        let pushTime = ContinuousClock.now - pushStarted
        print("LiteBLIPGatewayProcessTests.push: \(total) docs in \(pushTime), status \(pushed)")
        #expect(pushed.lastError == nil, "\(pushed)")
        #expect(pushed.docsWritten == total, "\(pushed)")
        #expect(pushed.docWriteFailures == 0, "\(pushed)")
        let pushCheckpoint = try await Self.gatewayCheckpoint(admin, push)
        #expect(pushCheckpoint?["local"] != nil, "push checkpoint on the gateway: \(pushCheckpoint?.text ?? "none")")

        // The gateway has every revision (an empty _revs_diff) and the attachments' bytes over REST.
        let gateway = try RemoteEndpoint(url: admin, logger: LiteConvergence.quietLogger)
        let diff = try await gateway.revsDiff(revisions.mapValues { [$0] })
        let missing = diff.objectValue?.map(\.0) ?? []
        #expect(missing.isEmpty, "\(missing.count) revisions missing on the gateway, e.g. \(missing.prefix(5))")
        var badREST: [String] = []
        for (id, data) in attachments.sorted(by: { $0.key < $1.key }) {
            let reply = try await GatewayHTTP.request(.GET, "\(admin)/\(id)/blob")
            if reply.status != 200 || reply.body != data { badREST.append("\(id): \(reply.status)") }
        }
        #expect(badREST.isEmpty, "attachments wrong over REST: \(badREST.prefix(5))")

        let target = try Database(name: "target", directory: dir.path)
        defer { target.close() }
        let pullStarted = ContinuousClock.now
        let pull = try Replicator(target, .pull(from: ws))
        let pulled = await LiteConvergence.replicate(pull)
        let pullTime = ContinuousClock.now - pullStarted
        print("LiteBLIPGatewayProcessTests.pull: \(total) docs in \(pullTime), status \(pulled)")
        #expect(pulled.lastError == nil, "\(pulled)")
        #expect(pulled.docsWritten == total, "\(pulled)")
        let pullCheckpoint = try await Self.gatewayCheckpoint(admin, pull)
        #expect(pullCheckpoint?["remote"] != nil, "pull checkpoint on the gateway: \(pullCheckpoint?.text ?? "none")")

        var mismatches: [String] = []
        for id in revisions.keys.sorted() {
            let a = try LiteConvergence.liteState(source, id)
            let b = try LiteConvergence.liteState(target, id)
            if a == nil || a != b {
                mismatches.append("\(id): source \(a?.description ?? "nil") target \(b?.description ?? "nil")")
            }
            if id.hasSuffix("0") {
                let g = try await LiteConvergence.gatewayState(admin, id)
                if g != a {
                    mismatches.append("\(id): gateway \(g?.description ?? "nil") lite \(a?.description ?? "nil")")
                }
            }
        }
        #expect(mismatches.isEmpty, "\(mismatches.count) differ, e.g. \(mismatches.prefix(3))")
        var badBytes: [String] = []
        for (id, data) in attachments {
            let blob = try target.document(id)?.attachments["blob"]
            let bytes = try blob.map { try target.content(of: $0) }
            if bytes != data { badBytes.append(id) }
        }
        #expect(badBytes.isEmpty, "pulled attachment bytes differ: \(badBytes.sorted().prefix(5))")
    }

    /// Proves: a continuous BLIP pull, once caught up, stores a document written over REST within 1 s (the
    /// latency is printed; the assertion allows 5 s for a loaded machine).
    @Test func continuousPullSeesARESTWriteWithinASecond() async throws {
        let gw = try await Self.startedGateway("continuous")
        defer { gw.stop() }
        let admin = "http://127.0.0.1:\(gw.adminPort)/db"
        try await Self.restWrite(admin, prefix: "before", count: 20)
        let dir = URL(fileURLWithPath: TemporaryDirectory.make("liteblip-continuous"))
        defer { try? FileManager.default.removeItem(at: dir) }
        let db = try Database(name: "phone", directory: dir.path)
        defer { db.close() }
        let pull = try Replicator(db, .pull(from: "ws://127.0.0.1:\(gw.port)/db"), continuous: true)
        pull.start()
        try await Self.waitFor(30, "the continuous pull to catch up") {
            try db.document("before-0019") != nil && pull.currentStatus.activity == .idle
        }
        var latencies: [Duration] = []
        for k in 0..<3 {
            let id = "live-\(k)"
            let written = ContinuousClock.now
            let reply = try await GatewayHTTP.request(.PUT, "\(admin)/\(id)", body: Array(#"{"k":\#(k)}"#.utf8))
            #expect(reply.status == 201, "\(reply.text)")
            try await Self.waitFor(10, "\(id) pulled") { try db.document(id) != nil }
            latencies.append(ContinuousClock.now - written)
        }
        let status = pull.currentStatus
        await pull.stop()
        print(
            "LiteBLIPGatewayProcessTests.continuous: REST write to Lite over BLIP took \(latencies); status \(status)")
        #expect(latencies.allSatisfy { $0 < .seconds(5) }, "\(latencies)")
        #expect(status.lastError == nil, "\(status)")
    }

    /// Proves: a continuous pull stopped once it has everything resumes from its checkpoint: the next pull of the
    /// same database from the same URL sees and writes only the documents added since; a one-shot pull of 2,000
    /// stopped after 400 resumes from its last batch's checkpoint (it sees at most the 1,800 past the first batch).
    @Test func cancelledPullResumesFromItsCheckpoint() async throws {
        let gw = try await Self.startedGateway("resume")
        defer { gw.stop() }
        let admin = "http://127.0.0.1:\(gw.adminPort)/db"
        let ws = "ws://127.0.0.1:\(gw.port)/db"
        try await Self.restWrite(admin, prefix: "first", count: 200)
        let dir = URL(fileURLWithPath: TemporaryDirectory.make("liteblip-resume"))
        defer { try? FileManager.default.removeItem(at: dir) }
        let db = try Database(name: "phone", directory: dir.path)
        defer { db.close() }
        let first = try Replicator(db, .pull(from: ws), continuous: true)
        first.start()
        try await Self.waitFor(30, "the first pull") {
            try LiteConvergence.liteIDs(db).count == 200 && first.currentStatus.activity == .idle
        }
        await first.stop()
        let firstStatus = await first.waitUntilStopped()
        #expect(firstStatus.docsWritten == 200, "\(firstStatus)")
        let checkpoint = try await Self.gatewayCheckpoint(admin, first)
        #expect(checkpoint?["remote"] != nil, "the stopped pull's checkpoint: \(checkpoint?.text ?? "none")")

        try await Self.restWrite(admin, prefix: "second", count: 25)
        let secondPull = try Replicator(db, .pull(from: ws))
        #expect(secondPull.replicationID == first.replicationID)
        let second = await LiteConvergence.replicate(secondPull)
        print(
            "LiteBLIPGatewayProcessTests.resume: first pull \(firstStatus), gateway checkpoint "
                + "\(checkpoint?.text ?? "none"); second pull \(second)")
        #expect(second.lastError == nil, "\(second)")
        #expect(second.total == 25, "the second pull did not resume from the checkpoint: \(second)")
        #expect(second.docsWritten == 25, "\(second)")
        #expect(try LiteConvergence.liteIDs(db).count == 225)

        // Stopped mid-transfer: the next run asks only from the last whole batch's checkpoint on.
        try await Self.restWrite(admin, prefix: "third", count: 2000)
        let interrupted = try Replicator(db, .pull(from: ws))
        interrupted.start()
        try await Self.waitFor(30, "400 of 2000 pulled") { interrupted.currentStatus.completed >= 400 }
        await interrupted.stop()
        let stopped = await interrupted.waitUntilStopped()
        let resumed = await LiteConvergence.replicate(try Replicator(db, .pull(from: ws)))
        print("LiteBLIPGatewayProcessTests.resume: stopped mid-transfer at \(stopped); resumed run \(resumed)")
        #expect(stopped.completed < 2000, "the pull ended before it was stopped: \(stopped)")
        #expect(resumed.lastError == nil, "\(resumed)")
        #expect(resumed.total <= 2000 - 200, "the resumed pull did not start from the checkpoint: \(resumed)")
        #expect(try LiteConvergence.liteIDs(db).count == 2225)
    }

    /// Bytes of BLIP frames the gateway sent and received on `/_blipsync` for `db` (`/_expvar`'s
    /// `replication_bytes_sent` / `_received`).
    static func blipBytes(_ gw: GatewayProcess) async throws -> (sent: Int, received: Int) {
        let reply = try await GatewayHTTP.request(.GET, "http://127.0.0.1:\(gw.adminPort)/_expvar")
        let stats = try JSON.parse(reply.body)["syncgateway"]?["per_db"]?["db"]?["database"]
        return (stats?["replication_bytes_sent"]?.intValue ?? -1, stats?["replication_bytes_received"]?.intValue ?? -1)
    }

    /// Proves (issue 68, delta sync): small edits of a large document (~64 KB of random hex in 200 members) travel as
    /// JSON deltas when the gateway has `delta_sync` on: five edits pushed from Lite and five made over REST and pulled
    /// into the same Lite database, each a one-shot replication, cost far fewer bytes on the wire (the gateway's
    /// BLIP frame counts, whole replications: checkpoints and `changes` included) than with it off; the document ends
    /// byte-identical (its members in order) on Lite and on the gateway either way. Bytes per update are printed.
    @Test func smallEditsOfALargeDocumentTravelAsDeltas() async throws {
        var figures: [Bool: (push: [Int], pull: [Int])] = [:]
        for deltas in [false, true] {
            let gw = try await Self.startedGateway("delta-\(deltas)", deltaSync: deltas)
            defer { gw.stop() }
            let admin = "http://127.0.0.1:\(gw.adminPort)/db"
            let ws = "ws://127.0.0.1:\(gw.port)/db"
            let dir = URL(fileURLWithPath: TemporaryDirectory.make("liteblip-delta"))
            defer { try? FileManager.default.removeItem(at: dir) }
            let db = try Database(name: "phone", directory: dir.path)
            defer { db.close() }
            var rng = SplitMix64(seed: 125)
            func hex(_ n: Int) -> String {
                LiteConvergence.randomBytes(n, &rng).map { String(format: "%02x", $0) }.joined()
            }
            var members: [(String, JSON)] = (0..<200).map { ("field\($0)", .string(hex(160))) }
            var doc = Document(id: "big", properties: .object(members))
            doc = try db.put(doc)
            let first = await LiteConvergence.replicate(try Replicator(db, .push(to: ws)))
            #expect(first.lastError == nil && first.docsWritten == 1, "\(first)")
            var push: [Int] = []
            for k in 0..<5 {
                members[k * 37].1 = .string("edit \(k) " + hex(8))
                doc.properties = .object(members)
                doc = try db.put(doc)
                let before = try await Self.blipBytes(gw)
                let status = await LiteConvergence.replicate(try Replicator(db, .push(to: ws)))
                #expect(status.lastError == nil && status.docsWritten == 1, "\(status)")
                push.append(try await Self.blipBytes(gw).received - before.received)
            }
            var pull: [Int] = []
            for k in 0..<5 {
                let current = try JSON.parse(try await GatewayHTTP.request(.GET, "\(admin)/big").body)
                var body = current
                body.set("field\(k * 41 + 3)", .string("rest edit \(k) " + hex(8)))
                let put = try await GatewayHTTP.request(.PUT, "\(admin)/big", body: body.serialized())
                #expect(put.status == 201, "\(put.text)")
                let before = try await Self.blipBytes(gw)
                let status = await LiteConvergence.replicate(try Replicator(db, .pull(from: ws)))
                #expect(status.lastError == nil && status.docsWritten == 1, "\(status)")
                pull.append(try await Self.blipBytes(gw).sent - before.sent)
            }
            figures[deltas] = (push, pull)
            // Byte-identical on both sides: the Lite document's members, in order, and the gateway's body.
            let lite = try #require(try db.document("big"))
            let gateway = try JSON.parse(try await GatewayHTTP.request(.GET, "\(admin)/big").body)
            let gatewayMembers = JSON.object((gateway.objectValue ?? []).filter { !$0.0.hasPrefix("_") })
            #expect(lite.revision?.description == gateway["_rev"]?.stringValue)
            let same = lite.properties.serialized() == gatewayMembers.serialized()
            #expect(same, "delta_sync \(deltas): the document differs between Lite and the gateway")
            #expect(lite.properties.serialized().count > 60_000)
        }
        let off = try #require(figures[false])
        let on = try #require(figures[true])
        print(
            "LiteBLIPGatewayProcessTests.delta: bytes on the wire per update of a "
                + "~66 KB document, push \(off.push) without delta_sync, \(on.push) with; pull \(off.pull) without, "
                + "\(on.pull) with")
        #expect(on.push.reduce(0, +) * 5 < off.push.reduce(0, +), "push: \(on.push) vs \(off.push)")
        #expect(on.pull.reduce(0, +) * 5 < off.pull.reduce(0, +), "pull: \(on.pull) vs \(off.pull)")
    }
}
