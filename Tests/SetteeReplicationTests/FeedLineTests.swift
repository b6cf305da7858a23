import HTTPTypes
import Hummingbird
import NIOCore
import SetteeJSON
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeReplication

/// A continuous `_changes` feed's lines: bounded, scanned once, whole however the peer cuts them.
@Suite struct FeedLineTests {
    // Proves rows split anywhere, down to one byte per chunk, come out whole, and a line feed is looked for
    // once per byte (the scan resumes where it stopped, so a line in many chunks costs linear time).
    @Test func feedLinesSplitAcrossChunksParse() throws {
        let rows = (1...50).map { #"{"seq":\#($0),"id":"doc\#($0)","changes":[{"rev":"1-a\#($0)"}]}"# }
        let body = Array((rows.joined(separator: "\n") + "\n\n").utf8)
        for chunkSize in [1, 2, 7, 64, body.count] {
            var buffer = FeedLineBuffer(maxLineBytes: 1024)
            var lines: [String] = []
            var offset = 0
            while offset < body.count {
                let end = min(offset + chunkSize, body.count)
                try buffer.append(body[offset..<end])
                offset = end
                while let line = try buffer.nextLine() { lines.append(String(decoding: line, as: UTF8.self)) }
            }
            #expect(lines == rows + [""], "chunk size \(chunkSize)")
            #expect(buffer.heldBytes == 0)
            #expect(buffer.bytesScanned == body.count, "chunk size \(chunkSize)")
        }
        // One long line in 1,000 pieces: each byte looked at once (rescanning from the line's start, as the
        // reader did, looks at ~500 times as many).
        var buffer = FeedLineBuffer(maxLineBytes: 1 << 20)
        let piece = [UInt8](repeating: 0x61, count: 1000)
        for _ in 0..<1000 {
            try buffer.append(piece)
            #expect(try buffer.nextLine() == nil)
        }
        try buffer.append([0x0A])
        #expect(try buffer.nextLine()?.count == 1_000_000)
        #expect(buffer.bytesScanned == 1_000_001)
    }

    // Proves a line without a line feed fails once it would pass the bound, and the buffer never holds more
    // than the bound of it; a finished line longer than the bound inside one chunk is refused too.
    @Test func aLineWithoutLineFeedIsBounded() throws {
        let limit = 4096
        var buffer = FeedLineBuffer(maxLineBytes: limit)
        var thrown: ReplicationError?
        var sent = 0
        while sent < 10 * limit {
            do {
                try buffer.append([UInt8](repeating: 0x61, count: 100))
            } catch {
                thrown = error
                break
            }
            sent += 100
            #expect(buffer.heldBytes <= limit)
            #expect(try buffer.nextLine() == nil)
        }
        #expect(sent <= limit, "failed at the bound, not after \(sent) bytes")
        guard case .badResponse(let why)? = thrown else {
            Issue.record("expected badResponse, got \(String(describing: thrown))")
            return
        }
        #expect(why.contains("longer than \(limit) bytes"))

        var whole = FeedLineBuffer(maxLineBytes: 10)
        try whole.append(Array("0123456789ABC\nok\n".utf8))
        #expect(throws: ReplicationError.self) { try whole.nextLine() }
    }

    // Proves, over a socket, a peer streaming a continuous `_changes` body without a line feed fails the feed
    // with the bound's `badResponse` at once (before, the endpoint buffered it until the request deadline, and
    // without a deadline until memory ran out), and a peer sending real rows a few bytes per write is read whole.
    // Its reader runs on a thread of its own, as the peer does: the 2 s it asserts are not the cooperative pool's
    // to lose (`StalledPeerTests.within`).
    @Test func continuousFeedFailsOnAnEndlessLine() async throws {
        try await withTaskExecutorPreference(TestThreadPool.oneThread) { try await Self.endlessLine() }
    }

    private static func endlessLine() async throws {
        let limit = 64 * 1024
        let peer = StreamingChangesPeer()
        let url = try await peer.start()
        defer { peer.stop() }
        let remote = try RemoteEndpoint(
            url: url, requestTimeoutMs: 3_000, longpollTimeoutMs: 1_000, maxChangesLineBytes: limit)

        peer.script.withLock { $0 = .endlessLine(totalBytes: 64 * limit) }
        let clock = ContinuousClock()
        let t0 = clock.now
        do {
            _ = try await remote.changes(since: nil, limit: 100, feed: .continuous, filter: nil, heartbeatMs: 1000)
            Issue.record("the feed returned")
        } catch let error as ReplicationError {
            guard case .badResponse(let why) = error else {
                Issue.record("expected badResponse, got \(error)")
                return
            }
            #expect(why.contains("longer than \(limit) bytes"))
        }
        #expect(clock.now - t0 < .seconds(2), "failed at the bound, not at the deadline")

        peer.script.withLock { $0 = .rowsInPieces }
        let batch = try await remote.changes(since: nil, limit: 100, feed: .continuous, filter: nil, heartbeatMs: 1000)
        #expect(batch.rows.map(\.id) == ["d1", "d2", "d3"])
    }
}

/// What a batch of `_changes` may make the replicator hold, and keep.
@Suite struct ChangesBatchBoundTests {
    /// Proves a continuous feed's rows together stay within `maxResponseBody`: 200 rows of 64 KiB each (a padded
    /// `doc` the replicator never asked for) fail the feed with `badResponse` once past a 1 MiB bound, where each line
    /// was within its own bound and the batch held every row (its `doc` too: rows no longer keep one). Rows within
    /// the bound are read.
    @Test func continuousRowsAreBoundedTogether() async throws {
        try await withTaskExecutorPreference(TestThreadPool.oneThread) {
            let peer = StreamingChangesPeer()
            let url = try await peer.start()
            defer { peer.stop() }
            let remote = try RemoteEndpoint(
                url: url, requestTimeoutMs: 3_000, longpollTimeoutMs: 1_000, maxResponseBody: 1024 * 1024)
            peer.script.withLock { $0 = .largeRows(count: 200, rowBytes: 64 * 1024) }
            do {
                _ = try await remote.changes(since: nil, limit: 200, feed: .continuous, filter: nil, heartbeatMs: 500)
                Issue.record("the feed returned")
            } catch let error as ReplicationError {
                guard case .badResponse(let why) = error else {
                    Issue.record("expected badResponse, got \(error)")
                    return
                }
                #expect(why.contains("past \(1024 * 1024) bytes"), "\(why)")
            }
            peer.script.withLock { $0 = .largeRows(count: 5, rowBytes: 1024) }
            let batch = try await remote.changes(
                since: nil, limit: 5, feed: .continuous, filter: nil, heartbeatMs: 500)
            #expect(batch.rows.map(\.id) == ["d1", "d2", "d3", "d4", "d5"])
        }
    }

