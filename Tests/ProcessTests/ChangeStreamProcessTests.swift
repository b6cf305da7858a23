import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import SetteeClient
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Synchronization
import Testing

/// What a test read from a change stream: every event, and per vBucket the seqnos in arrival order.
final class StreamLog: Sendable {
    struct State {
        var latest: [String: ChangeEvent] = [:]
        var seqnos: [UInt16: [UInt64]] = [:]
        var events = 0
        var restartedVBs: Set<UInt16> = []
    }
    let state = Mutex(State())

    func add(_ batch: ChangeStreamBatch) {
        state.withLock { s in
            if batch.restarted { s.restartedVBs.insert(batch.vbucket.rawValue) }
            for e in batch.events {
                s.latest[String(decoding: e.key, as: UTF8.self)] = e
                s.seqnos[e.vbucket.rawValue, default: []].append(e.seqno.rawValue)
                s.events += 1
            }
        }
    }

    /// vBuckets (not restarted) whose seqnos did not strictly increase: a change repeated or out of order.
    func nonIncreasing() -> [UInt16] {
        state.withLock { s in
            s.seqnos.compactMap { vb, list in
                guard !s.restartedVBs.contains(vb) else { return nil }
                return zip(list, list.dropFirst()).allSatisfy { $0 < $1 } ? nil : vb
            }
        }
    }

    /// Keys whose latest event is not `expected` (a value, or nil for a deletion).
    func mismatches(_ expected: [String: [UInt8]?]) -> [String] {
        state.withLock { s in
            expected.compactMap { key, value in
                guard let e = s.latest[key] else { return key }
                if let value { return e.kind == .mutation && e.value == value ? nil : key }
                return e.kind == .mutation ? key : nil
            }
        }
    }
}

/// Reads `stream` into `log` until cancelled.
func consume(_ stream: ChangeStream, into log: StreamLog) -> Task<Void, Never> {
    Task {
        for await batch in stream.batches { log.add(batch) }
    }
}

/// Polls `condition` every 50 ms until it holds or `seconds` pass.
func waitUntil(_ seconds: Double, _ condition: () -> Bool) async -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(50))
    }
    return condition()
}

/// A logger that keeps map adoptions and reconnects out of the test output.
let quietClientLogger: Logger = {
    var l = Logger(label: "settee.test.client")
    l.logLevel = .notice
    return l
}()

@Suite("Change streams (DCP client) on real nodes", .serialized, .onTestThreads)
struct ChangeStreamProcessTests {
    static func options(_ node: ServerProcess, user: String = "Administrator", password: String = "password")
        -> ClientOptions
    {
        ClientOptions(
            seeds: [.http(NodeAddress(host: "127.0.0.1", port: node.adminPort))], bucket: "demo", username: user,
            password: password, operationTimeoutMs: 10_000)
    }

    static func value(_ i: Int, _ round: Int = 0) -> [UInt8] { Array("{\"n\":\(i),\"round\":\(round)}".utf8) }

