import SetteeCore
import SetteeDocument
import SetteeJSON
import Synchronization
import Testing

@testable import SetteeGateway

/// Bounded channel history and the other metadata a client can make the gateway keep (issue 71 items 3-4, ADR 0151):
/// the pure rules, then a database on an embedded bucket with a manual clock.
@Suite struct ChannelHistoryRuleTests {
    static func removal(_ seq: UInt64, at: UInt32?) -> ChannelRemoval {
        ChannelRemoval(seq: seq, rev: RevID("1-a")!, deleted: false, removedAt: at)
    }

    @Test func removalsAtOrBelowTheHorizonGoWithoutRaisingIt() {
        // Proves rule 1: a removal no admitted pull can be below is dropped for free.
        let r = ["a": Self.removal(10, at: 100), "b": Self.removal(20, at: 100), "c": Self.removal(30, at: 100)]
        let (kept, raise) = ChannelHistoryRule.prune(r, horizon: 20, now: 100, maxAgeSeconds: 86_400, maxCount: 64)
        #expect(Set(kept.keys) == ["c"])
        #expect(raise == nil)
    }

    @Test func removalsAsOldAsTheIntervalGoAndRaiseTheHorizonToTheNewestOfThem() {
        // Proves rule 2's age half: due exactly at the interval, the horizon raised to the highest dropped sequence;
        // a younger removal, one without a time and one stamped ahead of the clock stay.
        let r = [
            "old": Self.removal(5, at: 1_000), "older": Self.removal(7, at: 500), "young": Self.removal(9, at: 1_500),
            "untimed": Self.removal(3, at: nil), "future": Self.removal(11, at: 9_000),
        ]
        let (kept, raise) = ChannelHistoryRule.prune(r, horizon: 0, now: 2_000, maxAgeSeconds: 1_000, maxCount: 64)
        #expect(Set(kept.keys) == ["young", "untimed", "future"])
        #expect(raise == 7)
        let (none, noRaise) = ChannelHistoryRule.prune(
            r, horizon: 0, now: 1_999, maxAgeSeconds: .infinity, maxCount: 64)
        #expect(none.count == 5 && noRaise == nil)
    }

    @Test func pastTheCountCapTheOldestSequencesGoFirst() {
        // Proves rule 2's count half: five removals, a cap of three: the two lowest sequences go, the horizon rises to
        // the higher of them; ties of sequence are broken by channel name, so the result does not depend on order.
        let r = [
            "e": Self.removal(50, at: nil), "a": Self.removal(10, at: nil), "d": Self.removal(40, at: nil),
            "b": Self.removal(20, at: nil), "c": Self.removal(30, at: nil),
        ]
        let (kept, raise) = ChannelHistoryRule.prune(r, horizon: 0, now: 0, maxAgeSeconds: 86_400, maxCount: 3)
        #expect(Set(kept.keys) == ["c", "d", "e"])
        #expect(raise == 20)
        let tied = ["y": Self.removal(10, at: nil), "x": Self.removal(10, at: nil)]
        #expect(
            Set(ChannelHistoryRule.prune(tied, horizon: 0, now: 0, maxAgeSeconds: 1, maxCount: 1).kept.keys) == ["y"])
    }

    @Test func aRemovalKeepsItsTimeThroughTheStoredForm() throws {
        // Proves `removed_at` round-trips through `_sync.channels` and an entry without it reads as untimed.
        var meta = SyncMeta()
        try meta.tree.add(RevID("1-a")!, parent: nil, deleted: false, body: Array("{}".utf8))
        meta.removals = ["x": Self.removal(4, at: 1_234), "y": Self.removal(5, at: nil)]
        let back = try SyncMeta(json: meta.json())
        #expect(back.removals == meta.removals)
    }

    @Test func theAttachmentCompactionStatusHasSyncGatewaysShape() {
        var s = AttachmentCompactionStatus()
        #expect(s.json()["status"]?.stringValue == "stopped" && s.json()["compact_id"]?.stringValue == "")
        let first = s.start(now: 1_700_000_000)
        let second = s.start(now: 1_700_000_001)
        #expect(first && !second && s.json()["status"]?.stringValue == "running")
        s.markedAttachments = 2
        s.purgedAttachments = 1
        s.running = false
        let j = s.json()
        #expect(j["status"]?.stringValue == "completed" && j["compact_id"]?.stringValue == "1")
        #expect(j["marked_attachments"]?.intValue == 2 && j["purged_attachments"]?.intValue == 1)
        #expect(j["start_time"]?.stringValue == "2023-11-14T22:13:20Z")
    }
}

@Suite struct GatewayBoundedHistoryTests {
    static func open(shared: Bool, clock: ManualWallClock) async throws -> Fixture {
        var o = DatabaseOptions(name: "db")
        o.sharedBucketAccess = shared
        o.metaPurgeIntervalDays = 1
        o.clock = clock
        return try await Fixture.open(o)
    }

