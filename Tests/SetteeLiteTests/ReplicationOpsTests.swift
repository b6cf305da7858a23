import Foundation
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeTestSupport
import Testing

/// A minimal one-shot replicator over the database's protocol operations (changes since a checkpoint
/// in a `_local` doc, `_revs_diff`, revisions with `_revisions` and `atts_since`, `new_edits=false`).
/// Returns how many revisions it copied.
@discardableResult
func replicateOnce(from source: Database, to target: Database) throws -> Int {
    let checkpoint = "test-from-\(source.uuid)"
    let since = SeqNo(UInt64(try target.localDocument(checkpoint)?["last_seq"]?.intValue ?? 0))
    let changes = try source.changes(since: since)
    var request: [String: [String]] = [:]
    for c in changes { request[c.id] = c.leaves.map(\.description) }
    let diff = try target.revsDiff(request)
    var revisions: [ReplicatedRevision] = []
    for (id, entry) in diff.objectValue ?? [] {
        let missing = (entry["missing"]?.arrayValue ?? []).compactMap { $0.stringValue.flatMap(RevID.init) }
        let ancestors = (entry["possible_ancestors"]?.arrayValue ?? []).compactMap {
            $0.stringValue.flatMap(RevID.init)
        }
        for rev in missing {
            if let r = try source.replicatedRevision(id, revision: rev, attsSince: ancestors) { revisions.append(r) }
        }
    }
    let rows = try target.bulkInsert(revisions)
    #expect(rows.allSatisfy { $0["error"] == nil }, "bulk insert rows: \(rows.map(\.text))")
    if let last = changes.last {
        try target.putLocalDocument(checkpoint, ["last_seq": .number(Double(last.sequence.rawValue))])
    }
    return revisions.count
}

/// Every document's (winner, sorted live conflicts), for convergence checks.
func state(_ db: Database) throws -> [String: String] {
    var out: [String: String] = [:]
    for doc in try db.allDocuments(AllDocsQuery(includeDeleted: true)) {
        let tree = try #require(try db.revisionTree(of: doc.id!))
        out[doc.id!] = "\(tree.winner!) \(tree.conflicts.sorted().map(\.description))"
    }
    return out
}

@Suite struct ReplicationOpsTests {
    @Test func pushCopiesDocumentsAttachmentsAndCheckpoints() throws {
        // Proves the protocol operations move documents with their revision ids, histories and
        // attachment bytes to another database, and a second run copies nothing (checkpoint + revs_diff).
        let a = try Database(name: "a", directory: TemporaryDirectory.make("lite"))
        let b = try Database(name: "b", directory: TemporaryDirectory.make("lite"))
        defer {
            try? a.delete()
            try? b.delete()
        }
        let jpeg: [UInt8] = (0..<5000).map { UInt8(truncatingIfNeeded: $0 * 7) }
        try a.save(
            Document(
                id: "img", properties: ["type": "image"],
                attachments: ["image": Blob(data: jpeg, contentType: "image/jpeg")]))
        var d = try #require(try a.document("img"))
        d["title"] = "two"
        try a.save(d)
        try a.save(Document(id: "gone", properties: ["x": 1]))
        try a.delete("gone")
        #expect(try replicateOnce(from: a, to: b) == 2)
        #expect(try state(a) == state(b))
        let copy = try #require(try b.document("img"))
        #expect(copy.revision == (try a.document("img"))?.revision)
        #expect(try b.content(of: copy.attachments["image"]!) == jpeg)
        #expect(try b.revisionTree(of: "img")?.count == 2)
        #expect(try b.document("gone") == nil)
        #expect(try replicateOnce(from: a, to: b) == 0)
    }

