import Foundation
import Logging
import NIOHTTP1
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeReplication
import SetteeTestSupport
import Testing

/// Issue 68, Must show: the mixed-protocol convergence test. Lite databases sync with one real `settee-gateway`, some
/// over BLIP (`ws://`, Couchbase Lite 2+'s protocol) and some over the CouchDB REST protocol (`http://`, the PouchDB
/// replication algorithm), after randomized offline edits on every one of them.
///
/// The two protocols see conflicts differently, and the test holds each to its own rule. A REST peer pulls every leaf
/// and pushes every leaf, so it ends with the gateway's exact revision tree (deleted leaves included). A BLIP peer, as
/// Couchbase Lite, pulls only winners and may push only revisions that descend from the gateway's winner
/// (`proposeChanges` answers 409 otherwise), so a branch it made while the gateway moved on is resolved locally once
/// the gateway's revision is pulled, and the tombstones of its resolved-away branches stay local.
@Suite(.serialized, .onTestThreads)
struct LiteMixedProtocolConvergenceProcessTests {
    static var gatewayBuilt: Bool { FileManager.default.isExecutableFile(atPath: GatewayProcess.binary) }

    enum Wire: String { case blip, rest }

    struct Peer {
        let name: String
        let wire: Wire
        let db: Database
        let local: LocalEndpoint
    }

    /// The winner of every document the gateway has (admin `_changes`, main_only: one revision per row).
    static func gatewayWinners(_ admin: String) async throws -> [String: (rev: RevID, deleted: Bool)] {
        let reply = try await GatewayHTTP.request(.GET, "\(admin)/_changes?since=0&limit=100000")
        guard reply.status == 200, let rows = try JSON.parse(reply.body)["results"]?.arrayValue else {
            throw HarnessError("admin _changes: \(reply.status) \(reply.text.prefix(200))")
        }
        var out: [String: (rev: RevID, deleted: Bool)] = [:]
        for row in rows {
            guard let id = row["id"]?.stringValue, !id.hasPrefix("_"),
                let rev = row["changes"]?.arrayValue?.first?["rev"]?.stringValue.flatMap(RevID.init)
            else { continue }
            out[id] = (rev, row["deleted"]?.boolValue ?? false)
        }
        return out
    }

    /// A REST peer's app (PouchDB's way): a document with more than one live leaf is resolved onto its winner, the
    /// winner's body kept; the other live leaves get tombstones, and all of it is pushed. True when it resolved.
    static func resolveOntoWinner(_ db: Database, _ id: String) throws -> Bool {
        guard let tree = try db.revisionTree(of: id), let winner = tree.winner, !tree.winnerIsDeleted else {
            return false
        }
        guard tree.leaves.filter({ !tree.isDeleted($0) }).count > 1,
            let doc = try db.document(id, revision: winner)
        else { return false }
        _ = try db.resolve(doc)
        return true
    }

    /// A BLIP peer's app (Couchbase Lite's "remote wins"): once the gateway's winner `server` is here, a document whose
    /// winner does not descend from it, or that has more than one live leaf, is resolved onto the leaf that continues
    /// the gateway's branch (the gateway's winner itself when nothing here descends from it), its body kept; when that
    /// leaf is a tombstone, every live leaf is deleted. True when it resolved.
    static func resolveTowardsGateway(_ db: Database, _ id: String, server: (rev: RevID, deleted: Bool)?) throws
        -> Bool
    {
        guard let server, let tree = try db.revisionTree(of: id), let winner = tree.winner,
            tree.contains(server.rev)
        else { return false }
        let live = tree.leaves.filter { !tree.isDeleted($0) }
        let agrees = tree.history(of: winner).contains(server.rev) || (tree.winnerIsDeleted && server.deleted)
        if agrees && live.count <= 1 { return false }
        let continuing = tree.leaves.filter { tree.history(of: $0).contains(server.rev) }
        let base = continuing.first { !tree.isDeleted($0) } ?? continuing.first ?? server.rev
        if !tree.isDeleted(base), let doc = try db.document(id, revision: base) {
            _ = try db.resolve(doc)
        } else {
            for leaf in live { _ = try db.delete(id, revision: leaf) }
        }
        return true
    }

