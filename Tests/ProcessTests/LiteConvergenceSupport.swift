import Foundation
import Logging
import NIOHTTP1
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeReplication

#if canImport(Glibc)
    import Glibc
#endif

/// What convergence compares for one document on one database: its leaves (deleted ones included), the live ones
/// among them, the winning revision and its body (canonical properties plus attachment digests).
struct ConvergedState: Equatable, CustomStringConvertible {
    var leaves: [String]
    var liveLeaves: [String]
    var winner: String
    var winnerDeleted: Bool
    var body: String

    var description: String {
        "winner \(winner)\(winnerDeleted ? " (deleted)" : "") leaves \(leaves) live \(liveLeaves) body \(body)"
    }
}

enum LiteConvergence {
    /// Replicator logs at warning and above only (a convergence run makes hundreds of replications).
    static let quietLogger: Logger = {
        var logger = Logger(label: "settee.test.liteconv")
        logger.logLevel = .warning
        return logger
    }()

    /// JSON text with object members sorted by name at every level, so equal bodies compare equal.
    static func canonical(_ json: JSON) -> String {
        func sorted(_ j: JSON) -> JSON {
            switch j {
            case .object(let members): return .object(members.sorted { $0.0 < $1.0 }.map { ($0.0, sorted($0.1)) })
            case .array(let items): return .array(items.map(sorted))
            default: return j
            }
        }
        return sorted(json).text
    }

    /// The body a winner shows: user properties and `name -> digest` of its attachments.
    static func bodyText(properties: JSON, attachmentDigests: [String: String]) -> String {
        let atts = JSON.object(attachmentDigests.sorted { $0.key < $1.key }.map { ($0.key, JSON.string($0.value)) })
        return canonical(properties) + " atts " + atts.text
    }

    /// The state of `id` in a Lite database; nil when the database does not know the document. The body
    /// notes attachment bytes that the database lacks.
    static func liteState(_ db: Database, _ id: String) throws -> ConvergedState? {
        guard let tree = try db.revisionTree(of: id), let winner = tree.winner else { return nil }
        var body = "deleted"
        if !tree.winnerIsDeleted {
            if let doc = try db.document(id, revision: winner) {
                body = bodyText(properties: doc.properties, attachmentDigests: doc.attachments.mapValues(\.digest))
                for (name, blob) in doc.attachments where try db.attachmentData(digest: blob.digest) == nil {
                    body += " [bytes of \(name) missing]"
                }
            } else {
                body = "winner body missing"
            }
        }
        return ConvergedState(
            leaves: tree.leaves.map(\.description).sorted(),
            liveLeaves: tree.leaves.filter { !tree.isDeleted($0) }.map(\.description).sorted(),
            winner: winner.description, winnerDeleted: tree.winnerIsDeleted, body: body)
    }

    /// The state of `id` on the gateway (admin port): `open_revs=all` gives every leaf and its body; the
    /// winner follows CouchDB's rule and must be what a plain `GET` answers (404 when it is deleted).
    static func gatewayState(_ dbURL: String, _ id: String) async throws -> ConvergedState? {
        let escaped = PercentEncoding.encode(id)
        let reply = try await GatewayHTTP.request(
            .GET, "\(dbURL)/\(escaped)?open_revs=all", headers: [("Accept", "application/json")])
        if reply.status == 404 { return nil }
        guard reply.status == 200, let rows = try JSON.parse(reply.body).arrayValue else {
            throw HarnessError("open_revs=all for \(id): \(reply.status) \(reply.text)")
        }
        var leaves: [(rev: RevID, deleted: Bool, body: JSON?)] = []
        for row in rows {
            if let ok = row["ok"], let rev = ok["_rev"]?.stringValue.flatMap(RevID.init) {
                leaves.append((rev, ok["_deleted"]?.boolValue ?? false, ok))
            } else if let missing = row["missing"]?.stringValue.flatMap(RevID.init) {
                leaves.append((missing, false, nil))
            }
        }
        let live = leaves.filter { !$0.deleted }
        guard let win = (live.isEmpty ? leaves : live).max(by: { $0.rev < $1.rev }) else { return nil }
        var body = "deleted"
        if !win.deleted {
            if let b = win.body {
                var props: [(String, JSON)] = []
                for (k, v) in b.objectValue ?? [] where !k.hasPrefix("_") { props.append((k, v)) }
                var digests: [String: String] = [:]
                for (name, stub) in b["_attachments"]?.objectValue ?? [] {
                    digests[name] = stub["digest"]?.stringValue ?? "?"
                }
                body = bodyText(properties: .object(props), attachmentDigests: digests)
            } else {
                body = "winner body missing"
            }
        }
        // The gateway's own winner must agree with the rule.
        let plain = try await GatewayHTTP.request(.GET, "\(dbURL)/\(escaped)")
        if win.deleted {
            if plain.status != 404 { body += " [GET answered \(plain.status), expected 404]" }
        } else if plain.status != 200 {
            body += " [GET answered \(plain.status)]"
        } else if let rev = try JSON.parse(plain.body)["_rev"]?.stringValue, rev != win.rev.description {
            body += " [GET winner \(rev)]"
        }
        return ConvergedState(
            leaves: leaves.map(\.rev.description).sorted(), liveLeaves: live.map(\.rev.description).sorted(),
            winner: win.rev.description, winnerDeleted: win.deleted, body: body)
    }