    @Test func attsSinceSendsStubsForAttachmentsTheTargetHas() throws {
        // Proves a revision fetched with `atts_since` naming an ancestor the target has carries the
        // unchanged attachment as a stub, and the target accepts it because it has the bytes.
        let a = try Database(name: "a", directory: TemporaryDirectory.make("lite"))
        let b = try Database(name: "b", directory: TemporaryDirectory.make("lite"))
        defer {
            try? a.delete()
            try? b.delete()
        }
        try a.save(Document(id: "p", attachments: ["f": Blob(data: [1, 2, 3], contentType: "text/plain")]))
        try replicateOnce(from: a, to: b)
        var p = try #require(try a.document("p"))
        p["edited"] = true
        let p2 = try a.put(p)
        let diff = try b.revsDiff(["p": [p2.revision!.description]])
        let ancestor = try #require(
            diff["p"]?["possible_ancestors"]?.arrayValue?.first?.stringValue.flatMap(RevID.init))
        let fetched = try #require(try a.replicatedRevision("p", revision: p2.revision!, attsSince: [ancestor]))
        #expect(fetched.body["_attachments"]?["f"]?["stub"] == true)
        #expect(fetched.attachments.isEmpty)
        #expect(fetched.body["_revisions"]?["ids"]?.arrayValue?.count == 2)
        let full = try #require(try a.replicatedRevision("p", revision: p2.revision!, follows: false))
        #expect(full.body["_attachments"]?["f"]?["data"] == "AQID")
        #expect(try b.bulkInsert([fetched]).first?["error"] == nil)
        #expect(try b.document("p")?["edited"] == true)
        #expect(try b.content(of: (try b.document("p"))!.attachments["f"]!) == [1, 2, 3])
        // A stub for bytes the target lacks is refused for that revision only.
        let c = try Database(name: "c", directory: TemporaryDirectory.make("lite"))
        defer { try? c.delete() }
        let rows = try c.bulkInsert([fetched])
        #expect(rows.first?["error"] == "bad_request")
    }

    @Test func aRevisionKnownOnlyAsHistoryIsNotTakenToHoldItsAttachments() throws {
        // Regression (LiteConvergenceProcessTests seed 8906530): b learns 2 only as the history of a's
        // tombstone 3, so it never holds 2's attachment. c edits 2 into a sibling 3 that keeps the
        // attachment (revpos 1). b's _revs_diff must not offer 2 as a possible ancestor, or c sends the
        // attachment as a stub and b refuses the revision ("a stub for bytes this database lacks").
        let a = try Database(name: "a", directory: TemporaryDirectory.make("lite"))
        let b = try Database(name: "b", directory: TemporaryDirectory.make("lite"))
        let c = try Database(name: "c", directory: TemporaryDirectory.make("lite"))
        defer {
            try? a.delete()
            try? b.delete()
            try? c.delete()
        }
        try a.save(Document(id: "p", attachments: ["f": Blob(data: [7, 8, 9], contentType: "x/y")]))
        var p = try #require(try a.document("p"))
        p["v"] = 2
        let second = try #require(try a.put(p).revision)
        try replicateOnce(from: a, to: c)
        let tombstone = try a.delete("p")
        let bare = try #require(try a.replicatedRevision("p", revision: tombstone))
        #expect(bare.attachments.isEmpty)
        #expect(try b.bulkInsert([bare]).first?["error"] == nil)
        #expect(try b.revisionTree(of: "p")?.contains(second) == true)

        var sibling = try #require(try c.document("p"))
        sibling["v"] = 3
        let third = try #require(try c.put(sibling).revision)
        let diff = try b.revsDiff(["p": [third.description]])
        let offered = (diff["p"]?["possible_ancestors"]?.arrayValue ?? []).compactMap {
            $0.stringValue.flatMap(RevID.init)
        }
        #expect(!offered.contains(second), "offered \(offered)")
        let fetched = try #require(try c.replicatedRevision("p", revision: third, attsSince: offered))
        #expect(fetched.attachments["f"] == [7, 8, 9])
        let rows = try b.bulkInsert([fetched])
        #expect(rows.first?["error"] == nil, "\(rows.map(\.text))")
        let leaf = try #require(try b.replicatedRevision("p", revision: third, follows: false))
        #expect(leaf.body["_attachments"]?["f"]?["data"] == "BwgJ")
    }

    @Test func randomisedEditsConvergeAcrossThreeDatabases() throws {
        // Proves three databases editing the same documents while disconnected, then replicating in a
        // random order until quiet, end with identical winners and conflict sets (seed printed).
        let seed = UInt64.random(in: 1...UInt64.max >> 1)
        print("ReplicationOpsTests convergence seed: \(seed)")
        var rng = SplitMix64(seed: seed)
        let dir = TemporaryDirectory.make("lite")
        let dbs = try (0..<3).map { try Database(name: "peer\($0)", directory: dir) }
        defer { for db in dbs { try? db.delete() } }
        for round in 0..<4 {
            for (i, db) in dbs.enumerated() {
                for _ in 0..<8 {
                    let id = "doc\(Int.random(in: 0..<6, using: &rng))"
                    if var doc = try db.document(id) {
                        if Int.random(in: 0..<5, using: &rng) == 0 {
                            try db.delete(id)
                        } else {
                            doc["v"] = .string("r\(round)-p\(i)-\(Int.random(in: 0..<1000, using: &rng))")
                            try db.save(doc)
                        }
                    } else if try db.revisionTree(of: id) == nil || Bool.random(using: &rng) {
                        // Creating (or re-creating over a tombstone) on several peers makes conflicts.
                        _ = try? db.save(Document(id: id, properties: ["v": .string("new-p\(i)")]))
                    }
                }
            }
            // Random pairwise syncs, then a full mesh until nothing moves.
            for _ in 0..<3 {
                let from = Int.random(in: 0..<3, using: &rng)
                let to = (from + Int.random(in: 1..<3, using: &rng)) % 3
                try replicateOnce(from: dbs[from], to: dbs[to])
            }
        }
        var moved = 1
        var passes = 0
        while moved > 0 {
            moved = 0
            for from in 0..<3 {
                for to in 0..<3 where to != from { moved += try replicateOnce(from: dbs[from], to: dbs[to]) }
            }
            passes += 1
            #expect(passes < 10, "seed \(seed): replication did not quiesce")
            if passes >= 10 { break }
        }
        let s0 = try state(dbs[0])
        #expect(s0 == (try state(dbs[1])), "seed \(seed)")
        #expect(s0 == (try state(dbs[2])), "seed \(seed)")
        #expect(!s0.isEmpty)
    }
}
