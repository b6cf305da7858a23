import SetteeCore
import SetteeDocument
import SetteeJSON
import Testing

@testable import SetteeGateway

/// A pull's `_bulk_get` of the revision `_changes` listed (the winner the index holds) is answered from the revision
/// cache, without a bucket read, exactly as the bucket would answer it; anything the cache cannot answer exactly
/// (another revision, a history longer than it keeps, `GET` of the winner) still reads the bucket.
@Suite struct RevisionCacheReadTests {
    static func open(failing reads: FailingReads) async throws -> (GatewayDatabase, EmbeddedBucket) {
        let inner = try EmbeddedBucket(server: "walrus:", name: "cache-read", logger: quietLogger())
        let db = try await GatewayDatabase(
            options: DatabaseOptions(name: "db"), bucket: StalledFeedBucket(inner: inner, failingReads: reads),
            logger: quietLogger())
        return (db, inner)
    }

    @Test func theIndexedWinnerIsServedFromTheCacheAndTheRestFromTheBucket() async throws {
        // Proves: with every bucket read of the document failing, `get(rev: winner, revs: true)` still answers, with
        // the body and the whole `_revisions` a bucket read gives (compared with one once reads work again); `get` of
        // the winner without a rev, and of an older revision, read the bucket (and fail).
        let reads = FailingReads([:])
        let (db, inner) = try await Self.open(failing: reads)
        let r1 = try await db.put("doc", body: json(#"{"channels":["a"],"v":1}"#), user: nil)
        let r2 = try await db.put("doc", body: json(#"{"_rev":"\#(r1)","channels":["a"],"v":2}"#), user: nil)
        let fromBucket = try await db.get("doc", rev: r2, revs: true, user: nil, latest: true).body
        #expect(db.cachedWinner("doc", rev: r2) != nil)

        let failing = FailingReads(["doc": 1_000])
        failing.pause()
        let (cached, cachedInner) = try await Self.open(failing: failing)
        let c1 = try await cached.put("doc", body: json(#"{"channels":["a"],"v":1}"#), user: nil)
        let c2 = try await cached.put("doc", body: json(#"{"_rev":"\#(c1)","channels":["a"],"v":2}"#), user: nil)
        failing.resume()
        #expect(c2 == r2)
        let served = try await cached.get("doc", rev: c2, revs: true, user: nil, latest: true).body
        #expect(served == fromBucket)
        #expect(served["_revisions"]?["ids"]?.arrayValue?.count == 2)
        await #expect(throws: GatewayError.self) { _ = try await cached.get("doc", user: nil) }
        await #expect(throws: GatewayError.self) { _ = try await cached.get("doc", rev: c1, user: nil) }
        failing.pause()
        #expect(try await cached.get("doc", user: nil).body["v"]?.intValue == 2)
        await db.close()
        await inner.close()
        await cached.close()
        await cachedInner.close()
    }

    @Test func anEntryIsCompleteOnlyWithTheWholeHistory() {
        // Proves: an entry answers reads (`historyComplete`) only when its history reached the branch's root and fits
        // the cache's history bound; a longer one is cut and marked incomplete, so the read goes to the bucket.
        var cache = RevisionCache(maxEntries: 10, maxBytes: 1 << 20, maxHistory: 3)
        let revs = (1...4).reversed().map { RevID(generation: $0, digest: String(repeating: "a", count: 32)) }
        cache.put("whole", rev: revs[1], deleted: false, body: [], history: Array(revs[1...]), complete: true)
        cache.put("cut", rev: revs[0], deleted: false, body: [], history: revs, complete: true)
        cache.put("unrooted", rev: revs[1], deleted: false, body: [], history: Array(revs[1...2]), complete: false)
        #expect(cache.entry("whole", rev: revs[1])?.historyComplete == true)
        #expect(cache.entry("cut", rev: revs[0])?.historyComplete == false)
        #expect(cache.entry("cut", rev: revs[0])?.history.count == 3)
        #expect(cache.entry("unrooted", rev: revs[1])?.historyComplete == false)
    }
}