    /// Proves a sequence the replicator could not keep in its checkpoint is refused where it is read: a `last_seq`
    /// of 126 nested arrays (continuous and normal answers), a row's 100 KB string `seq`. Before, it was recorded
    /// three levels deeper in the checkpoint, which then failed the depth bound on every read (the replication
    /// could not start again). Numbers, strings and BigCouch's `[n, "…"]` pass.
    @Test func unusableSequencesAreRefused() async throws {
        try await withTaskExecutorPreference(TestThreadPool.oneThread) {
            let peer = StreamingChangesPeer()
            let url = try await peer.start()
            defer { peer.stop() }
            let remote = try RemoteEndpoint(url: url, requestTimeoutMs: 3_000, longpollTimeoutMs: 1_000)
            peer.script.withLock { $0 = .deepLastSeq(depth: 126) }
            await #expect(throws: ReplicationError.self) {
                _ = try await remote.changes(since: nil, limit: 10, feed: .continuous, filter: nil, heartbeatMs: 500)
            }
        }
        let deep = String(repeating: "[", count: 126) + "1" + String(repeating: "]", count: 126)
        let long = String(repeating: "s", count: 100_000)
        for text in [
            #"{"results":[{"seq":1,"id":"a","changes":[]}],"last_seq":\#(deep)}"#,
            #"{"results":[{"seq":"\#(long)","id":"a","changes":[]}],"last_seq":1}"#,
        ] {
            #expect(throws: ReplicationError.self) { _ = try ChangesBatch(json: try JSON.parse(Array(text.utf8))) }
        }
        let fine =
            #"{"results":[{"seq":"12-g1AAAA","id":"a","changes":[]},{"seq":[3,"x"],"id":"b","changes":[]}],"last_seq":7}"#
        let batch = try ChangesBatch(json: try JSON.parse(Array(fine.utf8)))
        #expect(batch.rows.count == 2 && batch.lastSeq == SequenceID(7))
    }
}

