import Foundation
import SetteeCore
import SetteeSQLite
import SetteeTestSupport
import Testing

@testable import SetteeStorage

/// Active vBuckets held back after an unclean shutdown (`EngineOptions.holdAfterUncleanShutdown`, ADR 0033).
@Suite(.onTestThreads) struct HeldAfterUncleanShutdownTests {
    let dir = TemporaryDirectory("storage")

    func holding() -> EngineOptions {
        var o = testOptions()
        o.holdAfterUncleanShutdown = true
        return o
    }

    /// Writes one persisted document and abandons the engine (a crash): returns its vBucket, uuid and high seqno.
    func crashAfterOneWrite() throws -> (vb: VBucketID, uuid: VBucketUUID, high: SeqNo) {
        let e1 = try openEngine(dir, options: holding())
        let k = key("doc")
        let vb = vbOf(k, e1)
        _ = try e1.store(.set, vb, k, value: jsonDoc(1), flags: 0, expiry: 0, datatype: .json, cas: .zero)
        try waitAllPersisted(e1)
        let info = e1.seqnoInfo(vb)
        e1.stopThreads(.abandon)
        return (vb, info.uuid, info.highSeqno)
    }

    /// The held copy serves nothing, keeps its history unbranched and reports its high seqno; releasing it
    /// as active branches the log at that seqno and serves the document.
    @Test func heldUntilReleasedThenBranches() throws {
        let before = try crashAfterOneWrite()
        let e2 = try openEngine(dir, options: holding())
        defer { e2.shutdown() }
        let held = e2.heldVBuckets()
        #expect(held.count == e2.settings.numVBuckets)  // every vBucket was active on the single engine
        #expect(held.contains { $0.vb == before.vb && $0.high == before.high })
        #expect(e2.vbucketState(before.vb) == .dead)
        #expect(e2.seqnoInfo(before.vb).uuid == before.uuid)
        #expect(throws: EngineError.self) { try e2.get(before.vb, key("doc")) }
        // Asked to become active (the map), it stays held.
        e2.setVBucketState(before.vb, .active)
        #expect(e2.vbucketState(before.vb) == .dead)
        #expect(e2.releaseHold(before.vb, becoming: .active))
        #expect(!e2.releaseHold(before.vb, becoming: .active))
        #expect(e2.vbucketState(before.vb) == .active)
        let log = e2.failoverLog(before.vb)
        #expect(log.count == 2 && log[0].seqno == before.high && log[1].uuid == before.uuid)
        #expect(try e2.get(before.vb, key("doc")).value == jsonDoc(1))
    }

    /// Proves a vBucket whose items survived without its state row (a damaged or foreign file) warms up held, even
    /// after a clean shutdown, while the others serve: its history is unknown, and unheld it served as active under a
    /// fresh one whatever its replicas held.
    @Test func itemsWithoutAStateRowAreHeld() throws {
        let e1 = try openEngine(dir, options: holding())
        let k = key("orphan")
        let vb = vbOf(k, e1)
        _ = try e1.store(.set, vb, k, value: jsonDoc(1), flags: 0, expiry: 0, datatype: .json, cas: .zero)
        e1.shutdown()
        let conn = try Connection(path: dir.dataFile)
        try conn.execute("DELETE FROM vbucket_state WHERE vb = \(vb.rawValue)")
        conn.close()
        let e2 = try openEngine(dir, options: holding())
        defer { e2.shutdown() }
        #expect(e2.heldVBuckets().map(\.vb) == [vb])
        #expect(e2.vbucketState(vb) == .dead)
        #expect(throws: EngineError.self) { try e2.get(vb, k) }
    }

    /// Becoming a replica ends the hold without a new history entry: the copy follows the active it was handed to.
    @Test func becomingReplicaEndsTheHoldUnbranched() throws {
        let before = try crashAfterOneWrite()
        let e2 = try openEngine(dir, options: holding())
        defer { e2.shutdown() }
        e2.setVBucketState(before.vb, .replica)
        #expect(e2.vbucketState(before.vb) == .replica)
        #expect(!e2.heldVBuckets().contains { $0.vb == before.vb })
        #expect(e2.failoverLog(before.vb).count == 1)
        #expect(e2.seqnoInfo(before.vb).uuid == before.uuid)
    }