    /// Moves `id` to channel `ch` (the default sync function: `channel(doc.channels)`); the new revision.
    static func move(_ db: GatewayDatabase, _ id: String, to ch: String, from rev: RevID?) async throws -> RevID {
        let revMember = rev.map { #""_rev":"\#($0)","# } ?? ""
        return try await db.put(id, body: json(#"{\#(revMember)"channels":["\#(ch)"]}"#), user: nil)
    }

    /// Moves `id` into `c0`, then through `c1`…`c<n>`: the feed's last sequence after the first move (a checkpoint
    /// from before every removal), and the last revision.
    static func moveThrough(_ db: GatewayDatabase, _ id: String, channels n: Int) async throws -> (
        start: ChangesSince, rev: RevID
    ) {
        var rev = try await move(db, id, to: "c0", from: nil)
        let start = try await db.changes(ChangesQuery(), user: nil).lastSeq
        for i in 1...n { rev = try await move(db, id, to: "c\(i)", from: rev) }
        return (start, rev)
    }

    @Test(arguments: [false, true])
    func oldRemovalsArePrunedAfterTheIntervalAndOlderCheckpointsRestart(shared: Bool) async throws {
        // Proves, on the database API: a document that left channels keeps a removal per channel, and a reader of a
        // channel it left gets the `removed` row; once those removals are `meta_purge_interval` old, the document's
        // next write drops them, raising the purge horizon to the newest dropped one first; a pull from below that
        // is refused (410), one from after it goes on; the figures count what is kept and what was pruned.
        let clock = ManualWallClock()
        let f = try await Self.open(shared: shared, clock: clock)
        let (start, moved) = try await Self.moveThrough(f.db, "d", channels: 3)
        var rev = moved
        #expect(f.db.storedFigures().channelHistoryEntries == 3)
        let c0 = try await f.db.changes(ChangesQuery(since: start, channels: ["c0"]), user: nil)
        #expect(c0.rows.map(\.removed) == [["c0"]])
        let beforeLastMove = try await f.db.changes(ChangesQuery(), user: nil).lastSeq

        clock.advance(seconds: 86_400)
        rev = try await Self.move(f.db, "d", to: "c4", from: rev)
        // c0, c1, c2 were a day old: gone; c3 was left just now.
        #expect(f.db.storedFigures().channelHistoryEntries == 1)
        #expect(f.db.channelRemovalsPruned.load(ordering: .relaxed) == 3)
        #expect(throws: GatewayError.self) { try f.db.admitPull(since: start) }
        try f.db.admitPull(since: beforeLastMove)
        try f.db.admitPull(since: .zero)
        await f.close()
    }

    @Test(arguments: [false, true])
    func aDocumentNotWrittenAgainLosesItsDueRemovalsAtTheTombstoneCompaction(shared: Bool) async throws {
        // Proves the at-rest half of item 3: removals go once due even from a document never written again. The
        // compaction leaves young removals; a day later it drops them (the horizon raised to the newest first, so a
        // pull from before them restarts), writing the document back with its revision and sequence (no change is
        // announced), and leaves a document with nothing due untouched; the run's status and figures count them.
        let clock = ManualWallClock()
        let f = try await Self.open(shared: shared, clock: clock)
        let (start, rev) = try await Self.moveThrough(f.db, "d", channels: 2)
        _ = try await Self.move(f.db, "e", to: "c0", from: nil)
        let end = try await f.db.changes(ChangesQuery(), user: nil).lastSeq
        func stored(_ id: String) async throws -> StoredDocument {
            guard case .found(let doc) = try await f.db.load(id) else { throw GatewayError.notFound("\(id) is gone") }
            return doc
        }
        let (d0, e0) = (try await stored("d"), try await stored("e"))
        #expect(d0.meta.removals.keys.sorted() == ["c0", "c1"])

        // The first run drops no removal (none due) and trims no recent sequences (d, written three times, was not
        // idle for a whole run interval yet): nothing is written.
        #expect(d0.meta.recentSequences.count == 3)
        var status = try await GatewayTombstonePurgeTests.compact(f.db)
        #expect(status["channel_history_pruned"]?.intValue == 0 && status["recent_sequences_trimmed"]?.intValue == 0)
        #expect(try await stored("d").cas == d0.cas && f.db.storedFigures().channelHistoryEntries == 2)
        // g is written twice after the first run: still being written at the second, it keeps both.
        let g = try await Self.move(f.db, "g", to: "c9", from: nil)
        _ = try await Self.move(f.db, "g", to: "c9", from: g)
        let gEnd = try await f.db.changes(ChangesQuery(), user: nil).lastSeq

        clock.advance(seconds: 86_400)
        status = try await GatewayTombstonePurgeTests.compact(f.db)
        #expect(
            status["channel_history_pruned"]?.intValue == 2, "\(String(decoding: status.serialized(), as: UTF8.self))")
        // Not written since the first run: its recent sequences are trimmed to its own in the same write; e, written
        // once, has nothing to trim.
        let d1 = try await stored("d")
        #expect(d1.meta.removals.isEmpty && d1.cas != d0.cas && status["recent_sequences_trimmed"]?.intValue == 1)
        let g1 = try await stored("g")
        #expect(d1.meta.recentSequences == [d0.meta.sequence] && g1.meta.recentSequences.count == 2)
        #expect(
            d1.meta.sequence == d0.meta.sequence && d1.meta.tree.winner == rev
                && JSON.object(d1.body) == JSON.object(d0.body))
        #expect(try await stored("e").cas == e0.cas)
        #expect(f.db.storedFigures().channelHistoryEntries == 0)
        #expect(f.db.channelRemovalsPruned.load(ordering: .relaxed) == 2)
        #expect(throws: GatewayError.self) { try f.db.admitPull(since: start) }
        try f.db.admitPull(since: end)
        // Nothing new in the feed, and a reader of a channel the document left no longer gets its `removed` row.
        #expect(try await f.db.changes(ChangesQuery(), user: nil).lastSeq == gEnd)
        let c1 = try await f.db.changes(ChangesQuery(channels: ["c1"]), user: nil)
        #expect(c1.rows.isEmpty)
        await f.close()
    }

    @Test func aDocumentKeepsAtMostTheCapOfRemovals() async throws {
        // Proves the count cap: a document moved through more channels than `gatewayChannelRemovalsPerDocument` keeps
        // exactly that many removals (the newest), and checkpoints from before the dropped ones restart.
        let clock = ManualWallClock()
        let f = try await Self.open(shared: true, clock: clock)
        let cap = Limits.gatewayChannelRemovalsPerDocument
        let (start, _) = try await Self.moveThrough(f.db, "d", channels: cap + 3)
        #expect(f.db.storedFigures().channelHistoryEntries == cap)
        #expect(f.db.channelRemovalsPruned.load(ordering: .relaxed) == 3)
        #expect(throws: GatewayError.self) { try f.db.admitPull(since: start) }
        // The newest removal (left at the last move) is still delivered to a reader of that channel.
        let last = try await f.db.changes(ChangesQuery(channels: ["c\(cap + 2)"]), user: nil)
        #expect(last.rows.map(\.removed) == [["c\(cap + 2)"]])
        await f.close()
    }

    @Test func sessionsCheckpointsOldBodiesAndBlobsAreCounted() async throws {
        // Proves the item-4 figures follow the bucket: a session and a `_local` checkpoint are counted when written
        // and uncounted when removed; old revision bodies and an attachment blob are counted with their bytes, and an
        // attachment compaction after the attachment is dropped sweeps the blob and reports it in its status.
        let f = try await Fixture.open(DatabaseOptions(name: "db", users: ["ann": json(#"{"password":"secret1"}"#)]))
        let session = try await f.db.createSession(user: "ann", ttlSeconds: 60)
        _ = try await f.db.putLocal("checkpoint/abc", json(#"{"seq":1}"#))
        let counted = await eventually { f.db.storedFigures().sessions == 1 && f.db.storedFigures().checkpoints == 1 }
        #expect(counted)
        await f.db.deleteSession(session.id)
        try await f.db.deleteLocal("checkpoint/abc", rev: nil)
        let uncounted = await eventually { f.db.storedFigures().sessions == 0 && f.db.storedFigures().checkpoints == 0 }
        #expect(uncounted)

        let data = "aGVsbG8gd29ybGQ="  // "hello world", 11 bytes
        let r1 = try await f.db.put(
            "a", body: json(#"{"_attachments":{"t.txt":{"content_type":"text/plain","data":"\#(data)"}}}"#), user: nil)
        let blob = await eventually { f.db.storedFigures().attachmentBlobs == 1 }
        #expect(blob && f.db.storedFigures().attachmentBytes == 11)
        _ = try await f.db.put("a", body: json(#"{"_rev":"\#(r1)","v":2}"#), user: nil)
        #expect(f.db.storedFigures().oldBodies >= 1 && f.db.storedFigures().oldBodyBytes > 0)
        // The first revision's body (which references the blob) is an ancestor kept for replicators: still marked.
        _ = try #require(await f.db.compact())
        #expect(f.db.attachmentCompaction.withLock { $0.markedAttachments } == 1)
        _ = try await f.db.purge(["a": ["*"]])
        _ = try #require(await f.db.compact())
        let status = f.db.attachmentCompaction.withLock { $0.json() }
        #expect(status["purged_attachments"]?.intValue == 1 && status["status"]?.stringValue == "completed")
        #expect(f.db.storedFigures().attachmentBlobs == 0 && f.db.storedFigures().attachmentBytes == 0)
        await f.close()
    }
}
