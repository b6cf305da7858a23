import Foundation
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeReplication
import SetteeTestSupport
import Testing

@Suite struct LocalEndpointTests {
    static func pair() throws -> (Database, Database) {
        let dir = TemporaryDirectory.make("lite")
        return (try Database(name: "source", directory: dir), try Database(name: "target", directory: dir))
    }

    /// Proves `_ensure_full_commit` on a Lite database syncs its files instead of answering at once: it succeeds on a
    /// database with unsynced commits (and with no WAL yet), names the database, and fails once the database is
    /// closed (it reaches the storage). Before, it answered the same name whatever the files' state.
    @Test func ensureFullCommitSyncsTheFiles() async throws {
        let (a, b) = try Self.pair()
        defer { try? b.delete() }
        #expect(try await LocalEndpoint(b).ensureFullCommit() == "lite:\(b.uuid)")
        for i in 0..<5 { try a.save(Document(id: "d\(i)", properties: ["i": .number(Double(i))])) }
        #expect(FileManager.default.fileExists(atPath: a.path + "-wal"))
        let endpoint = LocalEndpoint(a)
        #expect(try await endpoint.ensureFullCommit() == "lite:\(a.uuid)")
        try a.makeDurable()
        a.close()
        await #expect(throws: (any Error).self) { _ = try await endpoint.ensureFullCommit() }
        #expect(throws: LiteError.self) { try a.makeDurable() }
        try? a.delete()
    }

    @Test func oneShotReplicationCopiesDocumentsAttachmentsAndResumesFromCheckpoint() async throws {
        // Proves the real Replicator moves documents (with histories, tombstones and attachment bytes)
        // between two local databases through LocalEndpoint, records checkpoints in `_local` docs on
        // both sides, and a second run starts from the checkpoint and copies only the new change.
        let (a, b) = try Self.pair()
        defer {
            try? a.delete()
            try? b.delete()
        }
        let jpeg: [UInt8] = (0..<20_000).map { UInt8(truncatingIfNeeded: $0 &* 13) }
        try a.save(
            Document(
                id: "img", properties: ["type": "image", "timestamp_added": 1],
                attachments: ["image": Blob(data: jpeg, contentType: "image/jpeg")]))
        var img = try #require(try a.document("img"))
        img["timestamp_added"] = 2
        try a.save(img)
        for i in 0..<30 { try a.save(Document(id: "n\(i)", properties: ["i": .number(Double(i))])) }
        try a.delete("n0")
        let push = Replicator(source: LocalEndpoint(a), target: LocalEndpoint(b))
        push.start()
        let status = await push.waitUntilStopped()
        #expect(status.lastError == nil)
        #expect(status.docsWritten == 31)  // img + n0...n29 (n0 as a tombstone)
        #expect(try state(a) == state(b))
        let copy = try #require(try b.document("img"))
        #expect(copy.revision == (try a.document("img"))?.revision)
        #expect(try b.content(of: copy.attachments["image"]!) == jpeg)
        #expect(try b.localDocument(push.replicationID) != nil)
        #expect(try a.localDocument(push.replicationID) != nil)
        try a.save(Document(id: "late", properties: ["x": 1]))
        let again = Replicator(source: LocalEndpoint(a), target: LocalEndpoint(b))
        again.start()
        let s2 = await again.waitUntilStopped()
        #expect(s2.lastError == nil && s2.docsWritten == 1)
        #expect(try b.document("late")?["x"] == 1)
    }