    @Test(.enabled(if: gatewayBuilt), .timeLimit(.minutes(5)))
    func blipAndRESTPeersConvergeThroughOneGateway() async throws {
        // Proves: five Lite databases, three replicating over BLIP (ws://) and two over the CouchDB protocol
        // (http://), plus the gateway's own admin REST edits, make random offline edits (creates, updates, deletes,
        // re-creations, conflict resolutions, attachments added, replaced and removed; the first 20 documents are
        // shared, so edits conflict) for 6 rounds, with random one-shot pushes and pulls between rounds; then every
        // peer, in a random order each pass, pushes, pulls and resolves the conflicts its app sees until a pass moves
        // nothing. At the end every peer and the gateway hold the same documents, and for each one: the same winner
        // and winning body (attachment digests, and the bytes present) and the same live leaves (no conflict left);
        // a REST peer's whole revision tree equals the gateway's; a BLIP peer's deleted winner may be one of its own
        // local tombstones (counted and printed). Seeded: SETTEE_SEED=<printed seed> replays a run.
        let seed =
            ProcessInfo.processInfo.environment["SETTEE_SEED"].flatMap { UInt64($0) }
            ?? UInt64.random(in: 1...9_999_999)
        print(
            "LiteMixedProtocolConvergenceProcessTests.blipAndRESTPeersConvergeThroughOneGateway seed \(seed) "
                + "(SETTEE_SEED=\(seed) replays it)")
        var rng = SplitMix64(seed: seed)
        let started = ContinuousClock.now

        let gw = try GatewayProcess(
            name: "litemixed",
            config: #"{"databases":{"db":{"server":"walrus:","users":{"GUEST":{"disabled":true},"#
                + #""peer":{"password":"pw-peer","admin_channels":["*"]}}}}}"#)
        let admin = "http://127.0.0.1:\(gw.adminPort)/db"
        try await gw.start { (try? await GatewayHTTP.request(.GET, admin + "/"))?.status == 200 }
        defer { gw.stop() }
        let auth = ReplicationAuthenticator.basic(user: "peer", password: "pw-peer")
        let ws = "ws://127.0.0.1:\(gw.port)/db"
        let restGateway = try RemoteEndpoint(
            url: "http://127.0.0.1:\(gw.port)/db", authenticator: auth, logger: LiteConvergence.quietLogger)

        let dir = URL(fileURLWithPath: TemporaryDirectory.make("litemixed"))
        defer { try? FileManager.default.removeItem(at: dir) }
        let wires: [Wire] = [.blip, .rest, .blip, .rest, .blip]
        var peers: [Peer] = []
        for (i, wire) in wires.enumerated() {
            let name = "\(wire.rawValue)\(i)"
            let db = try Database(name: name, directory: dir.path)
            peers.append(Peer(name: name, wire: wire, db: db, local: LocalEndpoint(db, feedTimeoutMs: 1000)))
        }
        defer { for p in peers { p.db.close() } }

        var syncs = 0
        var written = 0
        var refusedBLIPPushes = 0
        var failures: [String] = []
        // The replicator's per-document refusals ("revision not written": the document and its error), so that a
        // BLIP push's refusals can be told apart: only conflicts are expected there.
        let refusals = CapturedLog()
        /// One one-shot push or pull of `peer` with the gateway over its protocol; the revisions it wrote.
        func sync(_ peer: Peer, push: Bool, _ step: String) async throws -> Int {
            let status: ReplicationStatus
            switch peer.wire {
            case .blip:
                let connector = try WebSocketBLIPConnector(
                    databaseURL: ws, authenticator: auth, logger: LiteConvergence.quietLogger)
                status = await LiteConvergence.replicate(
                    Replicator(
                        blip: connector, remoteIdentity: ws, local: peer.local, role: push ? .pushTarget : .pullSource,
                        options: ReplicatorOptions(backoffInitialMs: 20, backoffMaxMs: 500),
                        maxHistory: peer.db.options.revsLimit, logger: refusals.logger(level: .warning)),
                    timeout: .seconds(30))
            case .rest:
                status =
                    push
                    ? await LiteConvergence.replicate(peer.local, restGateway)
                    : await LiteConvergence.replicate(restGateway, peer.local)
            }
            syncs += 1
            written += status.docsWritten
            let what = "\(step): \(push ? "push" : "pull") \(peer.name)"
            if status.lastError != nil {
                failures.append("\(what): error \(status.lastError.map { "\($0)" } ?? "-")")
            }
            // A BLIP push of a revision that does not descend from the gateway's winner is refused (409), as Sync
            // Gateway refuses Couchbase Lite's; the app resolves it after its next pull. Nothing else may fail.
            let refused = refusals.take().filter { $0.message == "revision not written" }.map {
                (doc: $0.metadata["doc"] ?? "?", error: $0.metadata["error"] ?? "?")
            }
            if peer.wire == .blip && push {
                refusedBLIPPushes += status.docWriteFailures
                for r in refused where r.error != "conflict" {
                    failures.append("\(what): \(r.doc) refused: \(r.error)")
                }
                if refused.count != status.docWriteFailures {
                    failures.append("\(what): \(status.docWriteFailures) failures, \(refused.count) logged")
                }
            } else if status.docWriteFailures > 0 {
                failures.append("\(what): \(status.docWriteFailures) revisions not written")
            }
            return status.docsWritten
        }

        // A common starting set everywhere, pushed over BLIP and pulled over both protocols.
        let seedDocs = LiteConvergence.seedDocuments(&rng)
        var ids = seedDocs.compactMap(\.id)
        _ = try peers[0].db.saveAll(seedDocs)
        let seeded = try await sync(peers[0], push: true, "seed")
        #expect(seeded == 20, "seed: the BLIP push of the common set wrote \(seeded) of 20")
        for p in peers.dropFirst() {
            let pulled = try await sync(p, push: false, "seed")
            #expect(pulled == 20, "seed: \(p.name) pulled \(pulled) of 20")
        }

        // Rounds: offline edits everywhere (the gateway too, through its admin REST API), then random one-shot syncs.
        var counts = LiteConvergence.EditCounts()
        var gatewayEdits = 0
        let rounds = 6
        for round in 0..<rounds {
            for p in peers {
                for _ in 0..<(3 + Int(rng.next() % 6)) {
                    try LiteConvergence.edit(p.db, tag: "\(p.name)r\(round)", ids: &ids, counts: &counts, rng: &rng)
                }
            }
            for _ in 0..<(1 + Int(rng.next() % 3)) {
                let id = ids[Int(rng.next() % UInt64(ids.count))]
                let current = try await GatewayHTTP.request(.GET, "\(admin)/\(id)")
                guard current.status == 200, var body = try? JSON.parse(current.body) else { continue }
                body.set("v", .number(Double(rng.next() % 1000)))
                body.set("by", .string("gw-r\(round)"))
                let put = try await GatewayHTTP.request(.PUT, "\(admin)/\(id)", body: Array(body.serialized()))
                #expect(put.status == 201, "round \(round): gateway edit of \(id): \(put.status) \(put.text)")
                gatewayEdits += 1
            }
            for _ in 0..<(4 + Int(rng.next() % 5)) {
                let p = peers[Int(rng.next() % UInt64(peers.count))]
                _ = try await sync(p, push: rng.next() % 2 == 0, "round \(round)")
            }
        }

        // Until quiescent: each pass every peer (in a random order) pushes and pulls, then each app resolves the
        // conflicts it sees; a pass that writes and resolves nothing ends it.
        var passes = 0
        var quiescent = false
        var resolutions: [String: Int] = [:]
        while passes < 10 && !quiescent {
            passes += 1
            var moved = 0
            for p in peers.shuffled(using: &rng) {
                moved += try await sync(p, push: true, "pass \(passes)")
                moved += try await sync(p, push: false, "pass \(passes)")
            }
            let winners = try await Self.gatewayWinners(admin)
            for p in peers {
                for id in try LiteConvergence.liteIDs(p.db).sorted() {
                    let resolved =
                        p.wire == .rest
                        ? try Self.resolveOntoWinner(p.db, id)
                        : try Self.resolveTowardsGateway(p.db, id, server: winners[id])
                    if resolved {
                        resolutions[p.name, default: 0] += 1
                        moved += 1
                    }
                }
            }
            quiescent = moved == 0
        }

        // Every peer and the gateway hold the same documents, winners, winning bodies and live leaves.
        let adminEndpoint = try RemoteEndpoint(url: admin, logger: LiteConvergence.quietLogger)
        let gatewayIDs = try await LiteConvergence.endpointIDs(adminEndpoint)
        var allIDs = gatewayIDs
        let idSets = try peers.map { try LiteConvergence.liteIDs($0.db) }
        for s in idSets { allIDs.formUnion(s) }
        #expect(gatewayIDs == allIDs, "seed \(seed): the gateway lacks \(allIDs.subtracting(gatewayIDs).sorted())")
        for (p, s) in zip(peers, idSets) {
            #expect(s == allIDs, "seed \(seed): \(p.name) lacks \(allIDs.subtracting(s).sorted())")
        }
        var mismatches: [String] = []
        var branched = 0
        var deletedWinners = 0
        var localTombstoneWinners = 0
        for id in allIDs.sorted() {
            let g = try await LiteConvergence.gatewayState(admin, id)
            var differ: [String] = []
            var states: [String] = ["  gateway: \(g?.description ?? "absent")"]
            for p in peers {
                let s = try LiteConvergence.liteState(p.db, id)
                states.append("  \(p.name): \(s?.description ?? "absent")")
                guard let s, let g else {
                    if s != g { differ.append(p.name) }
                    continue
                }
                switch p.wire {
                case .rest:
                    if s != g { differ.append(p.name) }
                case .blip:
                    let same =
                        s.winnerDeleted == g.winnerDeleted && s.liveLeaves == g.liveLeaves
                        && (s.winnerDeleted || (s.winner == g.winner && s.body == g.body))
                    if !same { differ.append(p.name) }
                    if same && s.winnerDeleted && s.winner != g.winner { localTombstoneWinners += 1 }
                }
            }
            if let g, g.liveLeaves.count > 1 { differ.append("gateway (\(g.liveLeaves.count) live leaves)") }
            if !differ.isEmpty {
                let who = differ.joined(separator: ", ")
                mismatches.append("\(id) (\(who) differ):\n" + states.joined(separator: "\n"))
            }
            if let g {
                if g.winnerDeleted { deletedWinners += 1 }
                if g.leaves.count > 1 { branched += 1 }
            }
        }
        let elapsed = ContinuousClock.now - started
        print(
            "LiteMixedProtocolConvergenceProcessTests seed \(seed): \(allIDs.count) docs, \(rounds) rounds, \(counts), "
                + "gateway edits \(gatewayEdits), \(syncs) syncs (\(passes) passes to quiesce), \(written) revisions "
                + "written, \(refusedBLIPPushes) BLIP pushes refused as conflicts, resolutions while quiescing "
                + "\(resolutions.sorted { $0.key < $1.key }), \(branched) docs branched on the gateway, "
                + "\(deletedWinners) deleted winners (\(localTombstoneWinners) BLIP-peer copies won by a local "
                + "tombstone), \(elapsed)")
        #expect(quiescent, "seed \(seed): still moving after \(passes) passes")
        #expect(failures.isEmpty, "seed \(seed): replication failures: \(failures.prefix(5))")
        #expect(
            mismatches.isEmpty,
            "seed \(seed): \(mismatches.count) documents differ:\n\(mismatches.prefix(5).joined(separator: "\n"))")
        #expect(branched > 0, "seed \(seed): no document branched on the gateway, so the run proved little")
    }
}
