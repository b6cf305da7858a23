import SetteeCore
import SetteeStreams
import SetteeTestSupport
import Testing

@testable import SetteeStorage

@Suite(.onTestThreads) struct FailoverLogTests {
    /// Branching puts a fresh non-zero uuid first, keeps at most `Limits.maxFailoverEntries`, and the
    /// 16-bytes-per-entry disk form decodes to the same log; malformed blobs are rejected.
    @Test func branchCapAndEncoding() {
        var rng = SystemRandomNumberGenerator()
        var log = FailoverLog.fresh(using: &rng)
        #expect(log.entries.count == 1 && log.entries[0].seqno == .zero && log.current.rawValue != 0)
        for i in 1...40 { log.branch(at: SeqNo(UInt64(i * 10)), using: &rng) }
        #expect(log.entries.count == Limits.maxFailoverEntries)
        #expect(log.entries[0].seqno == SeqNo(400))
        #expect(Set(log.entries.map(\.uuid)).count == log.entries.count)
        let bytes = log.encoded()
        #expect(bytes.count == 16 * Limits.maxFailoverEntries)
        #expect(bytes.withUnsafeBytes { FailoverLog.decode($0) } == log)
        #expect([UInt8](repeating: 0, count: 15).withUnsafeBytes { FailoverLog.decode($0) } == nil)
        #expect([UInt8]().withUnsafeBytes { FailoverLog.decode($0) } == nil)
    }

    /// A vBucket's state and failover log are persisted by the flusher and restored on a clean restart.
    @Test func vbucketStatePersists() throws {
        let dir = TemporaryDirectory("storage")
        let e1 = try openEngine(dir, vbuckets: 8)
        e1.setVBucketState(VBucketID(2), .replica)
        e1.setVBucketState(VBucketID(5), .dead)
        e1.setVBucketState(VBucketID(5), .active)
        let log5 = e1.failoverLog(VBucketID(5)).map(\.uuid)
        e1.shutdown()
        let e2 = try openEngine(dir, vbuckets: 8)
        defer { e2.shutdown() }
        #expect(e2.vbucketState(VBucketID(2)) == .replica)
        #expect(e2.vbucketState(VBucketID(5)) == .active)
        #expect(e2.failoverLog(VBucketID(5)).map(\.uuid) == log5)
        #expect(log5.count == 2)
        #expect(e2.stats().vbActiveNum == 7)
    }
}
