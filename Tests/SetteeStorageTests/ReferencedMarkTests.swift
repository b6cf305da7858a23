import SetteeCore
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeStorage

/// The item pager's second chance depends on a GET marking what it read. The GET's look-up (`withDocument`) reads
/// the item through `ItemTable.readiness(at:)` (ADR 0089), which takes the in-place mark only for an item not yet
/// marked: these tests pin that path inside the engine, across pager passes.
@Suite(.onTestThreads) struct ReferencedMarkTests {
    let dir = TemporaryDirectory("storage")

    /// Proves a GET after an item-pager pass (which cleared every mark) marks the item again, so the next pass
    /// spares it and evicts the item nobody read; and that the spared item's value is served unchanged.
    @Test func aGetAfterAPagerPassSparesTheItemItRead() throws {
        let e = try openEngine(dir, vbuckets: 1)
        defer { e.shutdown() }
        let vb = VBucketID(0)
        _ = try e.store(.set, vb, key("read"), value: [1, 2, 3], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        let last = try e.store(
            .set, vb, key("unread"), value: [4, 5, 6], flags: 0, expiry: 0, datatype: .raw, cas: .zero)
        #expect(isOK(waitPersisted(e, vb, last.token.seqno)))
        func get(_ k: String) throws -> [UInt8] { try e.withDocument(vb, key(k)) { v, _ in Array(v) } }
        func resident(_ k: String) -> Bool {
            e.core.vbuckets[0].table.withLock { $0.items[DocKey(key(k))]?.hasValue ?? false }
        }
        func marked(_ k: String) -> Bool {
            e.core.vbuckets[0].table.withLock { $0.items[DocKey(key(k))]?.referenced ?? false }
        }
        // Both read, so both marked; a pass clears the marks and evicts neither.
        #expect(try get("read") == [1, 2, 3] && (try get("unread")) == [4, 5, 6])
        #expect(marked("read") && marked("unread"))
        let first = e.core.vbuckets[0].table.withLock { $0.evictValues(secondChance: true) }
        #expect(first.count == 0)
        #expect(!marked("read") && !marked("unread"))
        // One GET after the pass marks its item again (the path that changes the item in place).
        #expect(try get("read") == [1, 2, 3])
        #expect(marked("read") && !marked("unread"))
        // A GET of an item already marked leaves it marked (the read-only path).
        #expect(try get("read") == [1, 2, 3])
        #expect(marked("read"))
        let second = e.core.vbuckets[0].table.withLock { $0.evictValues(secondChance: true) }
        #expect(second.count == 1)
        #expect(resident("read") && !resident("unread"))
        #expect(try get("read") == [1, 2, 3])
        #expect(throws: EngineError.wouldBlock) { try get("unread") }
    }
}
