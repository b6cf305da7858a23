import Foundation
import SetteeCore
import SetteeTestSupport
import Testing

@testable import SetteeStorage

/// Active vBuckets held back after an unclean shutdown (`EngineOptions.holdAfterUncleanShutdown`, ADR 0033).
@Suite struct HeldAfterUncleanShutdownTests {
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

    /// Without the option (an engine nothing would release) the old behaviour stays: a new entry at once.
    @Test func withoutTheOptionBranchesAtOnce() throws {
        let before = try crashAfterOneWrite()
        let e2 = try openEngine(dir)
        defer { e2.shutdown() }
        #expect(e2.heldVBuckets().isEmpty)
        #expect(e2.vbucketState(before.vb) == .active)
        #expect(e2.seqnoInfo(before.vb).uuid != before.uuid)
    }
}
