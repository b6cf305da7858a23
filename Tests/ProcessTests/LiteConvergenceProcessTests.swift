import Foundation
import Logging
import NIOHTTP1
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeLiteListener
import SetteeReplication
import SetteeTestSupport
import Testing

/// Lite databases converge through a real `settee-gateway` and peer-to-peer in
/// random orders, and a push replication survives the gateway being SIGKILLed mid-way.
@Suite(.serialized, .onTestThreads)
struct LiteConvergenceProcessTests {
    static var gatewayBuilt: Bool { FileManager.default.isExecutableFile(atPath: GatewayProcess.binary) }

    @Test(.enabled(if: gatewayBuilt), .timeLimit(.minutes(5)))
    func randomisedConvergence() async throws {
        // Proves that 3 Lite databases and a settee-gateway that edit the same documents (updates,
        // deletes, re-creations, conflict resolutions, attachments) while disconnected, then sync in a
        // random order through the gateway and peer-to-peer (PeerListener), end with the same winning
        // revision, the same leaves (conflict set) and the same winning body for every document.
        let seed =
            ProcessInfo.processInfo.environment["SETTEE_SEED"].flatMap { UInt64($0) }
            ?? UInt64.random(in: 1...9_999_999)
        print("LiteConvergenceProcessTests.randomisedConvergence seed \(seed) (SETTEE_SEED=\(seed) replays it)")
        var rng = SplitMix64(seed: seed)
        let started = ContinuousClock.now

        let gw = try GatewayProcess(
            name: "liteconv", config: #"{"databases":{"db":{"server":"walrus:","users":{"GUEST":{"disabled":true}}}}}"#)
        try gw.start()
        defer { gw.stop() }
        let gwURL = "http://127.0.0.1:\(gw.adminPort)/db"
        let gateway = try RemoteEndpoint(url: gwURL, logger: LiteConvergence.quietLogger)

        let dir = URL(fileURLWithPath: TemporaryDirectory.make("liteconv"))
        defer { try? FileManager.default.removeItem(at: dir) }
        let names = ["peer0", "peer1", "peer2"]
        let dbs = try names.map { try Database(name: $0, directory: dir.path) }
        defer { for db in dbs { db.close() } }
        let locals = dbs.map { LocalEndpoint($0, feedTimeoutMs: 1000) }
        var listeners: [PeerListener] = []
        var peers: [RemoteEndpoint] = []
        for (i, name) in names.enumerated() {
            let listener = PeerListener(endpoint: locals[i], databaseName: name, logger: LiteConvergence.quietLogger)
            let url = try await listener.start().syncURL
            listeners.append(listener)
            peers.append(try RemoteEndpoint(url: url, logger: LiteConvergence.quietLogger))
        }

        var syncs = 0
        var written = 0
        var failures: [String] = []
        func sync(_ source: any ReplicationEndpoint, _ target: any ReplicationEndpoint, _ what: String) async -> Int {
            let s = await LiteConvergence.replicate(source, target)
            syncs += 1
            written += s.docsWritten
            if s.lastError != nil || s.docWriteFailures > 0 {
                failures.append("\(what): error \(s.lastError.map { "\($0)" } ?? "none"), \(s.docWriteFailures) failed")
            }
            return s.docsWritten
        }

        // A common starting set everywhere.
        let seedDocs = LiteConvergence.seedDocuments(&rng)
        var ids = seedDocs.compactMap(\.id)
        _ = try dbs[0].saveAll(seedDocs)
        _ = await sync(locals[0], gateway, "seed push")
        for i in 1..<3 { _ = await sync(gateway, locals[i], "seed pull \(i)") }

        // Rounds: disconnected edits everywhere (the gateway too, through its admin REST API), then
        // random sync steps.
        var counts = LiteConvergence.EditCounts()
        var gatewayEdits = 0
        let rounds = 4
        for round in 0..<rounds {
            for (i, db) in dbs.enumerated() {
                for _ in 0..<(3 + Int(rng.next() % 6)) {
                    try LiteConvergence.edit(db, tag: "p\(i)r\(round)", ids: &ids, counts: &counts, rng: &rng)
                }
            }
            for _ in 0..<(1 + Int(rng.next() % 3)) {
                let id = ids[Int(rng.next() % UInt64(ids.count))]
                let current = try await GatewayHTTP.request(.GET, "\(gwURL)/\(id)")
                guard current.status == 200, var body = try? JSON.parse(current.body) else { continue }
                body.set("v", .number(Double(rng.next() % 1000)))
                body.set("by", .string("gw-r\(round)"))
                let put = try await GatewayHTTP.request(.PUT, "\(gwURL)/\(id)", body: Array(body.serialized()))
                #expect(put.status == 201, "gateway edit of \(id): \(put.status) \(put.text)")
                gatewayEdits += 1
            }
            for _ in 0..<(3 + Int(rng.next() % 5)) {
                let i = Int(rng.next() % 3)
                let j = (i + 1 + Int(rng.next() % 2)) % 3
                switch rng.next() % 4 {
                case 0: _ = await sync(locals[i], gateway, "push \(i)->gw")
                case 1: _ = await sync(gateway, locals[i], "pull gw->\(i)")
                case 2: _ = await sync(peers[j], locals[i], "pull \(j)->\(i)")
                default: _ = await sync(locals[i], peers[j], "push \(i)->\(j)")
                }
            }
        }

        // Full mesh of one-shot syncs until nothing moves.
        var passes = 0
        while passes < 6 {
            passes += 1
            var moved = 0
            for i in 0..<3 { moved += await sync(locals[i], gateway, "mesh push \(i)->gw") }
            for i in 0..<3 { moved += await sync(gateway, locals[i], "mesh pull gw->\(i)") }
            for i in 0..<3 {
                for j in 0..<3 where j != i { moved += await sync(peers[j], locals[i], "mesh pull \(j)->\(i)") }
            }
            if moved == 0 { break }
        }
        for listener in listeners { await listener.stop() }

        // Every database and the gateway hold the same documents, winners, leaves and winning bodies.
        var allIDs = try await LiteConvergence.endpointIDs(gateway)
        let idSets = try dbs.map { try LiteConvergence.liteIDs($0) }
        for s in idSets { allIDs.formUnion(s) }
        let gatewayIDs = try await LiteConvergence.endpointIDs(gateway)
        #expect(gatewayIDs == allIDs, "gateway lacks \(allIDs.subtracting(gatewayIDs).sorted())")
        for (i, s) in idSets.enumerated() {
            #expect(s == allIDs, "peer\(i) lacks \(allIDs.subtracting(s).sorted())")
        }
        var mismatches: [String] = []
        var conflicted = 0
        var deletedWinners = 0
        for id in allIDs.sorted() {
            var states: [ConvergedState?] = try dbs.map { try LiteConvergence.liteState($0, id) }
            states.append(try await LiteConvergence.gatewayState(gwURL, id))
            let first = states[0]
            if states.contains(where: { $0 != first }) {
                mismatches.append(
                    "\(id):\n"
                        + zip(names + ["gateway"], states).map { "  \($0): \($1.map(\.description) ?? "absent")" }
                        .joined(separator: "\n"))
            }
            if let first {
                if first.winnerDeleted { deletedWinners += 1 }
                if first.leaves.count > 1 { conflicted += 1 }
            }
        }
        let elapsed = ContinuousClock.now - started
        print(
            "LiteConvergenceProcessTests.randomisedConvergence seed \(seed): \(allIDs.count) docs, \(rounds) rounds, "
                + "\(counts), gateway edits \(gatewayEdits), \(syncs) syncs (\(passes) mesh passes), "
                + "\(written) revisions written, \(conflicted) docs with >1 leaf, \(deletedWinners) deleted winners, "
                + "\(elapsed)")
        #expect(failures.isEmpty, "replication failures: \(failures.prefix(5))")
        #expect(
            mismatches.isEmpty,
            "seed \(seed): \(mismatches.count) documents differ:\n\(mismatches.prefix(5).joined(separator: "\n"))")
        #expect(conflicted > 0, "the run made no conflicts, so it proved little (seed \(seed))")
    }