/// A peer whose `_changes` (any feed) sends what the test scripts, then keeps the connection open. It has no
/// checkpoints (`_local` answers 404), so a replicator can run against it.
final class StreamingChangesPeer: Sendable {
    enum Script: Sendable {
        /// `totalBytes` of `a` in 16 KiB writes, no line feed, then the end of the body 3 s later.
        case endlessLine(totalBytes: Int)
        /// Three rows and a heartbeat, written 5 bytes at a time.
        case rowsInPieces
        /// The response head, then nothing.
        case silentAfterHead
        /// A heartbeat every `everyMs` for `forMs`, then `rowsInPieces`' rows.
        case heartbeatsThenRows(everyMs: Int, forMs: Int)
        /// One space every `everyMs`, never a line feed, for as long as the client reads.
        case drip(everyMs: Int)
        /// `count` rows of about `rowBytes` each (a padded `doc`), no heartbeat.
        case largeRows(count: Int, rowBytes: Int)
        /// One row, then a `last_seq` line of `depth` nested arrays.
        case deepLastSeq(depth: Int)
    }
    let script = Mutex(Script.rowsInPieces)
    /// What its `_bulk_docs` does with a request.
    enum BulkDocsScript: Sendable {
        /// Reads the body, then answers `[]`.
        case answer
        /// Reads the body, then answers nothing for 60 s.
        case silentAfterBody
    }
    let bulkDocsScript = Mutex(BulkDocsScript.answer)
    /// Bytes of `_bulk_docs` bodies read.
    let bulkDocsBytes = Mutex(0)
    /// Rows `d1`, `d2`, `d3`, one per line.
    static let threeRows = (1...3).map { #"{"seq":\#($0),"id":"d\#($0)","changes":[{"rev":"1-a\#($0)"}]}"# + "\n" }
        .joined()
    /// `_changes` requests received.
    let changesRequests = Mutex(0)
    private let task = Mutex<Task<Void, any Error>?>(nil)

    func start() async throws -> String {
        let router = Router(context: BasicRequestContext.self)
        router.get("/db/_local/:id") { _, _ in
            Response(
                status: .notFound, headers: [.contentType: "application/json"],
                body: ResponseBody(byteBuffer: ByteBuffer(string: #"{"error":"not_found","reason":"missing"}"#)))
        }
        router.post("/db/_bulk_docs") { request, _ in
            let script = self.bulkDocsScript.withLock { $0 }
            for try await chunk in request.body {
                self.bulkDocsBytes.withLock { $0 += chunk.readableBytes }
            }
            if case .silentAfterBody = script { try await Task.sleep(for: .seconds(60)) }
            return Response(
                status: .created, headers: [.contentType: "application/json"],
                body: ResponseBody(byteBuffer: ByteBuffer(string: "[]")))
        }
        router.get("/db/_changes") { _, _ in
            let script = self.script.withLock { $0 }
            self.changesRequests.withLock { $0 += 1 }
            return Response(
                status: .ok, headers: [.contentType: "application/json"],
                body: ResponseBody { writer in
                    switch script {
                    case .silentAfterHead:
                        break
                    case .drip(let every):
                        while true {
                            try await writer.write(ByteBuffer(string: " "))
                            try await Task.sleep(for: .milliseconds(every))
                        }
                    case .heartbeatsThenRows(let every, let duration):
                        let clock = ContinuousClock()
                        let end = clock.now + .milliseconds(duration)
                        while clock.now < end {
                            try await writer.write(ByteBuffer(string: "\n"))
                            try await Task.sleep(for: .milliseconds(every))
                        }
                        try await writer.write(ByteBuffer(string: Self.threeRows + "\n"))
                    case .endlessLine(let total):
                        let piece = ByteBuffer(bytes: [UInt8](repeating: 0x61, count: 16 * 1024))
                        var sent = 0
                        while sent < total {
                            try await writer.write(piece)
                            sent += piece.readableBytes
                        }
                    case .largeRows(let count, let rowBytes):
                        let pad = String(repeating: "x", count: rowBytes)
                        for n in 1...count {
                            let row = #"{"seq":\#(n),"id":"d\#(n)","changes":[{"rev":"1-a"}],"doc":{"p":"\#(pad)"}}"#
                            try await writer.write(ByteBuffer(string: row + "\n"))
                        }
                    case .deepLastSeq(let depth):
                        let seq = String(repeating: "[", count: depth) + "1" + String(repeating: "]", count: depth)
                        let lines = #"{"seq":1,"id":"d1","changes":[{"rev":"1-a"}]}"# + "\n" + #"{"last_seq":\#(seq)}"#
                        try await writer.write(ByteBuffer(string: lines + "\n\n"))
                    case .rowsInPieces:
                        let bytes = Array((Self.threeRows + "\n").utf8)
                        var i = 0
                        while i < bytes.count {
                            try await writer.write(ByteBuffer(bytes: bytes[i..<min(i + 5, bytes.count)]))
                            i += 5
                        }
                    }
                    // The endless line ends after 3 s, so a reader without the bound fails this test in seconds
                    // (it returns no rows); the rows' connection stays open (the client leaves at the heartbeat).
                    if case .endlessLine = script {
                        try await Task.sleep(for: .seconds(3))
                    } else {
                        try await Task.sleep(for: .seconds(60))
                    }
                    try await writer.finish(nil)
                })
        }
        // Its timing is what the stalled-peer tests assert, so it runs off the cooperative pool.
        return await ProtocolTestServer.serve(router, in: task, executor: TestThreadPool.oneThread)
    }

    func stop() { task.withLock { $0?.cancel() } }
}
