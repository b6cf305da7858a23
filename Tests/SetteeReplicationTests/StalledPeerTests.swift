import NIOCore
import SetteeCore
import SetteeJSON
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeReplication

/// A peer that sends a response head and then nothing, the connection left open: each read fails as a transient
/// network error within its bound (a continuous feed's from the heartbeat asked), and the replicator retries;
/// a feed of heartbeats only is not cut. A peer that drips a byte now and then fails the request at its deadline
/// (a continuous feed: at its idle bound, since a byte is not a line).
@Suite struct StalledPeerTests {
    /// `operation`'s outcome, or nil once `seconds` pass (the operation is then cancelled): so a reader without a
    /// bound fails these tests in seconds instead of waiting as long as the peer keeps the connection. It runs on
    /// `TestThreadPool.oneThread`, as the fake peer does: what these tests assert is how long a reader hears nothing,
    /// and on the cooperative pool, beside suites that block its 2 threads, neither side ran for seconds at a time
    /// (a CI run: a 1 s heartbeat feed cut after 6 s unread, the test taking 242 s instead of 13).
    static func within<T: Sendable>(
        _ seconds: Double, _ operation: @escaping @Sendable () async throws -> T
    ) async -> Result<T, any Error>? {
        await withTaskExecutorPreference(TestThreadPool.oneThread) { await Self.race(seconds, operation) }
    }