    /// A hold survives a clean shutdown (the marker stays unclean) and a second crash: the state row keeps saying
    /// active, so the next start asks again instead of serving the copy under its old history.
    @Test func holdSurvivesRestarts() throws {
        let before = try crashAfterOneWrite()
        let e2 = try openEngine(dir, options: holding())
        #expect(e2.heldVBuckets().contains { $0.vb == before.vb })
        e2.shutdown()
        let e3 = try openEngine(dir, options: holding())
        #expect(e3.heldVBuckets().contains { $0.vb == before.vb })
        #expect(e3.failoverLog(before.vb).count == 1)
        e3.stopThreads(.abandon)
        let e4 = try openEngine(dir, options: holding())
        defer { e4.shutdown() }
        #expect(e4.heldVBuckets().contains { $0.vb == before.vb })
        #expect(e4.seqnoInfo(before.vb).uuid == before.uuid)
    }

    /// Crashes after one write, then restarts with the vBucket made a replica and shuts down cleanly while the
    /// cluster has not compared it: returns an engine opened again, whose row for the vBucket says replica.
    func replicaRowAfterUncleanShutdown() throws -> (engine: BucketEngine, vb: VBucketID, uuid: VBucketUUID) {
        let before = try crashAfterOneWrite()
        let e2 = try openEngine(dir, options: holding())
        e2.setVBucketState(before.vb, .replica)
        #expect(e2.hasUnsettledVBuckets)
        e2.shutdown()
        let e3 = try openEngine(dir, options: holding())
        return (e3, before.vb, before.uuid)
    }

    /// The torture run of 2026-11-27 (seed 1740996669152888003, `n3r1-afo-on-kill`) lost 32 acknowledged durable
    /// inserts: the node was killed a moment after a rebalance made it the active of 107 vBuckets, before their new
    /// state rows reached the file. At the restart those rows still said replica, so nothing held them; the map
    /// made them active at once under a new history and their replicas, which held the inserts, rolled back to 0.
    /// A copy whose row says replica is now held too when asked to become pending or active before the cluster
    /// compared it, and released or handed over like an active row.
    @Test func replicaRowIsHeldWhenMadeActiveBeforeTheClusterCompared() throws {
        let (e3, vb, uuid) = try replicaRowAfterUncleanShutdown()
        defer { e3.shutdown() }
        // The clean shutdown left the marker: the question was still open.
        #expect(e3.hasUnsettledVBuckets)
        #expect(e3.vbucketState(vb) == .replica)
        #expect(!e3.heldVBuckets().contains { $0.vb == vb })
        // Fenced, the map asks for pending; then, unfenced, for active: held both times, history unbranched.
        e3.setVBucketState(vb, .pending)
        #expect(e3.vbucketState(vb) == .dead)
        #expect(e3.heldVBuckets().contains { $0.vb == vb && $0.high > .zero })
        e3.setVBucketState(vb, .active)
        #expect(e3.vbucketState(vb) == .dead)
        #expect(e3.failoverLog(vb).count == 1 && e3.seqnoInfo(vb).uuid == uuid)
        #expect(throws: EngineError.self) { try e3.get(vb, key("doc")) }
        // No replica was ahead: released under a new entry, and no longer unsettled.
        #expect(e3.releaseHold(vb, becoming: .active))
        #expect(e3.vbucketState(vb) == .active)
        #expect(e3.failoverLog(vb).count == 2)
        #expect(try e3.get(vb, key("doc")).value == jsonDoc(1))
    }

    /// Once the cluster settles a copy (its map makes it a replica or nothing), becoming active is an ordinary
    /// promotion again; a held copy is never settled this way.
    @Test func settledCopyBecomesActiveAtOnce() throws {
        let (e3, vb, uuid) = try replicaRowAfterUncleanShutdown()
        defer { e3.shutdown() }
        let other = VBucketID(UInt16((Int(vb.rawValue) + 1) % e3.settings.numVBuckets))
        #expect(e3.heldVBuckets().contains { $0.vb == other })
        let settled = e3.settleUnclean { $0 == vb || $0 == other }
        #expect(settled == 1)
        #expect(e3.heldVBuckets().contains { $0.vb == other })
        e3.setVBucketState(vb, .active)
        #expect(e3.vbucketState(vb) == .active)
        #expect(e3.seqnoInfo(vb).uuid != uuid)
        // The held ones stay unsettled until released.
        #expect(e3.hasUnsettledVBuckets)
        for h in e3.heldVBuckets() { e3.releaseHold(h.vb, becoming: .active) }
        #expect(!e3.hasUnsettledVBuckets)
    }

    /// Without the option (an engine nothing would release) the old behaviour stays: a new entry at once.
    @Test func withoutTheOptionBranchesAtOnce() throws {
        let before = try crashAfterOneWrite()
        let e2 = try openEngine(dir)
        defer { e2.shutdown() }
        #expect(e2.heldVBuckets().isEmpty)
        #expect(!e2.hasUnsettledVBuckets)
        #expect(e2.vbucketState(before.vb) == .active)
        #expect(e2.seqnoInfo(before.vb).uuid != before.uuid)
    }
}
