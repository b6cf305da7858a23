import SetteeCore
import SetteeJSON
import SetteeReplication
import Synchronization
import Testing

@Suite struct BulkDocsSplitTests {
    /// Pushes `local` to a `ProtocolTestServer` over `remoteDB` refusing `_bulk_docs` of more than `maxDocs`
    /// documents or holding one of `refusing` with 413; the status, and the peer's `_bulk_docs` sizes in order.
    static func push(
        _ local: MemoryEndpoint, to remoteDB: MemoryEndpoint, maxDocs: Int, refusing: Set<String> = []
    ) async throws -> (ReplicationState.Status, [Int]) {
        let server = ProtocolTestServer(
            db: remoteDB, bulkGetMode: .json, maxBulkDocsDocs: maxDocs, refusingWrites: refusing)
        let url = try await server.start()
        defer { server.stop() }
        let push = Replicator(
            source: local, target: try RemoteEndpoint(url: url),
            options: .init(batchSize: 50, backoffInitialMs: 10, replicationID: "split", maxAttempts: 2))
        push.start()
        let s = await push.waitUntilStopped()
        return (s, server.bulkDocsSizes.withLock { $0 })
    }

    @Test func aBatchTheTargetRefusesIsSentInHalves() async throws {
        // Proves a `_bulk_docs` the target refuses with 413 (CouchDB's max_http_request_size, settee-gateway's or a
        // Lite listener's body bound) is sent again in halves and the push completes with every document, as
        // CouchDB's replicator does. Before, the 413 stopped the replication.
        let local = MemoryEndpoint("local")
        for i in 0..<8 { local.put("doc\(i)", rev: "1-a\(i)", body: [("n", .number(Double(i)))]) }
        let remoteDB = MemoryEndpoint("remote")
        let (s, sizes) = try await Self.push(local, to: remoteDB, maxDocs: 4)
        #expect(s.lastError == nil)
        #expect(s.completed == 8 && s.docsWritten == 8 && s.docWriteFailures == 0)
        #expect(Set(remoteDB.docs.keys) == Set((0..<8).map { "doc\($0)" }))
        #expect(sizes == [8, 4, 4], "the peer saw the batch, then its halves")
    }

    @Test func aDocumentTooLargeAloneIsOneWriteFailure() async throws {
        // Proves the halving stops at one document: one the target refuses alone is counted once in docWriteFailures
        // (CouchDB's doc_write_failures), the others are written, and the checkpoint moves past the batch, so a
        // second run neither sends it again nor stalls.
        let local = MemoryEndpoint("local")
        for i in 0..<4 { local.put("doc\(i)", rev: "1-a\(i)", body: [("n", .number(Double(i)))]) }
        local.put("huge", rev: "1-h", body: [("n", .number(4))])
        let remoteDB = MemoryEndpoint("remote")
        let (s, sizes) = try await Self.push(local, to: remoteDB, maxDocs: 100, refusing: ["huge"])
        #expect(s.lastError == nil)
        #expect(s.completed == 5 && s.docsWritten == 4 && s.docWriteFailures == 1)
        #expect(Set(remoteDB.docs.keys) == Set((0..<4).map { "doc\($0)" }))
        // [d0 d1 d2 d3 huge] → [d0 d1] [d2 d3 huge] → [d2] [d3 huge] → [d3] [huge].
        #expect(sizes == [5, 2, 3, 1, 2, 1, 1])
        let log = try #require(try await remoteDB.getLocal("split"))
        #expect(log["history"]?.arrayValue?.first?["doc_write_failures"]?.intValue == 1)

        let (again, sizesAgain) = try await Self.push(local, to: remoteDB, maxDocs: 100, refusing: ["huge"])
        #expect(again.lastError == nil && again.total == 0)
        #expect(sizesAgain.isEmpty, "the checkpoint is past the batch")
    }

    @Test func aTargetThatRefusesBeforeReadingTheBodyIsSentHalves() async throws {
        // Proves a target that answers 413 as soon as it has the head, reads none of the body and closes (a server
        // with a request size bound may: the body is still being sent when the connection closes) is sent halves,
        // as one that reads the body first is: 8 documents of 256 KiB to a peer taking at most 600 KB, then 4, then
        // 2 at a time. If the client saw the closed connection instead of the 413, the push would retry the same
        // batch as a network error.
        let peer = EarlyRefusingPeer(maxBodyBytes: 600_000)
        defer { peer.stop() }
        try #require(peer.port > 0)
        let remote = try RemoteEndpoint(url: "http://127.0.0.1:\(peer.port)/db")
        let pad = String(repeating: "x", count: 256 * 1024)
        let docs = (0..<8).map { FetchedRevision(id: "d\($0)", rev: "1-a", body: .object([("pad", .string(pad))])) }
        let rows = try await remote.bulkDocs(docs, newEdits: false)
        #expect(rows.isEmpty, "\(rows)")
        let lengths = peer.lengths.withLock { $0 }
        // 8 and the two 4s refused, the four 2s taken (halves are sent first half first: 8, 4, 2, 2, 4, 2, 2).
        #expect(lengths.count == 7, "\(lengths)")
        #expect(lengths.filter { $0 > 600_000 }.count == 3 && lengths.filter { $0 <= 600_000 }.count == 4)

        // One document too large alone: its 413 row when the refusal was read, a transient network error (the batch
        // retried, nothing counted) when the close was; never taken as written.
        let big = FetchedRevision(id: "big", rev: "1-a", body: .object([("pad", .string(pad + pad + pad))]))
        do {
            let alone = try await remote.bulkDocs([big], newEdits: false)
            #expect(alone.count == 1 && alone.first?["error"]?.stringValue == "too_large", "\(alone)")
        } catch let error as ReplicationError {
            #expect(error.isTransient, "\(error)")
        }
    }
}
