import SetteeCore
import SetteeDocument
import SetteeJSON
import Synchronization
import Testing

@testable import SetteeGateway

/// Tombstone purging (issue 71 item 2, ADR 0145): the pure rules, then a database on an embedded bucket with a manual
/// clock, in both layouts.
@Suite struct GatewayTombstonePurgeRuleTests {
    @Test func aTombstoneIsDueOnceItsDeletionIsAsOldAsTheInterval() {
        // Proves the age rule: due exactly at the interval, not a second before; never for a live winner, a tombstone
        // without a deletion time, or a deletion time ahead of the clock.
        let day = 86_400.0
        #expect(
            TombstonePurgeRule.isDue(
                winnerDeleted: true, tombstonedAt: 1_000, now: 1_000 + 86_400, intervalSeconds: day))
        #expect(
            !TombstonePurgeRule.isDue(
                winnerDeleted: true, tombstonedAt: 1_000, now: 1_000 + 86_399, intervalSeconds: day))
        #expect(
            !TombstonePurgeRule.isDue(winnerDeleted: false, tombstonedAt: 1_000, now: 900_000, intervalSeconds: day))
        #expect(!TombstonePurgeRule.isDue(winnerDeleted: true, tombstonedAt: nil, now: 900_000, intervalSeconds: day))
        #expect(!TombstonePurgeRule.isDue(winnerDeleted: true, tombstonedAt: 5_000, now: 1_000, intervalSeconds: 0))
        #expect(!TombstonePurgeRule.isDue(winnerDeleted: true, tombstonedAt: 1, now: 9, intervalSeconds: .infinity))
        #expect(TombstonePurgeRule.isDue(winnerDeleted: true, tombstonedAt: 1, now: 1, intervalSeconds: -5))
    }

    @Test func theIntervalComesFromTheConfigThenTheBucketThenCouchbasesDefault() {
        #expect(TombstonePurgeRule.intervalSeconds(configDays: 0.5, bucketDays: 7) == 43_200)
        #expect(TombstonePurgeRule.intervalSeconds(configDays: nil, bucketDays: 7) == 7 * 86_400)
        #expect(TombstonePurgeRule.intervalSeconds(configDays: nil, bucketDays: nil) == 3 * 86_400)
        #expect(TombstonePurgeRule.intervalSeconds(configDays: .nan, bucketDays: nil) == 3 * 86_400)
    }

    @Test func aPullIsAdmittedFromZeroOrFromAtOrAboveTheHorizon() {
        // Proves the horizon rule: nothing purged admits everything; with tombstones purged through 40, a pull from 0
        // (a fresh or reset replica) or from 40 on goes on, one from below is refused, compound sequences judged by
        // the plain sequence below which everything was delivered.
        #expect(PurgeHorizon().admits(ChangesSince(3)))
        let h = PurgeHorizon(purgedThrough: 40)
        #expect(h.admits(.zero))
        #expect(h.admits(ChangesSince(40)) && h.admits(ChangesSince(41)))
        #expect(!h.admits(ChangesSince(39)) && !h.admits(ChangesSince(1)))
        #expect(!h.admits(ChangesSince(50, triggeredBy: 30)))  // a backfill at 30: delivered everything below 30
        #expect(h.admits(ChangesSince(50, triggeredBy: 45)))
        #expect(h.admits(ChangesSince(60, low: 40)) && !h.admits(ChangesSince(60, low: 12)))
        #expect(PurgeHorizon(bytes: h.json().serialized()) == h)
        #expect(PurgeHorizon(bytes: Array("junk".utf8)) == PurgeHorizon())
        let refusal = GatewayError.checkpointPredatesPurge(since: ChangesSince(39), horizon: h)
        #expect(refusal.status == 410 && refusal.reason.contains("purged through sequence 40"))
    }

    @Test func aTokenMarkedWithThePullsHorizonIsAdmittedUntilTheHorizonRises() throws {
        // Proves the ADR 0145 amendment's pure rules: `S@H` (after any of Sync Gateway's forms) parses, prints and
        // travels as a JSON string, the old forms unchanged and `@0` or junk after `@` refused; a token below the
        // horizon is admitted when it carries a pull horizon no lower than today's, refused once the horizon rose
        // past it; a pull from 0 marks with today's horizon capped at its page's stable sequence, a marked since
        // keeps its mark, a plain one has none; a token at or above its mark drops it.
        for text in ["12", "5:12", "5::12", "3:5:12"] {
            #expect(ChangesSince(text)?.description == text && ChangesSince(text)?.pullHorizon == 0)
            let marked = try #require(ChangesSince(text + "@40"))
            #expect(marked.pullHorizon == 40 && marked.description == text + "@40")
            #expect(ChangesSince(json: marked.json) == marked && marked.json == .string(text + "@40"))
        }
        #expect(ChangesSince(#""7@40""#) == ChangesSince(7, pullHorizon: 40))
        for bad in ["7@0", "7@", "@40", "7@x", "7@40@41", "7@-1"] { #expect(ChangesSince(bad) == nil, "\(bad)") }

        let h = PurgeHorizon(purgedThrough: 40)
        #expect(!h.admits(ChangesSince(7)))  // a plain checkpoint below the horizon: today's rule
        #expect(h.admits(ChangesSince(7, pullHorizon: 40)) && h.admits(ChangesSince(7, pullHorizon: 45)))
        #expect(!PurgeHorizon(purgedThrough: 41).admits(ChangesSince(7, pullHorizon: 40)))  // purged since it began
        #expect(!h.admits(ChangesSince(50, triggeredBy: 30, pullHorizon: 39)))
        #expect(h.admits(ChangesSince(50, triggeredBy: 30, pullHorizon: 40)))

        #expect(h.pullHorizon(startingFrom: .zero, stable: 100) == 40)
        #expect(h.pullHorizon(startingFrom: .zero, stable: 30) == 30)
        #expect(PurgeHorizon().pullHorizon(startingFrom: .zero, stable: 100) == 0)
        #expect(h.pullHorizon(startingFrom: ChangesSince(7, pullHorizon: 45), stable: 100) == 45)
        #expect(h.pullHorizon(startingFrom: ChangesSince(41), stable: 100) == 0)
        #expect(ChangesSince(7).marked(pullHorizon: 40) == ChangesSince(7, pullHorizon: 40))
        #expect(ChangesSince(40).marked(pullHorizon: 40) == ChangesSince(40))
        #expect(ChangesSince(9, pullHorizon: 40).marked(pullHorizon: 0) == ChangesSince(9))
    }

    @Test func theCompactionStatusFollowsSyncGatewaysStates() {
        var s = TombstoneCompactionStatus()
        #expect(s.json()["status"]?.stringValue == "stopped" && s.json()["start_time"] == nil)
        let stopIdle = s.requestStop()
        #expect(!stopIdle)
        let first = s.start(now: 1_700_000_000)
        let second = s.start(now: 1_700_000_001)  // one run at a time
        #expect(first && !second)
        s.docsPurged = 3
        s.finish(error: nil)
        #expect(s.json()["status"]?.stringValue == "completed" && s.json()["docs_purged"]?.intValue == 3)
        #expect(s.json()["start_time"]?.stringValue == "2023-11-14T22:13:20Z")
        let again = s.start(now: 1_700_000_100)
        #expect(again && s.docsPurged == 0 && s.json()["compact_id"]?.stringValue == "2")
        let stop = s.requestStop()
        #expect(stop && s.isRunning)
        s.finish(error: nil)
        #expect(s.state == .stopped)
        let third = s.start(now: 1)
        #expect(third)
        s.finish(error: "bucket down")
        #expect(s.state == .error && s.json()["last_error"]?.stringValue == "bucket down")
    }
}

