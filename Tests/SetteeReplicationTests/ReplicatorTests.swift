import SetteeJSON
import SetteeReplication
import Synchronization
import Testing

@Suite struct ReplicatorTests {
    private func fill(_ e: MemoryEndpoint, _ range: ClosedRange<Int>) {
        for i in range { e.put("doc\(i)", rev: "1-a\(i)", body: [("n", .number(Double(i)))]) }
    }

    private func fast(_ o: ReplicatorOptions = .init()) -> ReplicatorOptions {
        var o = o
        o.backoffInitialMs = 5
        o.backoffMaxMs = 20
        return o
    }

    // Proves a one-shot replication copies every document (history and attachment bytes included),
    // writes the checkpoint on both sides, and a second run resumes from it: only the new documents
    // travel and its first `_changes` asks `since` the checkpoint.
    @Test func oneShotThenResumeFromCheckpoint() async throws {
        let a = MemoryEndpoint("a")
        let b = MemoryEndpoint("b")
        fill(a, 1...250)
        a.put(
            "doc1", rev: "2-b1", parent: "1-a1", body: [("n", .number(10))],
            attachments: ["p.bin": [0, 1, 2, 0x0D, 0x0A]])
        let r1 = Replicator(source: a, target: b, options: fast(.init(batchSize: 100)))
        r1.start()
        let s1 = await r1.waitUntilStopped()
        #expect(s1.activity == .stopped && s1.lastError == nil)
        #expect(s1.completed == 250 && s1.total == 250 && s1.docsWritten == 250)
        let bdocs = b.docs
        #expect(bdocs.count == 250)
        #expect(bdocs["doc1"]?.leaves == ["2-b1"])
        #expect(bdocs["doc1"]?.revs["2-b1"]?.parent == "1-a1")
        #expect(bdocs["doc1"]?.revs["2-b1"]?.attachments["p.bin"] == [0, 1, 2, 0x0D, 0x0A])
        #expect(try await a.getLocal(r1.replicationID)?["source_last_seq"] != nil)
        #expect(try await b.getLocal(r1.replicationID)?["_rev"]?.stringValue == "0-3")

        fill(a, 251...260)
        let uploadedBefore = b.store.withLock { $0.docsUploaded }
        let r2 = Replicator(source: a, target: b, options: fast(.init(batchSize: 100)))
        #expect(r2.replicationID == r1.replicationID)
        r2.start()
        let s2 = await r2.waitUntilStopped()
        #expect(s2.lastError == nil && s2.completed == 10)
        #expect(b.store.withLock { $0.docsUploaded } - uploadedBefore == 10, "resumed, did not start over")
        #expect(a.store.withLock { $0.changesCalls.last(where: { $0 != nil }) } != nil)
        #expect(b.docs.count == 260)
    }

    // Regression (pushResumesAfterGatewayCrash lost 93 documents once): a target that acknowledges a
    // batch and then crashes before writing it to disk comes back without it. The replicator asks the
    // target to make its writes durable before each checkpoint; the changed instance_start_time shows the
    // restart, so the batch is sent again from the last checkpoint instead of being skipped for good.
    @Test func aTargetThatRestartedLosingABatchGetsItAgain() async throws {
        let a = MemoryEndpoint("a")
        let b = MemoryEndpoint("b")
        fill(a, 1...300)
        b.store.withLock { $0.crashAfterBulkDocs = 1 }  // the second batch is acknowledged, then lost
        let r = Replicator(source: a, target: b, options: fast(.init(batchSize: 100)))
        r.start()
        let s = await r.waitUntilStopped()
        #expect(s.lastError == nil && s.completed == 300, "\(s)")
        let held = b.docs
        #expect(held.count == 300, "target holds \(held.count) of 300")
        #expect(b.store.withLock { $0.instance } == 2, "the crash happened")
        #expect(b.store.withLock { $0.docsUploaded } == 400, "the lost batch travelled twice")
    }

    // Proves transient failures of every step are retried (status goes offline, then completes) and that
    // per-document rejections are counted without stopping the replication.
    @Test func transientFailuresRetriedRejectionsCounted() async throws {
        let a = MemoryEndpoint("a")
        let b = MemoryEndpoint("b")
        fill(a, 1...30)
        a.fail("changes", times: 2)
        a.fail("bulkGet", times: 1)
        b.fail("revsDiff", times: 1)
        b.fail("bulkDocs", times: 2)
        b.fail("putLocal", times: 1)
        b.store.withLock { $0.rejected = ["doc7"] }
        let r = Replicator(source: a, target: b, options: fast(.init(batchSize: 10)))
        let seen = Mutex<Set<String>>([])
        let stream = r.status
        let watcher = Task {
            for await s in stream {
                seen.withLock { _ = $0.insert(s.activity.rawValue) }
                if s.activity == .stopped && s.total > 0 { break }
            }
        }
        r.start()
        let s = await r.waitUntilStopped()
        watcher.cancel()
        #expect(s.lastError == nil)
        #expect(s.completed == 30 && s.docWriteFailures == 1 && s.docsWritten == 29)
        #expect(b.docs.count == 29 && b.docs["doc7"] == nil)
        #expect(seen.withLock { $0.contains("offline") && $0.contains("busy") })
    }