    /// Proves Lite's first-pull rule end to end through `LocalEndpoint` (issue 71: a fresh pull of a database with many
    /// tombstones): a pull into an empty database stores the 20 live documents and none of the 10 the source deleted,
    /// and says how many it skipped; the next run, from its checkpoint, is sent a later deletion of a document it
    /// holds; into a database that held a document, every deletion is pulled as before.
    @Test func aFirstPullIntoAnEmptyDatabaseLeavesOutDeletedDocuments() async throws {
        let (a, b) = try Self.pair()
        let c = try Database(name: "held", directory: TemporaryDirectory.make("lite"))
        defer {
            try? a.delete()
            try? b.delete()
            try? c.delete()
        }
        for i in 0..<30 { try a.save(Document(id: "n\(i)", properties: ["i": .number(Double(i))])) }
        for i in 0..<10 { try a.delete("n\(i)") }
        var options = ReplicatorOptions()
        options.skipsTombstonesIntoEmptyTarget = true
        let pull = Replicator(source: LocalEndpoint(a), target: LocalEndpoint(b), options: options)
        pull.start()
        let first = await pull.waitUntilStopped()
        #expect(first.lastError == nil && first.docsWritten == 20)
        #expect(pull.tombstonesSkipped == 10)
        #expect(try b.changes(since: .zero).count == 20)
        try a.delete("n15")
        let again = Replicator(source: LocalEndpoint(a), target: LocalEndpoint(b), options: options)
        again.start()
        let second = await again.waitUntilStopped()
        #expect(second.lastError == nil && second.docsWritten == 1 && again.tombstonesSkipped == 0)
        #expect(try b.document("n15") == nil && b.documentCount == 19)
        // A database that held something is sent every deletion.
        try c.save(Document(id: "mine", properties: ["x": 1]))
        let held = Replicator(source: LocalEndpoint(a), target: LocalEndpoint(c), options: options)
        held.start()
        let third = await held.waitUntilStopped()
        #expect(third.lastError == nil && third.docsWritten == 30 && held.tombstonesSkipped == 0)
    }

    @Test func continuousPullDeliversNewChangesAndFiltersByDocIDs() async throws {
        // Proves a continuous replication keeps following the source (the local feed wakes on new
        // changes), that the target's change stream reports the writes as external, and that a
        // doc-ids filter copies only the chosen documents.
        let (a, b) = try Self.pair()
        defer {
            try? a.delete()
            try? b.delete()
        }
        let changes = b.changes
        let pull = Replicator(
            source: LocalEndpoint(a, feedTimeoutMs: 500), target: LocalEndpoint(b),
            options: ReplicatorOptions(continuous: true))
        pull.start()
        try await Task.sleep(for: .milliseconds(200))
        try a.save(Document(id: "live1", properties: ["v": 1]))
        var it = changes.makeAsyncIterator()
        let c = try #require(await it.next())
        #expect(c.documentIDs == ["live1"] && c.isExternal)
        try a.save(Document(id: "live2", properties: ["v": 2]))
        let c2 = try #require(await it.next())
        #expect(c2.documentIDs == ["live2"])
        await pull.stop()

        let c3db = try Database(name: "chosen", directory: TemporaryDirectory.make("lite"))
        defer { try? c3db.delete() }
        try a.save(Document(id: "photo1", properties: ["v": 3]))
        let send = Replicator(
            source: LocalEndpoint(a), target: LocalEndpoint(c3db),
            options: ReplicatorOptions(filter: .docIDs(["photo1", "live2"])))
        send.start()
        let s = await send.waitUntilStopped()
        #expect(s.lastError == nil)
        #expect(Set(try c3db.allDocuments().compactMap(\.id)) == ["photo1", "live2"])
    }