@Suite struct GatewayTombstonePurgeTests {
    static func open(shared: Bool, clock: ManualWallClock, compactEvery: Double = 3_600) async throws -> Fixture {
        var o = DatabaseOptions(name: "db")
        o.sharedBucketAccess = shared
        o.metaPurgeIntervalDays = 1
        o.compactIntervalSeconds = compactEvery
        o.clock = clock
        return try await Fixture.open(o)
    }

    /// Starts a run and waits for it to end; its status.
    static func compact(_ db: GatewayDatabase) async throws -> JSON {
        _ = try db.startTombstoneCompaction()
        var status = db.tombstoneCompactionStatus()
        let ended = await eventually {
            status = db.tombstoneCompactionStatus()
            return status["status"]?.stringValue == "completed"
        }
        #expect(ended, "\(String(decoding: status.serialized(), as: UTF8.self))")
        return status
    }

    @Test(arguments: [false, true])
    func tombstonesOlderThanTheIntervalArePurgedAndOlderCheckpointsRefused(shared: Bool) async throws {
        // Proves, on the database API: a deletion is stamped with the clock; a compaction purges exactly the
        // tombstones at least `meta_purge_interval` old (the bucket item gone, `_changes` from 0 without it) and
        // leaves younger ones and live documents; the purge horizon is the purged tombstone's sequence, kept in the
        // bucket (a database opened again on it refuses the same checkpoints), shown as `purge_seq`; a pull from
        // before that deletion is refused with 410, one from it or from 0 goes on; the figures count what is left.
        let clock = ManualWallClock()
        let f = try await Self.open(shared: shared, clock: clock)
        let a = try await f.db.put("a", body: json(#"{"v":1}"#), user: nil)
        let b = try await f.db.put("b", body: json(#"{"v":1}"#), user: nil)
        _ = try await f.db.put("c", body: json(#"{"v":1}"#), user: nil)
        let before = try await f.db.changes(ChangesQuery(), user: nil).lastSeq
        _ = try await f.db.delete("a", rev: a, user: nil)
        let afterA = try await f.db.changes(ChangesQuery(), user: nil).lastSeq
        clock.advance(seconds: 43_200)
        _ = try await f.db.delete("b", rev: b, user: nil)
        #expect(f.db.storedFigures().tombstones == 2)

        // Half a day after a's deletion: nothing is due.
        var status = try await Self.compact(f.db)
        #expect(status["docs_purged"]?.intValue == 0 && status["docs_checked"]?.intValue == 2)
        #expect(f.db.purgeHorizon.withLock { $0.purgedThrough } == 0)

        clock.advance(seconds: 43_200)
        status = try await Self.compact(f.db)
        #expect(status["docs_purged"]?.intValue == 1, "\(String(decoding: status.serialized(), as: UTF8.self))")
        #expect(try await f.bucket.get("a") == nil)
        if case .missing = try await f.db.load("a") {} else { Issue.record("a is still stored") }
        let rows = try await f.db.changes(ChangesQuery(), user: nil).rows.map(\.id)
        #expect(!rows.contains("a") && rows.contains("b") && rows.contains("c"))
        #expect(try await f.db.raw("b")["_sync"]?["tombstoned_at"] != nil)

        let horizon = f.db.purgeHorizon.withLock { $0.purgedThrough }
        #expect(horizon == afterA.seq)
        #expect(await f.db.info()["purge_seq"]?.uint64Value == horizon)
        #expect(throws: GatewayError.self) { try f.db.admitPull(since: before) }
        try f.db.admitPull(since: afterA)
        try f.db.admitPull(since: .zero)
        let figures = f.db.storedFigures()
        #expect(figures.docs == 2 && figures.tombstones == 1 && f.db.tombstonesPurged.load(ordering: .relaxed) == 1)

        // Another database on the bucket (a restart, or a second gateway) knows the horizon.
        let again = try await GatewayDatabase(
            options: DatabaseOptions(name: "db2"), bucket: f.bucket, logger: quietLogger())
        #expect(throws: GatewayError.self) { try again.admitPull(since: before) }
        await again.close()
        await f.close()
    }

    @Test(arguments: [false, true])
    func aPagedPullFromZeroAfterAPurgeCompletesAndAPurgeDuringItRefusesIt(shared: Bool) async throws {
        // Proves the bug of the long-run benchmark fixed (ADR 0145 amendment): old documents keep low sequences, newer
        // ones are deleted and purged (the horizon above the old ones); a pull from 0 paging 2 rows at a time with
        // each answer's `last_seq`, admitted before every page as `_changes` admits it, is handed tokens below the
        // horizon (the plain sequence alone would be refused, as it was) and completes with every live document.
        // A checkpoint from before the purge is still refused, and a purge while the pull is under way refuses the
        // pull's own tokens (it may have seen a document live whose tombstone went), until it restarts from 0.
        let f = try await Self.open(shared: shared, clock: ManualWallClock())
        var live: Set<String> = []
        var oldRevs: [RevID] = []
        for i in 0..<7 {
            oldRevs.append(try await f.db.put("old\(i)", body: json(#"{"v":1}"#), user: nil))
            live.insert("old\(i)")
        }
        var doomed: [String: RevID] = [:]
        for i in 0..<3 { doomed["new\(i)"] = try await f.db.put("new\(i)", body: json(#"{"v":1}"#), user: nil) }
        let beforePurge = try await f.db.changes(ChangesQuery(), user: nil).lastSeq
        for (id, rev) in doomed { _ = try await f.db.delete(id, rev: rev, user: nil) }
        _ = try await f.db.put("young", body: json(#"{"v":1}"#), user: nil)
        live.insert("young")
        _ = try await f.db.purge(doomed.mapValues { _ in ["*"] })
        let horizon = f.db.purgeHorizon.withLock { $0.purgedThrough }
        #expect(horizon > beforePurge.seq)
        #expect(throws: GatewayError.self) { try f.db.admitPull(since: beforePurge) }

        /// Pages from `since` as a PouchDB-style client does; the ids, and every `since` it sent.
        func pull(from since: ChangesSince) async throws -> (ids: [String], sinces: [ChangesSince]) {
            var since = since
            var ids: [String] = []
            var sinces: [ChangesSince] = []
            while true {
                try f.db.admitPull(since: since)
                sinces.append(since)
                let page = try await f.db.changes(ChangesQuery(since: since, limit: 2), user: nil)
                if page.rows.isEmpty { return (ids, sinces) }
                ids += page.rows.map(\.id)
                since = try #require(ChangesSince(json: .string(page.lastSeq.description)))  // as the client echoes it
            }
        }
        let (ids, sinces) = try await pull(from: .zero)
        #expect(Set(ids) == live && ids.count == live.count)
        let below = sinces.filter { $0 != .zero && $0.seq < horizon }
        #expect(below.count >= 3)
        #expect(below.allSatisfy { $0.pullHorizon == horizon })
        #expect(throws: GatewayError.self) { try f.db.admitPull(since: ChangesSince(below[0].seq)) }
        #expect(sinces.last?.pullHorizon == 0)  // at or above the horizon the token is plain again

        // A purge during a pull: its tokens below the new horizon are refused; from 0 it completes again.
        let midway = below[0]
        _ = try await f.db.delete("old6", rev: oldRevs.last, user: nil)
        live.remove("old6")
        _ = try await f.db.purge(["old6": ["*"]])
        #expect(throws: GatewayError.self) { try f.db.admitPull(since: midway) }
        let again = try await pull(from: .zero)
        #expect(Set(again.ids) == live)
        await f.close()
    }

    @Test func theCompactionRunsByItselfEveryInterval() async throws {
        // Proves the background run: with `compact_interval_days` short, a tombstone that comes of age is purged
        // without any request.
        let clock = ManualWallClock()
        let f = try await Self.open(shared: true, clock: clock, compactEvery: 0.05)
        let a = try await f.db.put("a", body: json(#"{"v":1}"#), user: nil)
        _ = try await f.db.delete("a", rev: a, user: nil)
        clock.advance(seconds: 86_400)
        let purged = await eventually { f.db.tombstonesPurged.load(ordering: .relaxed) == 1 }
        #expect(purged)
        #expect(f.db.storedFigures().docs == 0)
        await f.close()
    }

    @Test func purgingADeletedDocumentRaisesTheHorizonAndALiveOneDoesNot() async throws {
        // Proves `_purge`: a live document's purge is not replicated (replicas keep their copy, as in Sync Gateway
        // and CouchDB), so checkpoints stay good; a tombstone's purge moves the horizon to its sequence.
        let f = try await Fixture.open()
        _ = try await f.db.put("live", body: json(#"{"v":1}"#), user: nil)
        let d = try await f.db.put("dead", body: json(#"{"v":1}"#), user: nil)
        let early = try await f.db.changes(ChangesQuery(), user: nil).lastSeq
        _ = try await f.db.purge(["live": ["*"]])
        try f.db.admitPull(since: early)
        _ = try await f.db.delete("dead", rev: d, user: nil)
        let deletion = try await f.db.changes(ChangesQuery(), user: nil).lastSeq
        _ = try await f.db.purge(["dead": ["*"]])
        #expect(f.db.purgeHorizon.withLock { $0.purgedThrough } == deletion.seq)
        #expect(throws: GatewayError.self) { try f.db.admitPull(since: early) }
        await f.close()
    }

    @Test func aRecreatedDocumentIsNotPurged() async throws {
        // Proves the compaction purges only the tombstone it read: a document deleted long ago and written again
        // since keeps its new revision (the candidate list is of tombstones; a live winner is never due).
        let clock = ManualWallClock()
        let f = try await Self.open(shared: false, clock: clock)
        let a = try await f.db.put("a", body: json(#"{"v":1}"#), user: nil)
        let t = try await f.db.delete("a", rev: a, user: nil)
        clock.advance(seconds: 2 * 86_400)
        _ = try await f.db.put("a", body: json(#"{"_rev":"\#(t)","v":2}"#), user: nil)
        let status = try await Self.compact(f.db)
        #expect(status["docs_purged"]?.intValue == 0)
        #expect(try await f.db.get("a", user: nil).body["v"]?.intValue == 2)
        await f.close()
    }
}
