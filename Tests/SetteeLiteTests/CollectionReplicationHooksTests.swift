import Foundation
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeReplication
import Synchronization
import Testing

/// Per-collection push/pull filter closures and conflict resolvers (Couchbase Lite 3.1's `CollectionConfiguration`,
/// docs/adr/0152), between two local databases.
@Suite struct CollectionReplicationHooksTests {
    /// What a resolver was asked, for the test to look at.
    final class Asked: Sendable {
        let conflicts = Mutex<[Conflict]>([])
    }

    /// c1 pushes only documents with `push: true` and refuses pulled ones with `secret: true`, no resolver; c2 has no
    /// filter and a resolver that merges both sides' `v`.
    static func configuration(target: ReplicationTarget, c1: DatabaseCollection, c2: DatabaseCollection, asked: Asked)
        -> ReplicatorConfiguration
    {
        var config = ReplicatorConfiguration(target: target)
        config.addCollection(
            c1,
            configuration: CollectionConfiguration(
                pushFilter: { doc, _ in doc["push"] == .bool(true) },
                pullFilter: { doc, flags in flags.contains(.deleted) || doc["secret"] != .bool(true) }))
        config.addCollection(
            c2,
            configuration: CollectionConfiguration(conflictResolver: { conflict in
                asked.conflicts.withLock { $0.append(conflict) }
                var merged = conflict.remoteDocument ?? Document(id: conflict.documentID)
                let local = conflict.localDocument?["v"]?.stringValue ?? "-"
                let remote = conflict.remoteDocument?["v"]?.stringValue ?? "-"
                merged["v"] = .string("\(local)+\(remote)")
                return merged
            }))
        return config
    }

    static func doc(_ id: String, _ props: [(String, JSON)]) -> Document {
        var d = Document(id: id)
        for (k, v) in props { d[k] = v }
        return d
    }

    static func ids(_ c: DatabaseCollection) throws -> Set<String> { Set(try c.allDocuments().compactMap(\.id)) }

    @Test func filtersAndResolversApplyToTheirOwnCollectionOnly() async throws {
        // Proves: c1's push filter keeps `push: false` documents home and its pull filter refuses `secret` ones
        // (counted as write failures of c1's pull, not asked for again); c2, with neither, crosses everything; a
        // conflict a pull makes in c2 is resolved by c2's resolver (local and remote as the resolver saw them, one
        // live leaf left, the merge a child of the remote revision) while the same conflict in c1, which has no
        // resolver, stays in the tree.
        let a = try CollectionsTests.db("hooks-a")
        let b = try CollectionsTests.db("hooks-b")
        defer {
            try? a.delete()
            try? b.delete()
        }
        let (a1, a2) = (try a.createCollection("c1", scope: "s"), try a.createCollection("c2", scope: "s"))
        let (b1, b2) = (try b.createCollection("c1", scope: "s"), try b.createCollection("c2", scope: "s"))
        try a1.save(Self.doc("p1", [("push", true)]))
        try a1.save(Self.doc("p2", [("push", false)]))
        try b1.save(Self.doc("q1", []))
        try b1.save(Self.doc("q2", [("secret", true)]))
        try a2.save(Self.doc("k", [("v", "base")]))
        try b2.save(Self.doc("r", []))
        let asked = Asked()
        var config = Self.configuration(target: .database(b), c1: a1, c2: a2, asked: asked)
        let first = try CollectionsReplicator(config)
        first.start()
        let statuses = await first.waitUntilStopped()
        for (r, s) in zip(first.replicators, statuses) {
            #expect(s.lastError == nil, "\(s)")
            let refused = r.collection == "s.c1" && r.type == .pull ? 1 : 0
            #expect(s.docWriteFailures == refused, "\(r.collection) \(r.type): \(s)")
        }
        #expect(try Self.ids(b1) == ["p1", "q1", "q2"])
        #expect(try Self.ids(a1) == ["p1", "p2", "q1"])
        #expect(try Self.ids(a2) == ["k", "r"])
        #expect(try Self.ids(b2) == ["k", "r"])

        // The same document changed on both sides, in both collections; then a pull only.
        for (local, remote, id) in [(a1, b1, "p1"), (a2, b2, "k")] {
            var mine = try #require(try local.document(id))
            mine["v"] = "local"
            try local.save(mine)
            var theirs = try #require(try remote.document(id))
            theirs["v"] = "remote"
            try remote.save(theirs)
        }
        let remoteK = try #require(try b2.document("k")?.revision)
        config.replicatorType = .pull
        let second = try CollectionsReplicator(config)
        second.start()
        for s in await second.waitUntilStopped() { #expect(s.lastError == nil && s.docWriteFailures == 0, "\(s)") }
        #expect(try a1.conflicts(of: "p1").count == 2)
        let resolved = try a2.conflicts(of: "k")
        #expect(resolved.count == 1)
        #expect(resolved.first?["v"] == .string("local+remote"))
        #expect(
            try a2.revisionTree(of: "k")?.history(of: try #require(resolved.first?.revision)).dropFirst().first
                == remoteK)
        let seen = asked.conflicts.withLock { $0 }
        #expect(seen.count == 1)
        #expect(seen.first?.documentID == "k")
        #expect(seen.first?.localDocument?["v"] == .string("local"))
        #expect(seen.first?.remoteDocument?["v"] == .string("remote"))
    }

    @Test func aResolverAnsweringNilDeletesAndTheRemoteUnchangedKeepsIt() async throws {
        // Proves the two other answers: nil deletes the document (a tombstone, no live leaf), and the pulled document
        // itself keeps the remote revision as the only live leaf without making a new one.
        let a = try CollectionsTests.db("resolve-a")
        let b = try CollectionsTests.db("resolve-b")
        defer {
            try? a.delete()
            try? b.delete()
        }
        let (a1, b1) = (try a.createCollection("c1", scope: "s"), try b.createCollection("c1", scope: "s"))
        for id in ["gone", "theirs"] { try a1.save(Self.doc(id, [("v", "base")])) }
        var config = ReplicatorConfiguration(target: .database(b))
        config.addCollection(
            a1,
            configuration: CollectionConfiguration(conflictResolver: { c in
                c.documentID == "gone" ? nil : c.remoteDocument
            }))
        config.replicatorType = .push
        let push = try CollectionsReplicator(config)
        push.start()
        _ = await push.waitUntilStopped()
        for id in ["gone", "theirs"] {
            var mine = try #require(try a1.document(id))
            mine["v"] = "local"
            try a1.save(mine)
            var other = try #require(try b1.document(id))
            other["v"] = "remote"
            try b1.save(other)
        }
        let remoteRev = try #require(try b1.document("theirs")?.revision)
        config.replicatorType = .pull
        let pull = try CollectionsReplicator(config)
        pull.start()
        for s in await pull.waitUntilStopped() { #expect(s.lastError == nil && s.docWriteFailures == 0, "\(s)") }
        #expect(try a1.document("gone") == nil)
        #expect(try a1.conflicts(of: "gone").isEmpty)
        #expect(try a1.conflicts(of: "theirs").map(\.revision) == [remoteRev])
        #expect(try a1.document("theirs")?["v"] == .string("remote"))
    }
}