    /// One node: a stream from 0 delivers every document already stored (backfill), then live writes and
    /// deletions, each vBucket's seqnos strictly increasing; reopened from `positions()` it delivers only
    /// what changed after, nothing twice.
    @Test func backfillLiveAndResume() async throws {
        let a = try ServerProcess.started(name: "cs-one")
        defer { a.stopAndRemove() }
        try a.initialize(authType: "sasl")
        let client = try await BucketClient.connect(Self.options(a), logger: quietClientLogger)
        defer { Task { await client.close() } }
        var expected: [String: [UInt8]?] = [:]
        for i in 0..<1_500 {
            _ = try await client.upsert("doc::\(i)", Self.value(i))
            expected["doc::\(i)"] = Self.value(i)
        }

        let stream = try await ChangeStream.open(Self.options(a), logger: quietClientLogger)
        let log = StreamLog()
        let reader = consume(stream, into: log)
        let backfilled = await waitUntil(60) { log.mismatches(expected).isEmpty }
        #expect(backfilled, "missing after backfill: \(log.mismatches(expected).prefix(5))")

        for i in 0..<200 {
            _ = try await client.upsert("doc::\(i)", Self.value(i, 1))
            expected["doc::\(i)"] = Self.value(i, 1)
        }
        for i in 1_400..<1_500 {
            _ = try await client.remove("doc::\(i)")
            expected["doc::\(i)"] = .some(nil)
        }
        let live = await waitUntil(30) { log.mismatches(expected).isEmpty }
        #expect(live, "missing live changes: \(log.mismatches(expected).prefix(5))")
        #expect(log.nonIncreasing().isEmpty)
        #expect(stream.restartCount == 0)
        #expect(log.state.withLock { $0.events } == 1_500 + 200 + 100)

        // Resume from the positions reached: only the 10 new writes come.
        let positions = stream.positions()
        await stream.close()
        reader.cancel()
        _ = await reader.value
        for i in 0..<10 { _ = try await client.upsert("after::\(i)", Self.value(i)) }
        let resumed = try await ChangeStream.open(Self.options(a), from: positions, logger: quietClientLogger)
        let log2 = StreamLog()
        let reader2 = consume(resumed, into: log2)
        let got = await waitUntil(30) { log2.state.withLock { $0.events } >= 10 }
        #expect(got)
        try await Task.sleep(for: .milliseconds(500))
        let keys = log2.state.withLock { Set($0.latest.keys) }
        #expect(keys == Set((0..<10).map { "after::\($0)" }), "resumed stream delivered \(keys.count) keys")
        #expect(log2.state.withLock { $0.events } == 10)
        await resumed.close()
        _ = await reader2.value
    }

    /// Who may open a change stream, through the real login path: the cluster admin and a user with
    /// `bucket_full_access[demo]` may; a `data_reader[demo]` user is refused with `accessDenied`; a wrong
    /// password gives `authenticationFailed`; an unknown bucket `bucketNotFound`.
    @Test func openingNeedsAStreamingRole() async throws {
        let a = try ServerProcess.started(name: "cs-auth")
        defer { a.stopAndRemove() }
        try a.initialize(authType: "sasl")
        for (user, role) in [("reader", "data_reader[demo]"), ("gateway", "bucket_full_access[demo]")] {
            let r = try a.http(
                "PUT", "/settings/rbac/users/local/\(user)", form: [("password", "\(user)-pw"), ("roles", role)])
            #expect(r.status == 200, "\(r.text)")
        }
        do {
            let s = try await ChangeStream.open(
                Self.options(a, user: "reader", password: "reader-pw"), logger: quietClientLogger)
            await s.close()
            Issue.record("a data_reader opened a change stream")
        } catch ClientError.accessDenied {
        } catch {
            Issue.record("data_reader: expected accessDenied, got \(error)")
        }
        do {
            let s = try await ChangeStream.open(
                Self.options(a, user: "gateway", password: "nope"), logger: quietClientLogger)
            await s.close()
            Issue.record("a wrong password opened a change stream")
        } catch ClientError.authenticationFailed {
        } catch {
            Issue.record("wrong password: expected authenticationFailed, got \(error)")
        }
        var missing = Self.options(a)
        missing.bucket = "nosuch"
        do {
            let s = try await ChangeStream.open(missing, logger: quietClientLogger)
            await s.close()
            Issue.record("a stream of a missing bucket opened")
        } catch ClientError.bucketNotFound {
        } catch {
            Issue.record("missing bucket: expected bucketNotFound, got \(error)")
        }

        let client = try await BucketClient.connect(Self.options(a), logger: quietClientLogger)
        _ = try await client.upsert("k", Self.value(1))
        await client.close()
        for (user, password) in [("gateway", "gateway-pw"), ("Administrator", "password")] {
            let s = try await ChangeStream.open(
                Self.options(a, user: user, password: password), logger: quietClientLogger)
            let log = StreamLog()
            let reader = consume(s, into: log)
            let got = await waitUntil(30) { log.mismatches(["k": Self.value(1)]).isEmpty }
            #expect(got, "\(user) did not stream the document")
            await s.close()
            _ = await reader.value
        }
    }

