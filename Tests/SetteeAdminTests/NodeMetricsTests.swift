import Foundation
import SetteeCore
import SetteeRegistry
import SetteeStorage
import SetteeTestSupport
import Testing

@testable import SetteeAdmin

@Suite struct NodeMetricsTests {
    /// `/metrics` carries a bucket's durable-write outcomes (`settee_bucket_sync_writes_total`, ADR 0086), counters
    /// that follow the engine's counts between scrapes: two prepares accepted, one committed, one aborted, then one
    /// more committed. Before, an operator scraping the node could not see durable writes being aborted.
    @Test func syncWriteOutcomesAreExported() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try makeRegistry(dir)
        defer { registry.shutdown() }
        try registry.initialize(username: "Administrator", password: "password")
        try registry.createBucket(settings("durable", vbuckets: 4))
        let engine = try #require(registry.bucket(named: "durable"))
        let metrics = NodeMetrics(registry: registry) { .init(connections: 0, gets: 0, sets: 0) }
        func prepare(_ k: String) throws -> MutationResult {
            try engine.store(
                .set, VBucketID(0), Array(k.utf8), value: Array("1".utf8), flags: 0, expiry: 0, datatype: .json,
                cas: .zero, syncWrite: SyncWrite(level: 1))
        }
        func line(_ state: String, _ outcome: String, _ count: Int) -> String {
            "settee_bucket_sync_writes_total{bucket=\"durable\",state=\"\(state)\",outcome=\"\(outcome)\"} \(count)\n"
        }
        let a = try prepare("a")
        let b = try prepare("b")
        #expect(engine.commitSyncWrite(VBucketID(0), Array("a".utf8), seqno: a.token.seqno))
        #expect(engine.abortSyncWrite(VBucketID(0), Array("b".utf8), seqno: b.token.seqno))
        var text = String(decoding: metrics.render(), as: UTF8.self)
        #expect(text.contains(line("active", "accepted", 2)), "\(text)")
        #expect(text.contains(line("active", "committed", 1)), "\(text)")
        #expect(text.contains(line("active", "aborted", 1)), "\(text)")
        #expect(text.contains(line("replica", "accepted", 0)), "\(text)")
        let c = try prepare("c")
        #expect(engine.commitSyncWrite(VBucketID(0), Array("c".utf8), seqno: c.token.seqno))
        text = String(decoding: metrics.render(), as: UTF8.self)
        #expect(text.contains(line("active", "accepted", 3)), "\(text)")
        #expect(text.contains(line("active", "committed", 2)), "\(text)")
        #expect(text.contains(line("active", "aborted", 1)), "\(text)")
    }
}
