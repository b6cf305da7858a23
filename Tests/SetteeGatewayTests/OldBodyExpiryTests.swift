import SetteeCore
import SetteeDocument
import SetteeJSON
import Synchronization
import Testing

@testable import SetteeGateway

/// Replaced revision bodies bounded in time and bytes (issue 71 item 4, ADR 0156): the pure rule, then a database on
/// an embedded bucket with a manual clock and the sweep called by the test.
@Suite struct OldBodyRuleTests {
    static let a = RevID("1-a")!
    static let b = RevID("2-b")!
    static let c = RevID("3-c")!
    static let x = RevID("3-x")!

    /// 1-a → 2-b → 3-c, every body kept.
    static func chain() throws -> RevTree {
        var t = RevTree()
        try t.add(a, parent: nil, deleted: false, body: Array(#"{"v":1}"#.utf8))
        try t.add(b, parent: a, deleted: false, body: Array(#"{"v":2}"#.utf8))
        try t.add(c, parent: b, deleted: false, body: Array(#"{"v":3}"#.utf8))
        return t
    }

    @Test func aWriteStampsTheReplacedParentAndABodyGoesAtTheWindow() throws {
        // Proves the write-time rule: the parent a write replaced (no time yet) is stamped now; an ancestor body
        // replaced 299 s before a 300 s window stays, one replaced 300 s before goes; the leaf's body always stays;
        // `times` names exactly the kept ancestor bodies.
        let rule = OldBodyRule(windowSeconds: 300)
        var tree = try Self.chain()
        var times: [RevID: UInt32] = [Self.a: 100]
        #expect(rule.apply(tree: &tree, times: &times, now: 399, stampUntimed: true) == 0)
        #expect(times == [Self.a: 100, Self.b: 399])
        #expect(rule.apply(tree: &tree, times: &times, now: 400, stampUntimed: true) == 1)
        #expect(tree.body(of: Self.a) == nil && tree.body(of: Self.b) != nil && tree.body(of: Self.c) != nil)
        #expect(times == [Self.b: 399])
    }

    @Test func theSweepExpiresUntimedBodiesAndNeverALeaf() throws {
        // Proves the sweep's reading: an ancestor body kept without a time (written before the rule) is expired, a
        // conflicting leaf's body is never touched however old, and a window of 0 keeps every timed body.
        var tree = try Self.chain()
        try tree.addHistory([Self.x, Self.b, Self.a], deleted: false, body: Array(#"{"v":"x"}"#.utf8))
        var times: [RevID: UInt32] = [Self.b: 1]
        var keepAll = tree
        var keepTimes = times
        #expect(
            OldBodyRule(windowSeconds: 0).apply(tree: &keepAll, times: &keepTimes, now: 9_999, stampUntimed: false) == 1
        )
        #expect(keepAll.body(of: Self.b) != nil && keepTimes == [Self.b: 1])
        #expect(OldBodyRule(windowSeconds: 10).apply(tree: &tree, times: &times, now: 5, stampUntimed: false) == 1)
        #expect(tree.body(of: Self.a) == nil && tree.body(of: Self.b) != nil && times == [Self.b: 1])
        #expect(OldBodyRule(windowSeconds: 10).apply(tree: &tree, times: &times, now: 11, stampUntimed: false) == 1)
        #expect(tree.body(of: Self.b) == nil && tree.body(of: Self.c) != nil && tree.body(of: Self.x) != nil)
        #expect(times.isEmpty)
    }

    @Test func theSweepPlanExpiresThenEvictsTheOldestUntilUnderTheBound() {
        // Proves `sweepPlan`: documents with an expired (or untimed) body are listed to expire; of the rest, while
        // their bytes exceed the bound, the oldest go first (ties by id), just enough to cover the excess.
        let rule = OldBodyRule(windowSeconds: 100)
        let docs: [(id: String, bytes: Int, oldestAt: UInt32)] = [
            ("old", 10, 800), ("untimed", 10, 0), ("n2", 40, 950), ("n1", 40, 950), ("n3", 40, 990), ("none", 0, 0),
        ]
        let under = rule.sweepPlan(docs, now: 1_000, maxBytes: 1_000)
        #expect(under.expire == ["old", "untimed"] && under.evict.isEmpty)
        // 140 bytes, bound 70: 70 over; n1 and n2 (same time, by id) cover it, n3 stays.
        let over = rule.sweepPlan(docs, now: 1_000, maxBytes: 70)
        #expect(over.expire == ["old", "untimed"] && over.evict == ["n1", "n2"])
    }

    @Test func theWindowFollowsSyncGatewayAndTheTimesRoundTrip() throws {
        // Proves the window is `old_rev_expiry_seconds`, or `rev_max_age_seconds` while delta sync is active (Sync
        // Gateway's backup TTLs), and `_sync.old_body_at` survives the stored form.
        #expect(OldBodyRule.window(oldRevExpirySeconds: 300, deltaSync: .disabled) == 300)
        #expect(OldBodyRule.window(oldRevExpirySeconds: 300, deltaSync: DeltaSyncConfig(enabled: true)) == 86_400)
        let inactive = DeltaSyncConfig(enabled: true, revMaxAgeSeconds: 0)
        #expect(OldBodyRule.window(oldRevExpirySeconds: 30, deltaSync: inactive) == 30)
        var meta = SyncMeta()
        meta.tree = try Self.chain()
        meta.oldBodyTimes = [Self.a: 1_700_000_000, Self.b: 1_700_000_100]
        #expect(try SyncMeta(json: meta.json()).oldBodyTimes == meta.oldBodyTimes)
        #expect(try SyncMeta(json: JSON.parse(meta.storageBytes())).oldBodyTimes == meta.oldBodyTimes)
    }

    @Test func theSweepRunsTenTimesAWindowBetweenOneSecondAndAMinute() {
        // Proves a body lives its window plus at most a tenth (the long run's kept population swung by half when the
        // sweep ran once a window), bounded at both ends: a day's window still sweeps every minute, a 2 s window
        // every second, and no age bound sweeps for the byte bound at the longest wait.
        #expect(OldBodyRule(windowSeconds: 60).sweepInterval == 6)
        #expect(OldBodyRule(windowSeconds: 300).sweepInterval == 30)
        #expect(OldBodyRule(windowSeconds: 86_400).sweepInterval == Double(Limits.gatewayOldBodySweepSeconds))
        #expect(OldBodyRule(windowSeconds: 2).sweepInterval == 1)
        #expect(OldBodyRule(windowSeconds: 0).sweepInterval == Double(Limits.gatewayOldBodySweepSeconds))
        #expect(OldBodyRule(windowSeconds: Limits.gatewayMaxOldRevExpirySeconds).sweepInterval == 60)
    }
}

@Suite struct OldBodyExpiryTests {
    static func open(shared: Bool, clock: ManualWallClock, maxBytes: Int = Limits.gatewayOldBodyBytes) async throws
        -> Fixture
    {
        var o = DatabaseOptions(name: "db")
        o.sharedBucketAccess = shared
        o.clock = clock
        o.oldRevExpirySeconds = 300
        o.oldBodyMaxBytes = maxBytes
        // The test sweeps itself; the background sweeper waits an hour.
        o.oldBodySweepSeconds = 3_600
        return try await Fixture.open(o)
    }

    /// Writes `id` `count` times with `filler` bytes in each body; the revisions, oldest first.
    static func write(_ db: GatewayDatabase, _ id: String, count: Int, filler: Int = 0) async throws -> [RevID] {
        var revs: [RevID] = []
        let pad = String(repeating: "p", count: filler)
        for i in 1...count {
            let revMember = revs.last.map { #""_rev":"\#($0)","# } ?? ""
            revs.append(try await db.put(id, body: json(#"{\#(revMember)"v":\#(i),"pad":"\#(pad)"}"#), user: nil))
        }
        return revs
    }

    static func status(_ db: GatewayDatabase, _ id: String, _ rev: RevID) async -> Int {
        do {
            _ = try await db.get(id, rev: rev, user: nil)
            return 200
        } catch { return error.status }
    }

    @Test(arguments: [false, true])
    func oldBodiesGoAfterTheWindowAndTheirRevisionsAnswer404(shared: Bool) async throws {
        // Proves the age bound on a document not written again: its replaced bodies are readable (`GET ?rev=`) and
        // counted until `old_rev_expiry_seconds`; the sweep then drops them without a new revision or sequence, the
        // revisions answer 404 (Sync Gateway's answer once its backup expired), the winner reads on, and the figures
        // say so. Before the window nothing goes.
        let clock = ManualWallClock()
        let f = try await Self.open(shared: shared, clock: clock)
        let revs = try await Self.write(f.db, "d", count: 3)
        #expect(f.db.storedFigures().oldBodies == 2 && f.db.storedFigures().oldBodyBytes > 0)
        #expect(await Self.status(f.db, "d", revs[0]) == 200)
        let lastSeq = try await f.db.changes(ChangesQuery(), user: nil).lastSeq

        clock.advance(seconds: 299)
        #expect(await f.db.sweepOldBodies() == 0)
        #expect(await Self.status(f.db, "d", revs[1]) == 200)
        clock.advance(seconds: 1)
        #expect(await f.db.sweepOldBodies() == 2)
        #expect(await Self.status(f.db, "d", revs[0]) == 404)
        #expect(await Self.status(f.db, "d", revs[1]) == 404)
        #expect(await Self.status(f.db, "d", revs[2]) == 200)
        #expect(f.db.storedFigures().oldBodies == 0 && f.db.storedFigures().oldBodyBytes == 0)
        #expect(f.db.oldBodiesExpired.load(ordering: .relaxed) == 2)
        #expect(try await f.db.changes(ChangesQuery(), user: nil).lastSeq == lastSeq)
        // The document's history is whole: it is updated from its winner as before.
        let next = try await f.db.put("d", body: json(#"{"_rev":"\#(revs[2])","v":4}"#), user: nil)
        #expect(next.generation == 4)
        await f.close()
    }

    @Test func aWriteDropsItsExpiredBodiesAndKeepsTheParentItReplaced() async throws {
        // Proves the write-time half: a document written again after the window loses the bodies replaced before it,
        // while the revision that write replaced is kept (stamped then) and readable.
        let clock = ManualWallClock()
        let f = try await Self.open(shared: true, clock: clock)
        var revs = try await Self.write(f.db, "d", count: 3)
        clock.advance(seconds: 300)
        revs.append(try await f.db.put("d", body: json(#"{"_rev":"\#(revs[2])","v":4}"#), user: nil))
        #expect(await Self.status(f.db, "d", revs[0]) == 404)
        #expect(await Self.status(f.db, "d", revs[1]) == 404)
        #expect(await Self.status(f.db, "d", revs[2]) == 200)
        #expect(f.db.storedFigures().oldBodies == 1)
        #expect(f.db.oldBodiesExpired.load(ordering: .relaxed) == 2)
        await f.close()
    }

    @Test func pastTheByteBoundTheOldestDocumentsLoseTheirOldBodiesFirst() async throws {
        // Proves the database-wide byte bound: three documents each keep one ~1 KB replaced body, written 10 s apart;
        // with a bound of two of them, a sweep (none expired yet) drops the oldest document's and only it; the figure
        // is then within the bound.
        let clock = ManualWallClock()
        let f = try await Self.open(shared: false, clock: clock, maxBytes: 2_100)
        var kept: [String: [RevID]] = [:]
        for id in ["first", "second", "third"] {
            kept[id] = try await Self.write(f.db, id, count: 2, filler: 1_000)
            clock.advance(seconds: 10)
        }
        let before = f.db.storedFigures()
        #expect(before.oldBodies == 3 && before.oldBodyBytes > 3_000)
        #expect(await f.db.sweepOldBodies() == 1)
        #expect(await Self.status(f.db, "first", kept["first"]![0]) == 404)
        #expect(await Self.status(f.db, "second", kept["second"]![0]) == 200)
        #expect(await Self.status(f.db, "third", kept["third"]![0]) == 200)
        let after = f.db.storedFigures()
        #expect(after.oldBodies == 2 && after.oldBodyBytes <= 2_100)
        await f.close()
    }
}