    private static func race<T: Sendable>(
        _ seconds: Double, _ operation: @escaping @Sendable () async throws -> T
    ) async -> Result<T, any Error>? {
        await withTaskGroup(of: Result<T, any Error>?.self) { group in
            group.addTask {
                do { return .success(try await operation()) } catch { return .failure(error) }
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(seconds))
                return nil
            }
            defer { group.cancelAll() }
            return await group.next() ?? nil
        }
    }

    /// Expects `outcome` to be a `ReplicationError.network` naming `what`.
    static func expectNetworkFailure<T>(
        _ outcome: Result<T, any Error>?, _ what: String, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        guard case .failure(let error as ReplicationError)? = outcome, case .network(let why) = error else {
            Issue.record("expected a network error, got \(String(describing: outcome))", sourceLocation: sourceLocation)
            return
        }
        #expect(error.isTransient, sourceLocation: sourceLocation)
        #expect(why.contains(what) && why.contains("nothing from the peer"), "\(why)", sourceLocation: sourceLocation)
    }

    // Proves a continuous `_changes` whose peer sends the head and then nothing (no heartbeat, no row) fails as a
    // network error after `changesFeedIdleHeartbeats` of the heartbeat asked, not before, and not at the head's
    // deadline (30 s here). Before, the feed waited for ever (here: until the guard's 20 s, which answers nil). A
    // network error inside the guard is therefore the idle bound's: no upper bound on the time is asserted, since a
    // loaded CI machine delayed the failure over 3 s past the bound while it was still the idle bound's.
    @Test func aContinuousFeedSilentAfterItsHeadFailsAfterAFewHeartbeats() async throws {
        let peer = StreamingChangesPeer()
        let url = try await peer.start()
        defer { peer.stop() }
        peer.script.withLock { $0 = .silentAfterHead }
        let remote = try RemoteEndpoint(url: url, requestTimeoutMs: 30_000, longpollTimeoutMs: 30_000)
        let heartbeatMs = 150
        let bound = Duration.milliseconds(heartbeatMs) * ReplicationLimits.changesFeedIdleHeartbeats
        let clock = ContinuousClock()
        let t0 = clock.now
        let outcome = await Self.within(20) {
            try await remote.changes(since: nil, limit: 100, feed: .continuous, filter: nil, heartbeatMs: heartbeatMs)
        }
        let took = clock.now - t0
        Self.expectNetworkFailure(outcome, "continuous _changes")
        #expect(took >= bound, "failed after \(took), bound \(bound)")
    }

    // Proves a continuous feed that sends only heartbeats, at the interval asked, for more than twice the idle bound
    // is not cut: its rows, sent after them, are read.
    @Test func aFeedOfHeartbeatsOnlyIsNotCut() async throws {
        let peer = StreamingChangesPeer()
        let url = try await peer.start()
        defer { peer.stop() }
        // 1 s heartbeats (an idle bound of 6 s) over 13 s, and a 40 s guard. The peer and the reader run on a thread
        // of their own (`within`, `StreamingChangesPeer`): on the cooperative pool, CI runs cut 150 ms, 300 ms and
        // 1 s heartbeat feeds after their bound with nothing heard, while alone the test passed every time.
        let heartbeatMs = 1_000
        let bound = Duration.milliseconds(heartbeatMs) * ReplicationLimits.changesFeedIdleHeartbeats
        peer.script.withLock { $0 = .heartbeatsThenRows(everyMs: heartbeatMs, forMs: 13_000) }
        #expect(bound * 2 < .milliseconds(13_000))
        let remote = try RemoteEndpoint(url: url, requestTimeoutMs: 30_000, longpollTimeoutMs: 30_000)
        let outcome = await Self.within(40) {
            try await remote.changes(since: nil, limit: 100, feed: .continuous, filter: nil, heartbeatMs: heartbeatMs)
        }
        guard case .success(let batch)? = outcome else {
            Issue.record("expected the rows, got \(String(describing: outcome))")
            return
        }
        #expect(batch.rows.map(\.id) == ["d1", "d2", "d3"])
    }

    // Proves a one-shot or longpoll request whose peer sends the head and then no body fails as a network error once
    // its deadline's worth of silence passes (AsyncHTTPClient's deadline ends with the head): the request timeout
    // for a normal `_changes`, the longpoll timeout plus it for a longpoll. Before, both waited for ever.
    @Test func requestsWhoseBodyNeverComesFail() async throws {
        let peer = StreamingChangesPeer()
        let url = try await peer.start()
        defer { peer.stop() }
        peer.script.withLock { $0 = .silentAfterHead }
        let remote = try RemoteEndpoint(url: url, requestTimeoutMs: 500, longpollTimeoutMs: 300)
        let clock = ContinuousClock()
        for (feed, bound) in [(ChangesFeedKind.normal, Duration.milliseconds(500)), (.longpoll, .milliseconds(800))] {
            let t0 = clock.now
            let outcome = await Self.within(20) {
                try await remote.changes(since: nil, limit: 100, feed: feed, filter: nil, heartbeatMs: nil)
            }
            let took = clock.now - t0
            Self.expectNetworkFailure(outcome, "GET _changes")
            // Without a bound the read waits until the guard's 20 s (nil); no upper bound on the time, as above.
            #expect(took >= bound, "\(feed): failed after \(took), bound \(bound)")
        }
    }

    // Proves the replicator meets a source whose `_changes` stalls after its head with its ordinary error path:
    // the step fails as a network error, the replication reports it (`lastError`, `offline`) and retries with
    // backoff, again and again (continuous). Before, it waited on the first request for ever.
    @Test func theReplicatorRetriesASourceThatStalls() async throws {
        let peer = StreamingChangesPeer()
        let url = try await peer.start()
        defer { peer.stop() }
        peer.script.withLock { $0 = .silentAfterHead }
        let source = try RemoteEndpoint(url: url, requestTimeoutMs: 300, longpollTimeoutMs: 300)
        var options = ReplicatorOptions(continuous: true)
        options.backoffInitialMs = 5
        options.backoffMaxMs = 20
        let r = Replicator(source: source, target: MemoryEndpoint("b"), options: options)
        r.start()
        let retried = await Self.within(10) {
            while peer.changesRequests.withLock({ $0 }) < 3 { try await Task.sleep(for: .milliseconds(20)) }
            return r.currentStatus
        }
        await r.stop()
        guard case .success(let status)? = retried else {
            Issue.record("no retries within 10 s: \(peer.changesRequests.withLock { $0 }) _changes requests")
            return
        }
        guard case .network(let why)? = status.lastError else {
            Issue.record("expected a network error, got \(status)")
            return
        }
        #expect(why.contains("nothing from the peer"), "\(why)")
    }

    /// Expects `outcome` to be a `ReplicationError.network` naming `what` and the request's deadline.
    static func expectDeadlineFailure<T>(
        _ outcome: Result<T, any Error>?, _ what: String, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        guard case .failure(let error as ReplicationError)? = outcome, case .network(let why) = error else {
            Issue.record("expected a network error, got \(String(describing: outcome))", sourceLocation: sourceLocation)
            return
        }
        #expect(error.isTransient, sourceLocation: sourceLocation)
        #expect(why.contains(what) && why.contains("deadline"), "\(why)", sourceLocation: sourceLocation)
    }

    // Proves a normal or longpoll request whose peer sends the head and then one byte every 100 ms, never silent for
    // the 2 s idle bound, fails as a network error at its whole-request deadline (4 s; a longpoll's is its 300 ms
    // timeout plus that), not before. Before (a bound on silence only) it was read for as long as the peer
    // dripped: here until the guard's 20 s, which answers nil.
    @Test func requestsWhoseBodyDripsFailAtTheirDeadline() async throws {
        let peer = StreamingChangesPeer()
        let url = try await peer.start()
        defer { peer.stop() }
        peer.script.withLock { $0 = .drip(everyMs: 100) }
        // A head and silence bound of 2 s, well above the 100 ms drip: under a loaded parallel run, 500 ms let the
        // head or a gap in the drip fail the request first, as silence rather than at its deadline.
        let remote = try RemoteEndpoint(
            url: url, requestTimeoutMs: 2_000, longpollTimeoutMs: 300, requestDeadlineMs: 4_000)
        let clock = ContinuousClock()
        for (feed, bound) in [
            (ChangesFeedKind.normal, Duration.milliseconds(4_000)), (.longpoll, .milliseconds(4_300)),
        ] {
            let t0 = clock.now
            let outcome = await Self.within(20) {
                try await remote.changes(since: nil, limit: 100, feed: feed, filter: nil, heartbeatMs: nil)
            }
            let took = clock.now - t0
            Self.expectDeadlineFailure(outcome, "GET _changes")
            #expect(took >= bound, "\(feed): failed after \(took), bound \(bound)")
        }
    }

    // Proves a continuous feed whose peer drips a byte every 50 ms and never finishes a line fails at its idle bound
    // (6 heartbeats of 150 ms): only whole lines count as hearing from the peer. Before, every byte reset the bound
    // and the feed was read until the guard's 20 s.
    @Test func aContinuousFeedThatDripsWithoutALineFailsAtItsIdleBound() async throws {
        let peer = StreamingChangesPeer()
        let url = try await peer.start()
        defer { peer.stop() }
        peer.script.withLock { $0 = .drip(everyMs: 50) }
        let remote = try RemoteEndpoint(url: url, requestTimeoutMs: 30_000, longpollTimeoutMs: 30_000)
        let heartbeatMs = 150
        let bound = Duration.milliseconds(heartbeatMs) * ReplicationLimits.changesFeedIdleHeartbeats
        let clock = ContinuousClock()
        let t0 = clock.now
        let outcome = await Self.within(20) {
            try await remote.changes(since: nil, limit: 100, feed: .continuous, filter: nil, heartbeatMs: heartbeatMs)
        }
        let took = clock.now - t0
        Self.expectNetworkFailure(outcome, "continuous _changes")
        #expect(took >= bound, "failed after \(took), bound \(bound)")
    }

    // Proves a one-shot replicator whose source drips its `_changes` answer reports the deadline's network error
    // and stops after its attempts, instead of hanging on the first request. Before, it was still reading the
    // first answer at the guard's 20 s.
    @Test func theReplicatorReportsASourceThatDrips() async throws {
        let peer = StreamingChangesPeer()
        let url = try await peer.start()
        defer { peer.stop() }
        peer.script.withLock { $0 = .drip(everyMs: 100) }
        let source = try RemoteEndpoint(
            url: url, requestTimeoutMs: 2_000, longpollTimeoutMs: 300, requestDeadlineMs: 3_000)
        var options = ReplicatorOptions(continuous: false, maxAttempts: 2)
        options.backoffInitialMs = 5
        options.backoffMaxMs = 20
        let r = Replicator(source: source, target: MemoryEndpoint("b"), options: options)
        r.start()
        let stopped = await Self.within(20) {
            while r.currentStatus.activity != .stopped { try await Task.sleep(for: .milliseconds(20)) }
            return r.currentStatus
        }
        await r.stop()
        guard case .success(let status)? = stopped else {
            Issue.record("the replicator did not stop within 20 s: \(r.currentStatus)")
            return
        }
        #expect(status.activity == .stopped)
        #expect(peer.changesRequests.withLock { $0 } == 2)
        guard case .network(let why)? = status.lastError else {
            Issue.record("expected a network error, got \(status)")
            return
        }
        #expect(why.contains("deadline"), "\(why)")
    }

    // Proves an upload is given the time its link takes while the link keeps taking it: 8 MiB to a peer reading
    // 2 MiB/s through a small receive buffer, with a 2 s silence bound and a least time of the body at 64 MiB/s (so
    // 2.1 s), is answered after about 4 s: each piece written to the socket is progress. Before, a request with a
    // body had only that least time for its head (`headTimeout`), and this failed after 2.1 s; at the default
    // 32 KiB/s, any link slower than that failed a body larger than it carries in the time.
    @Test func anUploadIsGivenTheTimeItsLinkTakes() async throws {
        Self.expectAnswered(
            try await Self.upload(
                Self.docs(32), bytesPerSecond: 2 << 20, requestTimeoutMs: 2000, uploadMinBytesPerSecond: 64 << 20),
            read: 8 << 20, after: .seconds(3))
    }

    // Proves what the kernel's buffers take of a body at once is still given its least time: 1 MiB, most of which
    // loopback's buffers take as soon as it is written, to a peer draining them at 256 KiB/s, with a 1 s silence
    // bound, is answered after about 4 s, within the default least time (1 s plus 1 MiB at 32 KiB/s).
    @Test func whatTheBuffersHoldIsGivenItsLeastTime() async throws {
        Self.expectAnswered(
            try await Self.upload(
                Self.docs(4), bytesPerSecond: 256 << 10, requestTimeoutMs: 1000,
                uploadMinBytesPerSecond: ReplicationLimits.uploadMinBytesPerSecond),
            read: 1 << 20, after: .seconds(2))
    }

    /// That an upload (`upload`) was answered (the `[]` a `SlowReadingPeer` answers), its peer having read more
    /// than `read` bytes, after more than `after`: the link's time, not the buffers'.
    static func expectAnswered(
        _ upload: (outcome: Result<[JSON], any Error>?, took: Duration, read: Int), read: Int, after: Duration,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        guard case .success(let rows)? = upload.outcome else {
            Issue.record("\(String(describing: upload.outcome)) after \(upload.took)", sourceLocation: sourceLocation)
            return
        }
        #expect(rows.isEmpty, sourceLocation: sourceLocation)
        #expect(upload.read > read, sourceLocation: sourceLocation)
        #expect(upload.took > after, "answered after \(upload.took)", sourceLocation: sourceLocation)
    }

    // Proves an upload whose link stops taking it fails at the silence bound once its least time is past, not at the
    // whole request's deadline: a peer that reads nothing for 20 s, a 1 s bound, a 30 s deadline. And a peer that
    // reads a body and then answers nothing fails the same way once the body is sent.
    @Test func aStalledUploadOrAnUnansweredOneFailsAtTheSilenceBound() async throws {
        let (outcome, took, read) = try await Self.upload(
            Self.docs(4), pauseMs: 20_000, requestTimeoutMs: 1000, uploadMinBytesPerSecond: 64 << 20)
        guard case .failure(let error as ReplicationError)? = outcome, case .network(let why) = error else {
            Issue.record("expected a network error, got \(String(describing: outcome)) after \(took)")
            return
        }
        #expect(error.isTransient)
        #expect(why.contains("nothing from the peer"), "\(why)")
        #expect(took < .seconds(15), "failed after \(took)")
        #expect(read == 0)

        let peer = StreamingChangesPeer()
        let url = try await peer.start()
        defer { peer.stop() }
        let silentRemote = try RemoteEndpoint(
            url: url, requestTimeoutMs: 500, requestDeadlineMs: 20_000, uploadMinBytesPerSecond: 4 << 20)
        peer.bulkDocsScript.withLock { $0 = .silentAfterBody }
        let clock = ContinuousClock()
        let t1 = clock.now
        let silent = await Self.within(20) { try await silentRemote.bulkDocs(Self.docs(1), newEdits: false) }
        guard case .failure(let error as ReplicationError)? = silent, case .network(let why) = error else {
            Issue.record("expected a network error, got \(String(describing: silent))")
            return
        }
        #expect(error.isTransient)
        #expect(why.contains("nothing from the peer"), "\(why)")
        #expect(clock.now - t1 < .seconds(10), "failed after \(clock.now - t1)")
    }

    /// `count` documents of 256 KiB each.
    static func docs(_ count: Int) -> [FetchedRevision] {
        let pad = JSON.string(String(repeating: "x", count: 1 << 18))
        return (0..<count).map { FetchedRevision(id: "d\($0)", rev: "1-a", body: .object([("pad", pad)])) }
    }

    /// `docs` pushed (`_bulk_docs`, 30 s deadline) to a `SlowReadingPeer`: the outcome, how long it took and how
    /// much of the body the peer read.
    static func upload(
        _ docs: [FetchedRevision], pauseMs: Int = 0, bytesPerSecond: Int? = nil, requestTimeoutMs: Int,
        uploadMinBytesPerSecond: Int
    ) async throws -> (outcome: Result<[JSON], any Error>?, took: Duration, read: Int) {
        let slow = SlowReadingPeer(pauseMs: pauseMs, bytesPerSecond: bytesPerSecond)
        defer { slow.stop() }
        try #require(slow.port > 0)
        let remote = try RemoteEndpoint(
            url: "http://127.0.0.1:\(slow.port)/db", requestTimeoutMs: requestTimeoutMs, requestDeadlineMs: 30_000,
            uploadMinBytesPerSecond: uploadMinBytesPerSecond)
        let clock = ContinuousClock()
        let t0 = clock.now
        let outcome = await Self.within(30) { try await remote.bulkDocs(docs, newEdits: false) }
        return (outcome, clock.now - t0, slow.bodyBytes.withLock { $0 })
    }

    // Proves the head timeout's arithmetic: no body, the timeout; a body, plus its upload at the rate; never past
    // the whole request's deadline, and no overflow for any size or rate.
    @Test func theHeadTimeoutGrowsWithTheBodyUpToTheDeadline() {
        let timeout = TimeAmount.seconds(60)
        let total = TimeAmount.minutes(15)
        #expect(RemoteEndpoint.headTimeout(timeout, bodyBytes: 0, rate: 32 * 1024, total: total) == timeout)
        #expect(
            RemoteEndpoint.headTimeout(timeout, bodyBytes: 3_200 * 1024, rate: 32 * 1024, total: total)
                == .seconds(160))
        #expect(RemoteEndpoint.headTimeout(timeout, bodyBytes: 512 << 20, rate: 32 * 1024, total: total) == total)
        #expect(RemoteEndpoint.headTimeout(timeout, bodyBytes: .max, rate: 1, total: total) == total)
        #expect(RemoteEndpoint.headTimeout(timeout, bodyBytes: .max, rate: 0, total: total) == total)
        #expect(RemoteEndpoint.headTimeout(.seconds(10), bodyBytes: 1, rate: 1, total: .seconds(5)) == .seconds(5))
    }
}