    // Proves a permanent error (401) stops the replication with lastError instead of retrying forever.
    @Test func permanentErrorStops() async throws {
        struct Refusing: ReplicationEndpoint {
            func info() async throws -> JSON { .null }
            func changes(
                since: String?, limit: Int, feed: ChangesFeedKind, filter: ReplicationFilter?, heartbeatMs: Int?
            )
                async throws -> ChangesBatch
            { throw ReplicationError.http(status: 401, error: "unauthorized", reason: "Login required") }
            func revsDiff(_ request: [String: [String]]) async throws -> JSON { .null }
            func bulkGet(_ requests: [BulkGetRequest]) async throws -> [FetchedRevision] { [] }
            func bulkDocs(_ docs: [FetchedRevision], newEdits: Bool) async throws -> [JSON] { [] }
            func getLocal(_ id: String) async throws -> JSON? { nil }
            func putLocal(_ id: String, _ body: JSON) async throws {}
            func ensureFullCommit() async throws -> String? { nil }
        }
        let r = Replicator(source: Refusing(), target: MemoryEndpoint("b"), options: fast())
        r.start()
        let s = await r.waitUntilStopped()
        #expect(s.activity == .stopped)
        #expect(s.lastError == .http(status: 401, error: "unauthorized", reason: "Login required"))
    }

    // Proves continuous replication goes idle when caught up, delivers a later write, and stops on stop().
    @Test func continuousDeliversLaterWrites() async throws {
        let a = MemoryEndpoint("a")
        let b = MemoryEndpoint("b")
        fill(a, 1...5)
        let r = Replicator(source: a, target: b, options: fast(.init(continuous: true, batchSize: 50)))
        r.start()
        for await s in r.status where s.activity == .idle && s.completed == 5 { break }
        a.put("late", rev: "1-late")
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(10)
        while b.docs["late"] == nil && clock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(b.docs["late"]?.leaves == ["1-late"])
        await r.stop()
        #expect(r.currentStatus.activity == .stopped)
        #expect(await r.waitUntilStopped().activity == .stopped)
    }

    // Proves the policy hook defers syncing (status offline, nothing transferred) until it allows it, and
    // that a doc-id filter transfers only the listed documents.
    @Test func policyDefersAndDocIDFilter() async throws {
        let a = MemoryEndpoint("a")
        let b = MemoryEndpoint("b")
        fill(a, 1...20)
        let allowed = Mutex(false)
        var options = fast(.init(filter: .docIDs(["doc3", "doc9"]), policyRecheckMs: 10))
        options.policy = { allowed.withLock { $0 } }
        let r = Replicator(source: a, target: b, options: options)
        r.start()
        for await s in r.status where s.activity == .offline { break }
        #expect(b.docs.isEmpty)
        allowed.withLock { $0 = true }
        let s = await r.waitUntilStopped()
        #expect(s.lastError == nil && s.completed == 2)
        #expect(Set(b.docs.keys) == ["doc3", "doc9"])
    }

    // Proves a replicator that finished, restarted while the network is down, waits offline (waitUntilStopped does
    // not return the old run's end) and copies what is new once the network comes back.
    @Test func restartWhileOfflineWaitsForTheNetwork() async throws {
        let a = MemoryEndpoint("a")
        let b = MemoryEndpoint("b")
        fill(a, 1...10)
        let r = Replicator(source: a, target: b, options: fast(.init(batchSize: 10)))
        r.start()
        let first = await r.waitUntilStopped()
        #expect(first.lastError == nil && b.docs.count == 10)
        fill(a, 11...25)
        r.setNetworkReachable(false)
        r.start()
        #expect(r.currentStatus.activity == .offline)
        #expect(b.docs.count == 10)
        r.setNetworkReachable(true)
        let second = await r.waitUntilStopped()
        #expect(second.lastError == nil && second.activity == .stopped)
        #expect(b.docs.count == 25)
    }

    // Proves going offline abandons the work in flight and coming back online resumes to completion.
    @Test func networkDownAndUp() async throws {
        let a = MemoryEndpoint("a")
        let b = MemoryEndpoint("b")
        fill(a, 1...40)
        let r = Replicator(source: a, target: b, options: fast(.init(batchSize: 10)))
        r.setNetworkReachable(false)
        r.start()
        r.setNetworkReachable(false)
        #expect(r.currentStatus.activity == .offline)
        r.setNetworkReachable(true)
        let s = await r.waitUntilStopped()
        #expect(s.lastError == nil && b.docs.count == 40)
    }
}
