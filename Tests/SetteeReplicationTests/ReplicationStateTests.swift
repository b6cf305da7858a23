import SetteeJSON
import SetteeReplication
import Testing

@Suite struct ReplicationStateTests {
    typealias S = ReplicationState

    private func row(_ seq: Int, _ id: String, _ revs: String...) -> ChangeRow {
        ChangeRow(seq: SequenceID(seq), id: id, revs: revs)
    }

    private func fetched(_ id: String, _ rev: String) -> FetchedRevision {
        FetchedRevision(id: id, rev: rev, body: .object([("_id", .string(id)), ("_rev", .string(rev))]))
    }

    private func ok(_ id: String) -> JSON { .object([("id", .string(id)), ("ok", .bool(true))]) }

    /// A machine that has loaded empty checkpoints and asked for the first batch.
    private func started(_ options: S.Options) -> S {
        var s = S(options: options)
        #expect(s.handle(.start) == [.loadCheckpoints])
        #expect(s.status.activity == .connecting)
        let a = s.handle(.checkpointsLoaded(source: nil, target: nil, sessionID: "sess"))
        #expect(a == [.requestChanges(since: nil, limit: options.batchSize, feed: .normal)])
        return s
    }

    // Proves a peer cannot make the replicator store or send what it did not ask for: with a `_doc_ids` filter of
    // "a", a row of "b" is not followed; a `_revs_diff` answer naming an unlisted document or a revision that was not
    // asked about fetches nothing for it (a hostile push target would be sent documents outside the filter); a
    // fetched revision of a document that was not asked for is not uploaded (a hostile source wrote any local
    // document).
    @Test func onlyWhatWasAskedForIsFollowedFetchedOrStored() {
        var s = started(.init(batchSize: 10, documentIDs: ["a", "c"]))
        let batch = ChangesBatch(
            rows: [row(1, "a", "2-a"), row(2, "b", "1-b"), row(3, "c", "1-c")], lastSeq: SequenceID(3))
        #expect(s.handle(.changesReceived(batch)) == [.requestRevsDiff(["a": ["2-a"], "c": ["1-c"]])])
        #expect(s.status.total == 2)
        let diff = s.handle(
            .revsDiffAnswered([
                "a": RevsDiffEntry(missing: ["2-a", "9-zz"]), "b": RevsDiffEntry(missing: ["1-b"]),
                "c": RevsDiffEntry(missing: ["1-c"]),
            ]))
        #expect(
            diff == [
                .fetch([
                    BulkGetRequest(id: "a", rev: "2-a", attsSince: []),
                    BulkGetRequest(id: "c", rev: "1-c", attsSince: []),
                ])
            ])
        // A newer leaf of a document asked for is kept (`open_revs` with `latest=true` answers one).
        let answer = [fetched("a", "2-a"), fetched("b", "1-b"), fetched("a", "3-a"), fetched("c", "1-c")]
        #expect(
            s.handle(.revisionsFetched(answer)) == [
                .upload([fetched("a", "2-a"), fetched("a", "3-a"), fetched("c", "1-c")])
            ])
    }

    /// One batch under the first-pull rule: "a" live, "d" deleted with no revision in the target, "e" deleted with
    /// a possible ancestor in the target (it stored an earlier revision). Returns the fetch the diff asks and the
    /// machine's skipped count.
    private func firstPull(skips: Bool, targetEmpty: Bool) -> ([S.Action], Int) {
        var options = S.Options(batchSize: 10)
        options.skipsTombstonesIntoEmptyTarget = skips
        var s = S(options: options)
        _ = s.handle(.start)
        _ = s.handle(.checkpointsLoaded(source: nil, target: nil, sessionID: "s", targetEmpty: targetEmpty))
        let rows = [
            row(1, "a", "3-a"), ChangeRow(seq: SequenceID(2), id: "d", revs: ["2-d"], deleted: true),
            ChangeRow(seq: SequenceID(3), id: "e", revs: ["4-e"], deleted: true),
        ]
        _ = s.handle(.changesReceived(ChangesBatch(rows: rows, lastSeq: SequenceID(3))))
        let diff = s.handle(
            .revsDiffAnswered([
                "a": RevsDiffEntry(missing: ["3-a"]), "d": RevsDiffEntry(missing: ["2-d"]),
                "e": RevsDiffEntry(missing: ["4-e"], possibleAncestors: ["3-e"]),
            ]))
        return (diff, s.tombstonesSkipped)
    }

    // Proves Couchbase Lite's first-pull rule (issue 71: a fresh pull of a database with many tombstones): a pull into
    // a database empty at its start from no checkpoint does not fetch a deleted document the target holds no revision
    // of, and still fetches the deletion of a document it holds (here "e", stored live earlier in the same pull: no
    // race with a deletion made while the pull runs); without the option, or into a database that held something,
    // every deletion is fetched.
    @Test func aFirstPullIntoAnEmptyDatabaseSkipsOnlyTombstonesItNeverHeld() {
        let a = BulkGetRequest(id: "a", rev: "3-a", attsSince: [])
        let d = BulkGetRequest(id: "d", rev: "2-d", attsSince: [])
        let e = BulkGetRequest(id: "e", rev: "4-e", attsSince: ["3-e"])
        let (fresh, skipped) = firstPull(skips: true, targetEmpty: true)
        #expect(fresh == [.fetch([a, e])] && skipped == 1)
        let (held, heldSkipped) = firstPull(skips: true, targetEmpty: false)
        #expect(held == [.fetch([a, d, e])] && heldSkipped == 0)
        let (off, offSkipped) = firstPull(skips: false, targetEmpty: true)
        #expect(off == [.fetch([a, d, e])] && offSkipped == 0)
    }

    // Proves the one-shot happy path: changes → revs_diff of every leaf → fetch only what is missing →
    // upload → checkpoint at the batch's last seq → next batch → an empty batch ends it with counts right.
    @Test func oneShotHappyPath() {
        var s = started(.init(batchSize: 2))
        let batch = ChangesBatch(rows: [row(1, "a", "1-a"), row(2, "b", "2-b", "2-c")], lastSeq: SequenceID(2))
        #expect(s.handle(.changesReceived(batch)) == [.requestRevsDiff(["a": ["1-a"], "b": ["2-b", "2-c"]])])
        #expect(s.status.activity == .busy && s.status.total == 2)
        let diff = s.handle(.revsDiffAnswered(["b": RevsDiffEntry(missing: ["2-c"], possibleAncestors: ["1-x"])]))
        #expect(diff == [.fetch([BulkGetRequest(id: "b", rev: "2-c", attsSince: ["1-x"])])])
        #expect(s.handle(.revisionsFetched([fetched("b", "2-c")])) == [.upload([fetched("b", "2-c")])])
        let save = s.handle(.uploaded([ok("b")]))
        guard case .saveCheckpoint(let log)? = save.first, save.count == 1 else {
            Issue.record("expected a checkpoint, got \(save)")
            return
        }
        #expect(log.sourceLastSeq == SequenceID(2) && log.sessionID == "sess")
        #expect(log.history.first?.recordedSeq == SequenceID(2))
        #expect(s.since == nil, "since moves only once the checkpoint is saved")
        #expect(s.handle(.checkpointSaved) == [.requestChanges(since: SequenceID(2), limit: 2, feed: .normal)])
        #expect(s.status.completed == 2 && s.status.docsWritten == 1 && s.status.docsRead == 1)
        #expect(s.handle(.changesReceived(ChangesBatch(rows: [], lastSeq: SequenceID(2)))) == [.finished])
        #expect(s.status.activity == .stopped && s.status.lastError == nil)
    }

    // Proves the checkpoint is written only after every fetch chunk of the batch was uploaded, and a
    // one-shot batch shorter than the limit ends the replication after its checkpoint.
    @Test func checkpointOnlyAfterWholeBatchUploaded() {
        var s = started(.init(batchSize: 10, bulkGetBatchSize: 2))
        let rows = (1...5).map { row($0, "d\($0)", "1-x") }
        _ = s.handle(.changesReceived(ChangesBatch(rows: rows, lastSeq: nil)))
        var answer: [String: RevsDiffEntry] = [:]
        for r in rows { answer[r.id] = RevsDiffEntry(missing: ["1-x"]) }
        var actions = s.handle(.revsDiffAnswered(answer))
        var uploads = 0
        while case .fetch(let reqs)? = actions.first {
            #expect(reqs.count <= 2)
            actions = s.handle(.revisionsFetched(reqs.map { fetched($0.id, $0.rev) }))
            if uploads < 2 {
                guard case .prefetch(let next)? = actions.first, next.count <= 2 else {
                    Issue.record("expected a prefetch hint before the upload, got \(actions)")
                    return
                }
                actions.removeFirst()
            }
            guard case .upload(let revs)? = actions.first else {
                Issue.record("expected upload, got \(actions)")
                return
            }
            uploads += 1
            actions = s.handle(.uploaded(revs.map { ok($0.id) }))
        }
        #expect(uploads == 3)
        guard case .saveCheckpoint(let log)? = actions.first else {
            Issue.record("expected checkpoint, got \(actions)")
            return
        }
        #expect(log.sourceLastSeq == SequenceID(5), "last row's seq when the feed gives no last_seq")
        #expect(s.handle(.checkpointSaved) == [.finished])
        #expect(s.status.completed == 5 && s.status.total == 5 && s.status.docsWritten == 5)
    }

    // Proves per-document failures (a revision the source cannot give, a _bulk_docs error row) are counted
    // and not retried: the batch still checkpoints.
    @Test func perDocumentFailuresCountedNotRetried() {
        var s = started(.init(batchSize: 5))
        _ = s.handle(
            .changesReceived(ChangesBatch(rows: [row(1, "a", "1-a"), row(2, "b", "1-b")], lastSeq: SequenceID(2))))
        _ = s.handle(.revsDiffAnswered(["a": RevsDiffEntry(missing: ["1-a"]), "b": RevsDiffEntry(missing: ["1-b"])]))
        let missing = FetchedRevision(
            id: "a", rev: "1-a", error: RevisionError(status: 404, error: "not_found", reason: "missing"))
        #expect(s.handle(.revisionsFetched([missing, fetched("b", "1-b")])) == [.upload([fetched("b", "1-b")])])
        let rejected = JSON.object([("id", .string("b")), ("error", .string("forbidden")), ("reason", .string("no"))])
        let next = s.handle(.uploaded([rejected]))
        guard case .saveCheckpoint? = next.first else {
            Issue.record("expected checkpoint, got \(next)")
            return
        }
        #expect(s.status.docWriteFailures == 2 && s.status.docsWritten == 0)
        // The checkpoint write fails; the retried batch meets both revisions again: they are skipped.
        #expect(s.handle(.failed(.network("x"))).count == 1)
        _ = s.handle(.retryTimerFired)
        _ = s.handle(
            .changesReceived(ChangesBatch(rows: [row(1, "a", "1-a"), row(2, "b", "1-b")], lastSeq: SequenceID(2))))
        let again = s.handle(
            .revsDiffAnswered(["a": RevsDiffEntry(missing: ["1-a"]), "b": RevsDiffEntry(missing: ["1-b"])]))
        guard case .saveCheckpoint? = again.first else {
            Issue.record("expected checkpoint without refetching, got \(again)")
            return
        }
        #expect(s.status.docWriteFailures == 2)
    }

    // Proves a per-document failure that is the peer's state (a 503 row: the gateway's bucket in failover, a full
    // disk; a 504 part of a `_bulk_get`) is not checkpointed past: the batch's other revisions are still uploaded, then
    // the batch fails as transient (retried with backoff, `lastError` says why), and the retried batch fetches and
    // uploads that revision again. Before, it was counted in `docWriteFailures` and the checkpoint moved past it, so
    // the document never reached the target until it changed again.
    @Test func aFailureThePeerMayNotRepeatIsRetriedNotCheckpointedPast() {
        var s = started(.init(batchSize: 5, backoffInitialMs: 10, backoffMaxMs: 100))
        let rows = [row(1, "a", "1-a"), row(2, "b", "1-b"), row(3, "c", "1-c")]
        let diff = [
            "a": RevsDiffEntry(missing: ["1-a"]), "b": RevsDiffEntry(missing: ["1-b"]),
            "c": RevsDiffEntry(missing: ["1-c"]),
        ]
        _ = s.handle(.changesReceived(ChangesBatch(rows: rows, lastSeq: SequenceID(3))))
        _ = s.handle(.revsDiffAnswered(diff))
        let busy = FetchedRevision(
            id: "c", rev: "1-c", error: RevisionError(status: 504, error: "timeout", reason: "read"))
        let fetchedAB = [fetched("a", "1-a"), fetched("b", "1-b")]
        #expect(s.handle(.revisionsFetched(fetchedAB + [busy])) == [.upload(fetchedAB)])
        let full = JSON.object([
            ("id", .string("b")), ("rev", .string("1-b")), ("error", .string("service_unavailable")),
            ("reason", .string("disk full")), ("status", .number(503)),
        ])
        #expect(s.handle(.uploaded([ok("a"), full])) == [.scheduleRetry(afterMs: 10)])
        #expect(s.status.docWriteFailures == 0 && s.status.docsWritten == 1)
        #expect(s.status.lastError?.isTransient == true)
        #expect(s.since == nil, "the batch was checkpointed past revisions it did not store")
        // The retried batch: "a" landed, "b" and "c" are asked for and sent again.
        #expect(s.handle(.retryTimerFired) == [.requestChanges(since: nil, limit: 5, feed: .normal)])
        _ = s.handle(.changesReceived(ChangesBatch(rows: rows, lastSeq: SequenceID(3))))
        let again = s.handle(
            .revsDiffAnswered(["b": RevsDiffEntry(missing: ["1-b"]), "c": RevsDiffEntry(missing: ["1-c"])]))
        #expect(
            again == [
                .fetch([
                    BulkGetRequest(id: "b", rev: "1-b", attsSince: []),
                    BulkGetRequest(id: "c", rev: "1-c", attsSince: []),
                ])
            ], "\(again)")
        let fetchedBC = [fetched("b", "1-b"), fetched("c", "1-c")]
        #expect(s.handle(.revisionsFetched(fetchedBC)) == [.upload(fetchedBC)])
        guard case .saveCheckpoint? = s.handle(.uploaded([ok("b"), ok("c")])).first else {
            Issue.record("expected a checkpoint once every revision landed")
            return
        }
        #expect(s.status.docWriteFailures == 0 && s.status.docsWritten == 3)
        // A row without a status is judged by its name: CouchDB's validation refusals stay per-document failures. A
        // 500 (a sync function's exception on this document) stays one too: it would come back every time.
        #expect(CouchError.status(named: "forbidden") == 403 && CouchError.status(named: "my_rule") == nil)
        #expect(!CouchError.internalError("sync function threw").isPeerUnavailable)
    }

    // Proves a `_bulk_docs` error row that names its rev marks that revision failed, not the first revision of its
    // document in the upload: with two revisions of "a" uploaded and the second refused, a retried batch skips only
    // the second. Before, the first was marked (looked up by id alone), so the refused one was sent again and counted
    // twice.
    @Test func aFailedRowMarksTheRevisionItNames() {
        var s = started(.init(batchSize: 5))
        let rows = [row(1, "a", "1-a", "2-a")]
        _ = s.handle(.changesReceived(ChangesBatch(rows: rows, lastSeq: SequenceID(1))))
        _ = s.handle(.revsDiffAnswered(["a": RevsDiffEntry(missing: ["1-a", "2-a"])]))
        let both = [fetched("a", "1-a"), fetched("a", "2-a")]
        #expect(s.handle(.revisionsFetched(both)) == [.upload(both)])
        let refused = JSON.object([
            ("id", .string("a")), ("rev", .string("2-a")), ("error", .string("forbidden")), ("reason", .string("no")),
        ])
        guard case .saveCheckpoint? = s.handle(.uploaded([refused])).first else {
            Issue.record("expected a checkpoint")
            return
        }
        #expect(s.status.docWriteFailures == 1)
        // The checkpoint write fails; the retried batch asks for both again: only 1-a is fetched again.
        #expect(s.handle(.failed(.network("x"))).count == 1)
        _ = s.handle(.retryTimerFired)
        _ = s.handle(.changesReceived(ChangesBatch(rows: rows, lastSeq: SequenceID(1))))
        let again = s.handle(.revsDiffAnswered(["a": RevsDiffEntry(missing: ["1-a", "2-a"])]))
        #expect(again == [.fetch([BulkGetRequest(id: "a", rev: "1-a", attsSince: [])])], "\(again)")
        #expect(s.status.docWriteFailures == 1)
    }

    // Proves documents written are those sent less those a row refused, whatever rows the target answers with:
    // CouchDB 2 and 3 answer a `new_edits:false` `_bulk_docs` with error rows only (`[]` when all were taken), which
    // counted 0 written before; settee-gateway answers a row per document, which counts the same as before.
    @Test func docsWrittenCountsWhatWasSentLessWhatWasRefused() {
        for (answer, written, failures) in [
            ([JSON](), 3, 0),
            ([JSON.object([("id", .string("b")), ("error", .string("forbidden")), ("reason", .string("no"))])], 2, 1),
            (
                ["a", "b", "c"].map {
                    JSON.object([("id", .string($0)), ("rev", .string("1-" + $0)), ("ok", .bool(true))])
                },
                3, 0
            ),
        ] {
            var s = started(.init(batchSize: 5))
            let rows = [row(1, "a", "1-a"), row(2, "b", "1-b"), row(3, "c", "1-c")]
            _ = s.handle(.changesReceived(ChangesBatch(rows: rows, lastSeq: SequenceID(3))))
            _ = s.handle(
                .revsDiffAnswered([
                    "a": RevsDiffEntry(missing: ["1-a"]), "b": RevsDiffEntry(missing: ["1-b"]),
                    "c": RevsDiffEntry(missing: ["1-c"]),
                ]))
            let sent = [fetched("a", "1-a"), fetched("b", "1-b"), fetched("c", "1-c")]
            #expect(s.handle(.revisionsFetched(sent)) == [.upload(sent)])
            _ = s.handle(.uploaded(answer))
            #expect(s.status.docsWritten == written, "\(answer)")
            #expect(s.status.docWriteFailures == failures, "\(answer)")
        }
    }

    // Proves transient errors retry with exponential backoff up to the cap, abandon the batch (total
    // restored), resume from the last checkpoint, and that a permanent error stops with lastError.
    @Test func retryBackoffAndPermanentErrors() {
        var s = started(.init(batchSize: 5, backoffInitialMs: 100, backoffMaxMs: 500))
        _ = s.handle(.changesReceived(ChangesBatch(rows: [row(1, "a", "1-a")], lastSeq: SequenceID(1))))
        #expect(s.status.total == 1)
        var delays: [Int] = []
        for _ in 0..<5 {
            guard case .scheduleRetry(let ms)? = s.handle(.failed(.network("refused"))).first else {
                Issue.record("no retry")
                return
            }
            delays.append(ms)
            #expect(s.status.activity == .offline)
            #expect(s.handle(.retryTimerFired) == [.requestChanges(since: nil, limit: 5, feed: .normal)])
        }
        #expect(delays == [100, 200, 400, 500, 500])
        #expect(s.status.total == 0, "the abandoned batch is not counted")
        #expect(s.status.lastError == .network("refused"))
        #expect(s.handle(.failed(.http(status: 401, error: "unauthorized", reason: "login"))) == [.finished])
        #expect(s.status.activity == .stopped)
        #expect(s.status.lastError == .http(status: 401, error: "unauthorized", reason: "login"))
    }

    // Proves `maxAttempts`: the replication stops with the last error at the n-th transient failure in a row,
    // while without it the same failures keep being retried.
    @Test func maxAttemptsGivesUp() {
        var s = started(.init(batchSize: 5, backoffInitialMs: 10, backoffMaxMs: 100, maxAttempts: 3))
        #expect(s.handle(.failed(.network("refused"))) == [.scheduleRetry(afterMs: 10)])
        _ = s.handle(.retryTimerFired)
        #expect(s.handle(.failed(.network("refused"))) == [.scheduleRetry(afterMs: 20)])
        _ = s.handle(.retryTimerFired)
        #expect(s.handle(.failed(.network("refused"))) == [.finished])
        #expect(s.status.activity == .stopped)
        #expect(s.status.lastError == .network("refused"))
        var unlimited = started(.init(batchSize: 5, backoffInitialMs: 10, backoffMaxMs: 100))
        for _ in 0..<50 {
            guard case .scheduleRetry? = unlimited.handle(.failed(.network("refused"))).first else {
                Issue.record("gave up without maxAttempts")
                return
            }
            _ = unlimited.handle(.retryTimerFired)
        }
    }

    // Proves a failure before the checkpoints were read retries by reading them again, and that a
    // checkpoint saved resets the backoff.
    @Test func retryBeforeCheckpointsReloads() {
        var s = S(options: .init(batchSize: 1, backoffInitialMs: 10, backoffMaxMs: 1000))
        _ = s.handle(.start)
        #expect(s.handle(.failed(.http(status: 503, error: "x", reason: ""))) == [.scheduleRetry(afterMs: 10)])
        #expect(s.handle(.retryTimerFired) == [.loadCheckpoints])
        #expect(s.handle(.failed(.network("down"))) == [.scheduleRetry(afterMs: 20)])
        _ = s.handle(.retryTimerFired)
        _ = s.handle(.checkpointsLoaded(source: nil, target: nil, sessionID: "s"))
        _ = s.handle(.changesReceived(ChangesBatch(rows: [row(3, "a", "1-a")], lastSeq: SequenceID(3))))
        _ = s.handle(.revsDiffAnswered([:]))
        _ = s.handle(.checkpointSaved)
        #expect(s.since == SequenceID(3))
        #expect(s.handle(.failed(.network("down"))) == [.scheduleRetry(afterMs: 10)])
    }

    // Proves continuous mode: a short batch means caught up, so the next request is a longpoll and the
    // activity idle; an empty longpoll answer asks again; a full batch switches back to the normal feed.
    @Test func continuousIdleAndCatchUp() {
        var s = started(.init(continuous: true, batchSize: 2))
        _ = s.handle(.changesReceived(ChangesBatch(rows: [row(1, "a", "1-a")], lastSeq: SequenceID(1))))
        _ = s.handle(.revsDiffAnswered([:]))
        #expect(s.handle(.checkpointSaved) == [.requestChanges(since: SequenceID(1), limit: 2, feed: .longpoll)])
        #expect(s.status.activity == .idle)
        #expect(
            s.handle(.changesReceived(ChangesBatch(rows: [], lastSeq: SequenceID(1))))
                == [.requestChanges(since: SequenceID(1), limit: 2, feed: .longpoll)])
        #expect(s.status.activity == .idle)
        _ = s.handle(.changesReceived(ChangesBatch(rows: [row(2, "b", "1-b")], lastSeq: SequenceID(2))))
        #expect(s.status.activity == .busy)
        _ = s.handle(.revsDiffAnswered([:]))
        #expect(s.handle(.checkpointSaved) == [.requestChanges(since: SequenceID(2), limit: 2, feed: .longpoll)])
        // A full batch means more may be waiting: back to the normal feed, busy.
        _ = s.handle(
            .changesReceived(ChangesBatch(rows: [row(3, "c", "1-c"), row(4, "d", "1-d")], lastSeq: SequenceID(4))))
        _ = s.handle(.revsDiffAnswered([:]))
        #expect(s.handle(.checkpointSaved) == [.requestChanges(since: SequenceID(4), limit: 2, feed: .normal)])
        #expect(s.status.activity == .busy)
    }

    // Proves answers that arrive in the wrong phase (a cancelled request's) change nothing, that stop ends
    // the replication, and network down/up goes offline then resumes from the checkpoint without backoff.
    @Test func staleEventsStopAndNetwork() {
        var s = started(.init(batchSize: 5))
        #expect(s.handle(.revsDiffAnswered(["x": RevsDiffEntry(missing: ["1-x"])])) == [])
        #expect(s.handle(.checkpointSaved) == [])
        _ = s.handle(.changesReceived(ChangesBatch(rows: [row(1, "a", "1-a")], lastSeq: SequenceID(1))))
        #expect(s.handle(.networkChanged(reachable: false)) == [.cancelInFlight])
        #expect(s.status.activity == .offline && s.status.total == 0)
        #expect(s.handle(.revsDiffAnswered([:])) == [], "the cancelled diff's answer is ignored")
        #expect(s.handle(.networkChanged(reachable: true)) == [.requestChanges(since: nil, limit: 5, feed: .normal)])
        #expect(s.handle(.stop) == [.cancelInFlight, .finished])
        #expect(s.status.activity == .stopped)
        #expect(s.handle(.changesReceived(ChangesBatch(rows: [row(1, "a", "1-a")], lastSeq: nil))) == [])
        #expect(s.handle(.start) == [.loadCheckpoints], "a stopped replication can start again")
    }

    // Proves the network's reachability is remembered while stopped: a start with the network down goes offline
    // without an action (no connection attempt, no retry timer), connects when the network comes back, and a
    // later stop and start with the network up connects at once. Before, a down-while-stopped was forgotten and
    // the start connected anyway (ReplicatorTests.networkDownAndUp then raced the replication it started).
    @Test func startWhileTheNetworkIsDownWaitsOffline() {
        var s = S(options: .init(batchSize: 5))
        #expect(s.handle(.networkChanged(reachable: false)) == [])
        #expect(s.status.activity == .stopped)
        #expect(s.handle(.start) == [])
        #expect(s.status.activity == .offline)
        #expect(s.handle(.start) == [], "a second start while offline does nothing")
        #expect(s.handle(.retryTimerFired) == [], "no retry is pending")
        #expect(s.handle(.networkChanged(reachable: true)) == [.loadCheckpoints])
        #expect(s.status.activity == .connecting)
        _ = s.handle(.checkpointsLoaded(source: nil, target: nil, sessionID: "sess"))
        #expect(s.handle(.stop) == [.cancelInFlight, .finished])
        #expect(s.handle(.start) == [.loadCheckpoints], "the network is up: a start connects")
        // Down while stopped, then up again before the start: the start connects.
        _ = s.handle(.stop)
        _ = s.handle(.networkChanged(reachable: false))
        _ = s.handle(.networkChanged(reachable: true))
        #expect(s.handle(.start) == [.loadCheckpoints])
    }

    // Proves the policy hook's deferral goes offline and rechecks after the given delay.
    @Test func deferredByPolicy() {
        var s = started(.init(batchSize: 5))
        #expect(s.handle(.deferred(recheckMs: 250)) == [.cancelInFlight, .scheduleRetry(afterMs: 250)])
        #expect(s.status.activity == .offline)
        #expect(s.handle(.retryTimerFired) == [.requestChanges(since: nil, limit: 5, feed: .normal)])
    }

    // Proves resumption: matching sessions resume at source_last_seq; otherwise the newest common history
    // entry; no common entry (or a log on one side only) starts over.
    @Test func checkpointComparison() {
        let e1 = ReplicationCheckpoint.Entry(sessionID: "s1", recordedSeq: SequenceID(10))
        let e2 = ReplicationCheckpoint.Entry(sessionID: "s2", recordedSeq: SequenceID(.string("5:20")))
        let src = ReplicationCheckpoint(sessionID: "s2", sourceLastSeq: SequenceID(.string("5:20")), history: [e2, e1])
        let tgtSame = src
        let tgtOlder = ReplicationCheckpoint(sessionID: "s1", sourceLastSeq: SequenceID(10), history: [e1])
        let tgtOther = ReplicationCheckpoint(sessionID: "zz", sourceLastSeq: SequenceID(99), history: [])
        #expect(ReplicationCheckpoint.startSequence(source: src, target: tgtSame) == SequenceID(.string("5:20")))
        #expect(ReplicationCheckpoint.startSequence(source: src, target: tgtOlder) == SequenceID(10))
        #expect(ReplicationCheckpoint.startSequence(source: src, target: tgtOther) == nil)
        #expect(ReplicationCheckpoint.startSequence(source: nil, target: tgtSame) == nil)
        // The same session, but one side kept an earlier write of its log (a power loss took the last ones): the
        // other side's seq would skip what lies between, so the replication starts over. Before, it resumed at the
        // source's 5:20 over a target that had recorded only 5:12.
        let e2Earlier = ReplicationCheckpoint.Entry(sessionID: "s2", recordedSeq: SequenceID(.string("5:12")))
        let tgtBehind = ReplicationCheckpoint(
            sessionID: "s2", sourceLastSeq: SequenceID(.string("5:12")), history: [e2Earlier, e1])
        #expect(ReplicationCheckpoint.startSequence(source: src, target: tgtBehind) == nil)
        #expect(ReplicationCheckpoint.startSequence(source: tgtBehind, target: src) == nil)

        var s = S(options: .init(batchSize: 3))
        _ = s.handle(.start)
        #expect(
            s.handle(.checkpointsLoaded(source: src, target: tgtOlder, sessionID: "new"))
                == [.requestChanges(since: SequenceID(10), limit: 3, feed: .normal)])
        #expect(s.log?.history.count == 1, "the new log continues the target's history")
    }

    // Proves the checkpoint document round-trips, keeps history newest first and bounded, and that the
    // replication id is stable, ignores credentials and changes with the filter.
    @Test func checkpointDocumentAndReplicationID() throws {
        var log = ReplicationCheckpoint(sessionID: "a", sourceLastSeq: .zero, rev: "0-3")
        for i in 1...60 {
            log = log.recording(.init(sessionID: "s\(i)", recordedSeq: SequenceID(i), docsWritten: i))
        }
        log = log.recording(.init(sessionID: "s60", recordedSeq: SequenceID(61)))
        #expect(log.history.count == 50)
        #expect(log.history[0].sessionID == "s60" && log.history[0].recordedSeq == SequenceID(61))
        let back = try #require(ReplicationCheckpoint(json: try JSON.parse(log.json().serialized())))
        #expect(back == log)

        let a = ReplicationID.make(source: "http://u:p@h:4984/db/", target: "lite:1", filter: nil)
        let b = ReplicationID.make(source: "http://h:4984/db", target: "lite:1", filter: nil)
        let c = ReplicationID.make(source: "http://h:4984/db", target: "lite:1", filter: .channels(["x"]))
        let d = ReplicationID.make(source: "http://h:4984/db", target: "lite:1", filter: .channels(["y"]))
        #expect(a == b && a != c && c != d && a.count == 32)
    }
}