    /// Every document id a Lite database has a change for (deleted ones included).
    static func liteIDs(_ db: Database) throws -> Set<String> {
        Set(try db.changes(since: SeqNo(0), limit: 1_000_000).map(\.id))
    }

    /// Every document id in an endpoint's `_changes` (user rows left out).
    static func endpointIDs(_ endpoint: any ReplicationEndpoint) async throws -> Set<String> {
        var ids = Set<String>()
        var since: String? = nil
        while true {
            let batch = try await endpoint.changes(
                since: since, limit: 1000, feed: .normal, filter: nil, heartbeatMs: nil)
            for row in batch.rows where !row.isUserRow { ids.insert(row.id) }
            guard batch.rows.count == 1000, let last = batch.lastSeq else { break }
            since = last.description
        }
        return ids
    }

    /// Runs a one-shot replicator to its end (stopped after `timeout` if it keeps retrying).
    static func replicate(_ r: Replicator, timeout: Duration = .seconds(60)) async -> ReplicationStatus {
        r.start()
        let watchdog = Task {
            try await Task.sleep(for: timeout)
            await r.stop()
        }
        let status = await r.waitUntilStopped()
        watchdog.cancel()
        return status
    }

    /// Runs one one-shot replication between two endpoints to its end (short backoff, quiet logs; stopped after
    /// `timeout` if it keeps retrying).
    static func replicate(
        _ source: any ReplicationEndpoint, _ target: any ReplicationEndpoint, timeout: Duration = .seconds(30)
    ) async -> ReplicationStatus {
        await replicate(
            Replicator(
                source: source, target: target, options: ReplicatorOptions(backoffInitialMs: 20, backoffMaxMs: 500),
                logger: quietLogger),
            timeout: timeout)
    }

    static func randomBytes(_ count: Int, _ rng: inout SplitMix64) -> [UInt8] {
        (0..<count).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
    }

    /// The common starting set of the convergence tests: `doc-0` … `doc-19`, each `{"n": i, "v": 0}`, every fourth
    /// with a 1,500-byte random `photo` attachment drawn from `rng`.
    static func seedDocuments(_ rng: inout SplitMix64) -> [Document] {
        (0..<20).map { n in
            var doc = Document(id: "doc-\(n)", properties: ["n": .number(Double(n)), "v": 0])
            if n % 4 == 0 {
                doc.attachments["photo"] = Blob(data: randomBytes(1500, &rng), contentType: "image/x")
            }
            return doc
        }
    }

    struct EditCounts: CustomStringConvertible {
        var updates = 0, deletes = 0, creates = 0, recreates = 0, resolves = 0, attachments = 0
        var description: String {
            "updates \(updates) deletes \(deletes) creates \(creates) recreates \(recreates) "
                + "resolves \(resolves) attachment-adds \(attachments)"
        }
    }

    /// One random local edit on `db` while it is disconnected: a create (a third with an attachment), an update
    /// (sometimes adding, replacing or removing an attachment), a delete, a re-creation of a deleted document, or a
    /// resolution of a conflict onto its first live leaf; documents not replicated here yet are left alone.
    static func edit(
        _ db: Database, tag: String, ids: inout [String], counts: inout EditCounts, rng: inout SplitMix64
    ) throws {
        let roll = Int(rng.next() % 100)
        if roll < 12 {
            let id = "new-\(tag)-\(ids.count)"
            var doc = Document(id: id, properties: ["v": .number(Double(rng.next() % 1000)), "by": .string(tag)])
            if rng.next() % 3 == 0 {
                doc.attachments["a"] = Blob(data: randomBytes(200 + Int(rng.next() % 2000), &rng), contentType: "x/y")
                counts.attachments += 1
            }
            try db.save(doc)
            ids.append(id)
            counts.creates += 1
            return
        }
        let id = ids[Int(rng.next() % UInt64(ids.count))]
        guard let tree = try db.revisionTree(of: id) else { return }  // not replicated here yet
        if tree.winnerIsDeleted {
            guard roll < 50 else { return }
            try db.save(
                Document(id: id, properties: ["v": .number(Double(rng.next() % 1000)), "reborn": .string(tag)]))
            counts.recreates += 1
            return
        }
        if roll < 24 {
            try db.delete(id)
            counts.deletes += 1
            return
        }
        if roll < 34 {
            let leaves = try db.conflicts(of: id)
            if leaves.count > 1 {
                var merged = leaves[0]
                merged["merged_by"] = .string(tag)
                _ = try db.resolve(merged)
                counts.resolves += 1
                return
            }
        }
        guard var doc = try db.document(id) else { return }
        doc["v"] = .number(Double(rng.next() % 1000))
        doc["by"] = .string(tag)
        let attRoll = rng.next() % 10
        if attRoll < 2 {
            let name = "att\(rng.next() % 3)"
            doc.attachments[name] = Blob(data: randomBytes(100 + Int(rng.next() % 3000), &rng), contentType: "x/y")
            counts.attachments += 1
        } else if attRoll == 2, let name = doc.attachments.keys.sorted().first {
            doc.attachments[name] = nil
        }
        _ = try db.put(doc)
        counts.updates += 1
    }
}