    /// Two nodes: a stream opened on one node keeps following while a second node is added and half the
    /// vBuckets move to it under a running writer. Every acknowledged write arrives (latest value per key),
    /// no vBucket repeats a seqno (no rollback happens in a clean rebalance), and streams were reopened on the
    /// new owner.
    @Test func rebalanceWhileStreamingLosesNothing() async throws {
        let a = try ServerProcess(name: "cs-reb-a")
        let b = try ServerProcess(name: "cs-reb-b")
        defer { [a, b].forEach { $0.stopAndRemove() } }
        try a.start()
        try b.start()
        try a.initialize(replicaNumber: 1, authType: "sasl")
        let client = try await BucketClient.connect(Self.options(a), logger: quietClientLogger)
        var expected: [String: [UInt8]?] = [:]
        for i in 0..<1_000 {
            _ = try await client.upsert("pre::\(i)", Self.value(i))
            expected["pre::\(i)"] = Self.value(i)
        }
        let stream = try await ChangeStream.open(Self.options(a), logger: quietClientLogger)
        let log = StreamLog()
        let reader = consume(stream, into: log)

        let stop = Atomic<Bool>(false)
        let writer = Task { () -> [String: [UInt8]] in
            var written: [String: [UInt8]] = [:]
            var i = 0
            while !stop.load(ordering: .relaxed) {
                let key = "live::\(i % 3_000)"
                let v = Self.value(i, i / 3_000)
                if (try? await client.upsert(key, v)) != nil { written[key] = v }
                i += 1
            }
            return written
        }
        try await Task.sleep(for: .milliseconds(300))
        #expect(try ClusterHarness.addNode(a, b).status == 200)
        let failure = try await ClusterHarness.rebalanceOffPool(a, known: [a, b])
        #expect(failure == nil, "\(failure ?? "")")
        try await Task.sleep(for: .milliseconds(500))
        stop.store(true, ordering: .relaxed)
        let written = await writer.value
        for (k, v) in written { expected[k] = v }
        // Writes must have overlapped the rebalance; how many is a speed (a loaded CI box managed 68).
        #expect(written.count > 10, "writer managed only \(written.count) keys")

        let map = try ClusterHarness.map(a)
        #expect(map.servers.count == 2 && Set(map.chains.map { $0[0] }).count == 2, "\(ClusterHarness.summary(map))")
        let all = await waitUntil(60) { log.mismatches(expected).isEmpty }
        #expect(
            all,
            "missing after rebalance: \(log.mismatches(expected).count), e.g. \(log.mismatches(expected).prefix(5))")
        #expect(stream.restartCount == 0)
        #expect(log.nonIncreasing().isEmpty, "vBuckets with repeated seqnos: \(log.nonIncreasing().prefix(5))")
        #expect(stream.reopenCount >= 1)
        await stream.close()
        _ = await reader.value
        await client.close()
    }

    /// Two nodes with one replica: after a SIGKILL of one node and its failover, the stream picks up the
    /// promoted replicas on the survivor. Every write acknowledged with majority durability before the kill,
    /// and every write after the failover, arrives (at least once: a vBucket may restart from 0 after a
    /// rollback, and then says so).
    @Test func failoverWhileStreaming() async throws {
        let a = try ServerProcess(name: "cs-fo-a")
        let b = try ServerProcess(name: "cs-fo-b")
        defer { [a, b].forEach { $0.stopAndRemove() } }
        try a.start()
        try b.start()
        try ClusterHarness.formCluster([a, b], authType: "sasl")
        let client = try await BucketClient.connect(Self.options(a), logger: quietClientLogger)
        var expected: [String: [UInt8]?] = [:]
        for i in 0..<300 {
            let deadline = Date().addingTimeInterval(30)
            while true {
                do {
                    _ = try await client.upsert("pre::\(i)", Self.value(i), durability: .majority)
                    break
                } catch {
                    if Date() > deadline { throw error }
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
            expected["pre::\(i)"] = Self.value(i)
        }
        let stream = try await ChangeStream.open(Self.options(a), logger: quietClientLogger)
        let log = StreamLog()
        let reader = consume(stream, into: log)
        #expect(await waitUntil(60) { log.mismatches(expected).isEmpty })

        b.kill9()
        let failover = try a.http("POST", "/controller/failOver", form: [("otpNode", ClusterHarness.nodeName(b))])
        #expect(failover.status == 200, "\(failover.text)")
        for i in 0..<300 {
            _ = try await client.upsert("post::\(i)", Self.value(i))
            expected["post::\(i)"] = Self.value(i)
        }
        let all = await waitUntil(60) { log.mismatches(expected).isEmpty }
        #expect(
            all, "missing after failover: \(log.mismatches(expected).count), e.g. \(log.mismatches(expected).prefix(5))"
        )
        #expect(stream.reopenCount >= 1)
        #expect(log.nonIncreasing().isEmpty)
        await stream.close()
        _ = await reader.value
        await client.close()
    }

    /// A fake node (`FakeKVNode`) serving a map of four vBuckets: each vBucket of `scripted` (vBucket 0 unless told)
    /// answers its n-th stream request (n from 1) with `answer(n, frame)`; the others are accepted under uuid 1 and stay
    /// quiet. Also returns the scripted vBuckets' requests as (start seqno, uuid), and client options for the node.
    static func scriptedProducer(
        scripted: Set<UInt16> = [0], _ answer: @escaping @Sendable (Int, Frame) -> ByteBuffer
    ) throws
        -> (node: FakeKVNode, requests: NIOLockedValueBox<[(UInt64, UInt64)]>, options: ClientOptions)
    {
        let requests = NIOLockedValueBox<[(UInt64, UInt64)]>([])
        let counts = NIOLockedValueBox<[UInt16: Int]>([:])
        let portBox = NIOLockedValueBox(0)
        let config: @Sendable () -> [UInt8] = {
            let port = portBox.withLockedValue { $0 }
            return Array(
                """
                {"rev":1,"revEpoch":1,"name":"demo","nodesExt":[{"hostname":"$HOST","services":{"kv":\(port)}}],\
                "vBucketServerMap":{"hashAlgorithm":"CRC","numReplicas":0,"serverList":["$HOST:\(port)"],\
                "vBucketMap":[[0],[0],[0],[0]]}}
                """.utf8)
        }
        let fake = try FakeKVNode { f in
            if let r = FakeKVNode.handshake(f, config: config) { return r }
            switch f.opcode {
            case .dcpOpen, .dcpControl, .dcpCloseStream: return FakeKVNode.response(to: f)
            case .dcpStreamRequest:
                guard scripted.contains(f.vbucket) else {
                    return FakeKVNode.response(to: f, value: failoverLog([(1, 0)]))
                }
                let x = DCPExtras.StreamRequest(f.extras)!
                requests.withLockedValue { $0.append((x.start, x.uuid)) }
                let n = counts.withLockedValue {
                    $0[f.vbucket, default: 0] += 1
                    return $0[f.vbucket, default: 0]
                }
                return answer(n, f)
            default:
                return nil
            }
        }
        portBox.withLockedValue { $0 = fake.port }
        let options = ClientOptions(
            seeds: [.kv(NodeAddress(host: "127.0.0.1", port: fake.port))], bucket: "demo", username: "u",
            password: "p", operationTimeoutMs: 5_000)
        return (fake, requests, options)
    }

    /// A failover log's bytes (newest entry first).
    @Sendable static func failoverLog(_ entries: [(uuid: UInt64, seqno: UInt64)]) -> [UInt8] {
        var b = ByteBuffer()
        b.writeDCPFailoverLog(entries)
        return Array(b.readableBytesView)
    }

    /// One memory snapshot of `vbucket` with a mutation of key "k<seqno>" at each seqno.
    static func writeSnapshot(
        _ b: inout ByteBuffer, opaque: UInt32, vbucket: UInt16 = 0, _ seqnos: ClosedRange<Int>
    ) {
        b.writeDCPSnapshotMarker(
            opaque: opaque, vbucket: vbucket, start: UInt64(seqnos.lowerBound), end: UInt64(seqnos.upperBound),
            flags: DCPSnapshotFlags.memory)
        for i in seqnos {
            b.writeDCPMutation(
                opaque: opaque, vbucket: vbucket, key: Array("k\(i)".utf8), value: Array("{}".utf8),
                cas: UInt64(100 + i),
                datatype: 1, bySeqno: UInt64(i), revSeqno: 1, flags: 0, expiry: 0)
        }
    }

    /// Against a scripted producer (what a real cluster cannot be made to do on cue): vBucket 0's stream is
    /// accepted and delivers one snapshot, then ends with "state changed"; the reopen asks from the delivered
    /// position (seqno 2 under uuid 7) and is answered ROLLBACK; the stream hands out an empty batch marked
    /// `restarted` at position 0 at once (before the vBucket sends anything: an emptied vBucket may never), restarts
    /// from 0 with uuid 0, and its next batch carries the new history's uuid.
    @Test func rollbackRestartsTheVBucketFromZero() async throws {
        let (fake, requests, options) = try Self.scriptedProducer { n, f in
            var b: ByteBuffer
            switch n {
            case 1:
                b = FakeKVNode.response(to: f, value: Self.failoverLog([(7, 0)]))
                Self.writeSnapshot(&b, opaque: f.opaque, 1...2)
                b.writeDCPStreamEnd(opaque: f.opaque, vbucket: 0, flag: .stateChanged)
            case 2:
                b = FakeKVNode.response(to: f, status: .rollback, value: [UInt8](repeating: 0, count: 8))
            default:
                b = FakeKVNode.response(to: f, value: Self.failoverLog([(9, 0)]))
                Self.writeSnapshot(&b, opaque: f.opaque, 1...3)
            }
            return b
        }
        defer { fake.stop() }
        let stream = try await ChangeStream.open(options, logger: quietClientLogger)
        var batches: [ChangeStreamBatch] = []
        // The first opens' `branched` markers (every vBucket's) are not what this test is about.
        for await batch in stream.batches where batch.vbucket == VBucketID(0) && !batch.branched {
            batches.append(batch)
            if batches.count == 3 { break }
        }
        #expect(batches.map { $0.events.count } == [2, 0, 3])
        #expect(batches.map(\.restarted) == [false, true, false])
        #expect(
            batches.map(\.position) == [
                ChangeStreamPosition(seqno: SeqNo(2), vbucketUUID: VBucketUUID(7)), .zero,
                ChangeStreamPosition(seqno: SeqNo(3), vbucketUUID: VBucketUUID(9)),
            ])
        #expect(batches.last?.events.map { String(decoding: $0.key, as: UTF8.self) } == ["k1", "k2", "k3"])
        let asked = requests.withLockedValue { $0 }
        #expect(asked.map(\.0) == [0, 2, 0] && asked.map(\.1) == [0, 7, 0], "stream requests: \(asked)")
        #expect(stream.restartCount == 1)
        await stream.close()
    }

    /// Against a scripted producer: vBucket 0's first stream opens a snapshot over two billion seqnos and sends one
    /// item more than `Limits.dcpConsumerMaxSnapshotItems` without ending it. The stream closes it (nothing of it is
    /// handed out), asks again from 0, and delivers the next answer's ordinary snapshot. Before, every item was
    /// staged, without end, waiting for a snapshot end that never came.
    @Test(.timeLimit(.minutes(1))) func aSnapshotPastTheBoundIsDroppedAndTheStreamReopens() async throws {
        let (fake, requests, options) = try Self.scriptedProducer { n, f in
            var b = FakeKVNode.response(to: f, value: Self.failoverLog([(7, 0)]))
            if n == 1 {
                b.writeDCPSnapshotMarker(
                    opaque: f.opaque, vbucket: 0, start: 1, end: UInt64(Int32.max), flags: DCPSnapshotFlags.memory)
                for i in 1...(Limits.dcpConsumerMaxSnapshotItems + 1) {
                    b.writeDCPMutation(
                        opaque: f.opaque, vbucket: 0, key: Array("k\(i)".utf8), value: [], cas: UInt64(i), datatype: 0,
                        bySeqno: UInt64(i), revSeqno: 1, flags: 0, expiry: 0)
                }
            } else {
                Self.writeSnapshot(&b, opaque: f.opaque, 1...2)
            }
            return b
        }
        defer { fake.stop() }
        let stream = try await ChangeStream.open(options, logger: quietClientLogger)
        var delivered: [ChangeStreamBatch] = []
        for await batch in stream.batches where batch.vbucket == VBucketID(0) && !batch.branched {
            delivered.append(batch)
            if batch.events.count > 0 { break }
        }
        #expect(delivered.map { $0.events.count } == [2])
        #expect(delivered.last?.events.map { String(decoding: $0.key, as: UTF8.self) } == ["k1", "k2"])
        let asked = requests.withLockedValue { $0 }
        #expect(asked.count == 2 && asked.map(\.0) == [0, 0], "stream requests: \(asked)")
        await stream.close()
    }

    /// Against a scripted producer: each of the four vBuckets' first stream opens a snapshot over two billion seqnos and
    /// sends three 128 KiB items without ending it. Each snapshot is far below `Limits.dcpConsumerMaxSnapshotBytes`;
    /// together they pass the connection's bound on staged bytes (`Limits.dcpConsumerMaxStagedBytes`, lowered here
    /// through `changeStreamMaxStagedBytes` to seven such items). The stream of each vBucket whose item would pass it is
    /// closed (CLOSE_STREAM; nothing of it is handed out) and asked again, and delivers that answer's ordinary snapshot.
    /// Before, every item was staged, without end: a producer holding a snapshot open on each of 1,024 vBuckets made the
    /// client hold 1,024 times the bound on one.
    @Test(.timeLimit(.minutes(1))) func snapshotsHeldOpenOnManyVBucketsStopAtTheConnectionBound() async throws {
        let value = [UInt8](repeating: 0x61, count: 128 * 1024)
        let (fake, requests, base) = try Self.scriptedProducer(scripted: [0, 1, 2, 3]) { n, f in
            var b = FakeKVNode.response(to: f, value: Self.failoverLog([(7, 0)]))
            if n == 1 {
                b.writeDCPSnapshotMarker(
                    opaque: f.opaque, vbucket: f.vbucket, start: 1, end: UInt64(Int32.max),
                    flags: DCPSnapshotFlags.memory)
                for i in 1...3 {
                    b.writeDCPMutation(
                        opaque: f.opaque, vbucket: f.vbucket, key: Array("k\(i)".utf8), value: value, cas: UInt64(i),
                        datatype: 0, bySeqno: UInt64(i), revSeqno: 1, flags: 0, expiry: 0)
                }
            } else {
                Self.writeSnapshot(&b, opaque: f.opaque, vbucket: f.vbucket, 1...2)
            }
            return b
        }
        defer { fake.stop() }
        var options = base
        options.changeStreamMaxStagedBytes = 7 * (2 + value.count)
        let stream = try await ChangeStream.open(options, logger: quietClientLogger)
        var delivered: [ChangeStreamBatch] = []
        for await batch in stream.batches where !batch.branched {
            delivered.append(batch)
            if batch.events.count > 0 { break }
        }
        #expect(delivered.map { $0.events.count } == [2])
        #expect(delivered.last?.events.map { String(decoding: $0.key, as: UTF8.self) } == ["k1", "k2"])
        #expect(delivered.last?.events.allSatisfy { $0.value == Array("{}".utf8) } == true)
        #expect(fake.received.withLockedValue { $0 }.contains(.dcpCloseStream))
        #expect(requests.withLockedValue { $0.count } > 4, "only the first requests: nothing was closed")
        await stream.close()
    }

    /// Against a scripted producer: vBucket 0's first accepted stream hands out an empty batch marked `branched` at
    /// position 0. Reopened after each "state changed" end, the stream is then accepted in a newer history twice
    /// without being told to roll back, because the position it had reached is still in the history (a flush while it
    /// was at 0; a failover branching at the seqno it had reached). Each time it hands out a `branched` batch at its
    /// position, at once, and goes on from there; a reopen in the same history hands out none. Without the markers a
    /// consumer that indexed its own writes to the vBucket ahead of the stream kept them after the bucket lost them (a
    /// gateway on a flushed bucket did, ADR 0098).
    @Test(.timeLimit(.minutes(1))) func aReopenInANewerHistoryHandsOutABranchMarker() async throws {
        let (fake, requests, options) = try Self.scriptedProducer { n, f in
            var b: ByteBuffer
            switch n {
            case 1:
                b = FakeKVNode.response(to: f, value: Self.failoverLog([(7, 0)]))
                b.writeDCPStreamEnd(opaque: f.opaque, vbucket: 0, flag: .stateChanged)
            case 2:
                // Flushed while the stream was at 0: a new history, nothing to roll back.
                b = FakeKVNode.response(to: f, value: Self.failoverLog([(9, 0)]))
                Self.writeSnapshot(&b, opaque: f.opaque, 1...2)
                b.writeDCPStreamEnd(opaque: f.opaque, vbucket: 0, flag: .stateChanged)
            case 3:
                // Failed over to a copy that had seqno 2 and not what came after it.
                b = FakeKVNode.response(to: f, value: Self.failoverLog([(11, 2), (9, 0)]))
                b.writeDCPStreamEnd(opaque: f.opaque, vbucket: 0, flag: .stateChanged)
            default:
                b = FakeKVNode.response(to: f, value: Self.failoverLog([(11, 2), (9, 0)]))
                Self.writeSnapshot(&b, opaque: f.opaque, 3...3)
            }
            return b
        }
        defer { fake.stop() }
        let stream = try await ChangeStream.open(options, logger: quietClientLogger)
        var batches: [ChangeStreamBatch] = []
        for await batch in stream.batches where batch.vbucket == VBucketID(0) {
            batches.append(batch)
            if batches.count == 5 { break }
        }
        #expect(batches.map { $0.events.count } == [0, 0, 2, 0, 1])
        #expect(batches.map(\.branched) == [true, true, false, true, false])
        #expect(batches.map(\.restarted) == [false, false, false, false, false])
        #expect(
            batches.map(\.position) == [
                .zero, .zero, ChangeStreamPosition(seqno: SeqNo(2), vbucketUUID: VBucketUUID(9)),
                ChangeStreamPosition(seqno: SeqNo(2), vbucketUUID: VBucketUUID(9)),
                ChangeStreamPosition(seqno: SeqNo(3), vbucketUUID: VBucketUUID(11)),
            ])
        let asked = requests.withLockedValue { $0 }
        #expect(asked.map(\.0) == [0, 0, 2, 2] && asked.map(\.1) == [0, 0, 9, 9], "stream requests: \(asked)")
        // vBucket 0's three, and the first opens of vBuckets 1-3 (answered in the same burst as vBucket 0's first).
        #expect(stream.branchCount == 6)
        #expect(stream.restartCount == 0)
        await stream.close()
    }
}