    @Test func endpointAnswersProtocolShapes() async throws {
        // Proves the endpoint's answers have the protocol's shapes: info's update_seq, changes rows with
        // every leaf and a last_seq, bulkGet errors for unknown revisions, channel filtering by the
        // documents' `channels` property, and new_edits=true uploads creating revisions.
        let (a, _) = try Self.pair()
        defer { try? a.delete() }
        let ep = LocalEndpoint(a, feedTimeoutMs: 100)
        try a.save(Document(id: "x", properties: ["channels": ["public"]]))
        try a.save(Document(id: "y", properties: ["channels": "private"]))
        #expect(try await ep.info()["update_seq"] == 2)
        let all = try await ep.changes(since: nil, limit: 10, feed: .normal, filter: nil, heartbeatMs: nil)
        #expect(all.rows.map(\.id) == ["x", "y"] && all.lastSeq == SequenceID(2))
        let pub = try await ep.changes(
            since: "0", limit: 10, feed: .normal, filter: .channels(["public"]), heartbeatMs: nil)
        #expect(pub.rows.map(\.id) == ["x"])
        let empty = try await ep.changes(since: "2", limit: 10, feed: .longpoll, filter: nil, heartbeatMs: nil)
        #expect(empty.rows.isEmpty && empty.lastSeq == SequenceID(2))
        let missing = try await ep.bulkGet([BulkGetRequest(id: "x", rev: "9-abc")])
        #expect(missing.first?.error?.status == 404)
        let rows = try await ep.bulkDocs(
            [FetchedRevision(id: "z", rev: "", body: ["_id": "z", "v": 1])], newEdits: true)
        #expect(rows.first?["ok"] == true)
        #expect(try a.document("z")?["v"] == 1)
        await #expect(throws: ReplicationError.self) {
            _ = try await ep.changes(
                since: nil, limit: 1, feed: .normal, filter: .named("f", parameters: [:]), heartbeatMs: nil)
        }
    }

    @Test func pushedImagesAppearSortedInTheOtherLiveListWithinOneSecond() async throws {
        // Proves seed 000's flow between two local databases: images attached in one database and pushed
        // by a one-shot replication appear byte-identical, sorted by `timestamp_added`, in the other
        // database's live query within 1 s of the push completing.
        let (console, phone) = try Self.pair()
        defer {
            try? console.delete()
            try? phone.delete()
        }
        let images = phone.view("images", version: "1") { doc, emit in
            if doc.type == "image" { emit(doc["timestamp_added"], nil) }
        }
        var live = images.query(descending: true, includeDocs: true).live().makeAsyncIterator()
        #expect(try #require(await live.next()).isEmpty)
        var photos: [[UInt8]] = []
        for i in 0..<5 {
            let bytes = (0..<(3000 + i)).map { UInt8(truncatingIfNeeded: $0 &* (i + 3)) }
            photos.append(bytes)
            try console.save(
                Document(
                    properties: ["type": "image", "timestamp_added": .number(Double(1000 + i))],
                    attachments: ["image": Blob(data: bytes, contentType: "image/jpeg")]))
        }
        let push = Replicator(source: LocalEndpoint(console), target: LocalEndpoint(phone))
        push.start()
        #expect(await push.waitUntilStopped().lastError == nil)
        let pushed = ContinuousClock.now
        var rows: [QueryRow] = []
        while rows.count < 5, ContinuousClock.now - pushed < .seconds(1) {
            rows = try #require(await live.next())
        }
        #expect(ContinuousClock.now - pushed < .seconds(1))
        #expect(rows.map(\.key) == [1004, 1003, 1002, 1001, 1000])
        for (row, expected) in zip(rows, photos.reversed()) {
            let blob = try #require(row.document?.attachments["image"])
            #expect(try phone.content(of: blob) == expected)
        }
    }

    @Test func appFacingReplicatorShape() throws {
        // Proves the issue's `Replicator(db, .pull(from:), ...)` shape wires a LocalEndpoint and a remote
        // endpoint the right way round, strips credentials from the replication identity, applies the
        // filter, and refuses a non-HTTP URL.
        let (a, _) = try Self.pair()
        defer { try? a.delete() }
        let pull = try Replicator(
            a, .pull(from: "http://jane:secret@127.0.0.1:4984/demo"), continuous: true, channels: ["_public"])
        #expect(pull.target.identity == "lite:\(a.uuid)")
        #expect(!pull.source.identity.contains("secret"))
        #expect(pull.options.continuous && pull.options.filter == .channels(["_public"]))
        let push = try Replicator(a, .push(to: "http://127.0.0.1:4984/demo"), documentIDs: ["photo1"])
        #expect(push.source.identity == "lite:\(a.uuid)")
        #expect(push.options.filter == .docIDs(["photo1"]))
        #expect(throws: ReplicationError.self) { try Replicator(a, .push(to: "ftp://x/db")) }
    }
}
