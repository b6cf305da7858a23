import SetteeCore
import SetteeJSON
import SetteeReplication
import Synchronization
import Testing

@Suite struct BulkGetSplitTests {
    /// How a `_bulk_get` answer is refused: past the endpoint's bytes, past its JSON values, or by the peer (413).
    enum Refusal: Sendable, CaseIterable { case bytes, values, peer }

    /// Values `JSON.parse` counts in `text`: the least `maxValues` it parses under.
    static func valueCount(_ text: [UInt8]) -> Int {
        var low = 1
        var high = text.count + 1
        while low < high {
            let middle = low + (high - low) / 2
            if (try? JSON.parse(text, maxValues: middle)) != nil { high = middle } else { low = middle + 1 }
        }
        return low
    }

    /// Documents `doc0`... of `count` numbers each, revision `1-a<i>`.
    static func fill(_ db: MemoryEndpoint, _ counts: [(String, Int)]) -> [BulkGetRequest] {
        counts.enumerated().map { i, doc in
            db.put(
                doc.0, rev: "1-a\(i)", body: [("a", .array(Array(repeating: .number(Double(i % 10)), count: doc.1)))])
            return BulkGetRequest(id: doc.0, rev: "1-a\(i)")
        }
    }

    /// The endpoint's bounds that refuse `refused` and let every answer of `fits` through, as the peer answers them
    /// (JSON); for `.peer`, the peer's own bound in revisions (`fits`' largest).
    static func bounds(
        _ refusal: Refusal, db: MemoryEndpoint, refused: [[BulkGetRequest]], fits: [[BulkGetRequest]]
    ) async throws -> (maxBody: Int, maxValues: Int, peerMax: Int?) {
        func answer(_ r: [BulkGetRequest]) async throws -> [UInt8] {
            BulkGet.jsonAnswer(try await db.bulkGet(r)).serialized()
        }
        var maxBody = ReplicationLimits.maxResponseBody
        var maxValues = ReplicationLimits.maxBulkGetJSONValues
        var peerMax: Int?
        switch refusal {
        case .bytes:
            maxBody = 0
            for part in fits { maxBody = max(maxBody, try await answer(part).count) }
            for part in refused { try #require(try await answer(part).count > maxBody) }
        case .values:
            maxValues = 0
            for part in fits { maxValues = max(maxValues, Self.valueCount(try await answer(part))) }
            for part in refused { try #require(Self.valueCount(try await answer(part)) > maxValues) }
        case .peer:
            peerMax = fits.map(\.count).max() ?? 0
        }
        return (maxBody, maxValues, peerMax)
    }

    @Test(arguments: Refusal.allCases)
    func anAnswerTooLargeIsAskedForInHalves(refusal: Refusal) async throws {
        // Proves a `_bulk_get` batch whose answer is refused for its size (the endpoint's bytes or JSON values, or a
        // 413 from the peer) is asked for again in halves, and the replication completes with every document. Before,
        // the batch failed whole: the bytes as a transient error retried with the same batch for ever, the values and
        // the 413 as errors that stopped the replication.
        let remoteDB = MemoryEndpoint("remote")
        let all = Self.fill(remoteDB, (0..<8).map { ("doc\($0)", 100) })
        let (maxBody, maxValues, peerMax) = try await Self.bounds(
            refusal, db: remoteDB, refused: [all], fits: [Array(all[..<4]), Array(all[4...])])
        let server = ProtocolTestServer(db: remoteDB, bulkGetMode: .json, maxBulkGetDocs: peerMax)
        let url = try await server.start()
        defer { server.stop() }
        let remote = try RemoteEndpoint(url: url, maxResponseBody: maxBody, maxBulkGetJSONValues: maxValues)
        let local = MemoryEndpoint("local")
        let pull = Replicator(
            source: remote, target: local, options: .init(batchSize: 50, backoffInitialMs: 10, maxAttempts: 2))
        pull.start()
        let s = await pull.waitUntilStopped()
        #expect(s.lastError == nil, "\(refusal)")
        #expect(s.completed == 8 && s.docsWritten == 8 && s.docWriteFailures == 0, "\(refusal)")
        #expect(Set(local.docs.keys) == Set(all.map(\.id)))
        #expect(local.docs["doc7"]?.revs["1-a7"]?.body["a"]?.arrayValue?.count == 100)
        #expect(server.bulkGetSizes.withLock { $0 } == [8, 4, 4], "the peer saw the batch, then its halves")
    }

    @Test(arguments: Refusal.allCases)
    func aRevisionTooLargeAloneIsThatRevisionsFailure(refusal: Refusal) async throws {
        // Proves the halving stops at one revision: one whose answer alone is too large is counted as that document's
        // failure (413 too_large, as CouchDB's replicator records a document it cannot read) and the replication
        // completes with the others, instead of failing its batch.
        let remoteDB = MemoryEndpoint("remote")
        let all = Self.fill(remoteDB, (0..<4).map { ("doc\($0)", 100) } + [("huge", 2000)])
        let (maxBody, maxValues, peerMax) = try await Self.bounds(
            refusal, db: remoteDB, refused: [all, [all[4]]], fits: [Array(all[..<4])])
        // The peer's bound is in revisions: the huge document alone passes none, so it refuses every batch holding it
        // as a size bound would.
        let server = ProtocolTestServer(
            db: remoteDB, bulkGetMode: .json, maxBulkGetDocs: peerMax,
            refusing: refusal == .peer ? ["huge"] : [])
        let url = try await server.start()
        defer { server.stop() }
        let remote = try RemoteEndpoint(url: url, maxResponseBody: maxBody, maxBulkGetJSONValues: maxValues)
        let local = MemoryEndpoint("local")
        let pull = Replicator(
            source: remote, target: local, options: .init(batchSize: 50, backoffInitialMs: 10, maxAttempts: 2))
        pull.start()
        let s = await pull.waitUntilStopped()
        #expect(s.lastError == nil, "\(refusal)")
        #expect(s.docsWritten == 4 && s.docWriteFailures == 1, "\(refusal)")
        #expect(Set(local.docs.keys) == Set(all[..<4].map(\.id)))
        // [d0 d1 d2 d3 huge] → [d0 d1] [d2 d3 huge] → [d2] [d3 huge] → [d3] [huge].
        #expect(server.bulkGetSizes.withLock { $0 } == [5, 2, 3, 1, 2, 1, 1])
    }
}