    @Test(.enabled(if: gatewayBuilt), .timeLimit(.minutes(5)))
    func pushResumesAfterGatewayCrash() async throws {
        // Proves that a continuous push from a Lite database to a gateway on a directory-backed bucket
        // survives the gateway being SIGKILLed a third of the way through: the replicator goes offline,
        // retries, and once the gateway is back on the same directory and port it carries on from where
        // it was (it does not re-read the changes it had checkpointed); every document arrives with its
        // revision and attachments, and a fresh replicator resumes from the `_local` checkpoints.
        let total = 3000
        let bucketDir = URL(fileURLWithPath: TemporaryDirectory.make("liteconv-bucket"))
        defer { try? FileManager.default.removeItem(at: bucketDir) }
        let gw = try GatewayProcess(
            name: "liteconv-crash",
            config: #"{"databases":{"db":{"server":"\#(bucketDir.path)","users":{"GUEST":{"disabled":true}}}}}"#)
        try gw.start()
        defer { gw.stop() }
        let gwURL = "http://127.0.0.1:\(gw.adminPort)/db"

        let dir = URL(fileURLWithPath: TemporaryDirectory.make("liteconv-crash"))
        defer { try? FileManager.default.removeItem(at: dir) }
        let db = try Database(name: "crash", directory: dir.path)
        defer { db.close() }
        var rng = SplitMix64(seed: 8)
        var expected: [String: String] = [:]
        var attachmentDocs: [(id: String, data: [UInt8])] = []
        for chunk in stride(from: 0, to: total, by: 500) {
            var docs: [Document] = []
            for n in chunk..<(chunk + 500) {
                var doc = Document(id: String(format: "item-%05d", n), properties: ["n": .number(Double(n))])
                if n % 10 == 0 {
                    let data = LiteConvergence.randomBytes(1000 + n % 3000, &rng)
                    doc.attachments["blob"] = Blob(data: data, contentType: "application/octet-stream")
                    attachmentDocs.append((doc.id!, data))
                }
                docs.append(doc)
            }
            for saved in try db.saveAll(docs) { expected[saved.id!] = saved.revision!.description }
        }

        let local = LocalEndpoint(db, feedTimeoutMs: 1000)
        let push = Replicator(
            source: local, target: try RemoteEndpoint(url: gwURL, logger: LiteConvergence.quietLogger),
            options: ReplicatorOptions(continuous: true, batchSize: 100, backoffInitialMs: 100, backoffMaxMs: 1000),
            logger: LiteConvergence.quietLogger)
        let pushStarted = ContinuousClock.now
        push.start()

        func waitFor(_ seconds: Int, _ what: String, _ done: (ReplicationStatus) -> Bool) async throws
            -> ReplicationStatus
        {
            let deadline = ContinuousClock.now + .seconds(seconds)
            while ContinuousClock.now < deadline {
                let s = push.currentStatus
                if done(s) { return s }
                try await Task.sleep(for: .milliseconds(5))
            }
            throw HarnessError("timed out waiting for \(what); status \(push.currentStatus)")
        }

        let beforeKill = try await waitFor(60, "a third uploaded") { $0.completed >= total / 3 }
        gw.crash()
        let killedAt = ContinuousClock.now
        let offline = try await waitFor(30, "the replicator to notice") {
            $0.activity == .offline && $0.lastError != nil
        }
        try await Task.sleep(for: .milliseconds(500))
        try gw.start()
        let downFor = ContinuousClock.now - killedAt
        let done = try await waitFor(120, "everything uploaded") { $0.completed >= total && $0.activity == .idle }
        let pushTime = ContinuousClock.now - pushStarted
        await push.stop()

        // Changes the replicator looked at after the crash: it went on from its checkpoint, not from 0.
        let seenAfterCrash = done.total - beforeKill.completed
        print(
            "LiteConvergenceProcessTests.pushResumesAfterGatewayCrash: \(total) docs (\(attachmentDocs.count) with "
                + "attachments); killed at completed=\(beforeKill.completed) written=\(beforeKill.docsWritten); "
                + "offline error: \(offline.lastError.map { "\($0)" } ?? "-"); gateway down \(downFor); "
                + "after restart saw \(seenAfterCrash) changes, final completed=\(done.completed) "
                + "written=\(done.docsWritten) failures=\(done.docWriteFailures); push took \(pushTime)")
        #expect(seenAfterCrash < total, "the replicator started over: \(seenAfterCrash) changes after the crash")
        #expect(done.completed == total)
        #expect(done.docWriteFailures == 0)

        // Nothing lost: the gateway knows every revision (an empty _revs_diff) and every attachment's bytes.
        let gateway = try RemoteEndpoint(url: gwURL, logger: LiteConvergence.quietLogger)
        let diff = try await gateway.revsDiff(expected.mapValues { [$0] })
        let missing = diff.objectValue?.map(\.0) ?? []
        #expect(missing.isEmpty, "\(missing.count) documents missing on the gateway, e.g. \(missing.prefix(5))")
        let info = try await gateway.info()
        #expect(info["doc_count"]?.intValue == nil || info["doc_count"]?.intValue == total, "info \(info.text)")
        var badAttachments: [String] = []
        for (k, entry) in attachmentDocs.enumerated() where k % 5 == 0 {
            let reply = try await GatewayHTTP.request(.GET, "\(gwURL)/\(entry.id)/blob")
            if reply.status != 200 || reply.body != entry.data { badAttachments.append("\(entry.id): \(reply.status)") }
        }
        #expect(badAttachments.isEmpty, "attachments wrong after the crash: \(badAttachments.prefix(5))")

        // A fresh replicator (same endpoints, so the same replication id) resumes from the checkpoints:
        // it sees only what was added since.
        var extra: [Document] = []
        for n in 0..<50 { extra.append(Document(id: "extra-\(n)", properties: ["n": .number(Double(n))])) }
        _ = try db.saveAll(extra)
        let fresh = await LiteConvergence.replicate(local, gateway)
        print(
            "LiteConvergenceProcessTests.pushResumesAfterGatewayCrash: fresh replicator saw \(fresh.total) changes, "
                + "wrote \(fresh.docsWritten)")
        #expect(fresh.lastError == nil)
        #expect(fresh.total == extra.count, "fresh replicator did not resume from the checkpoint: saw \(fresh.total)")
        #expect(fresh.docsWritten == extra.count)
    }
}
