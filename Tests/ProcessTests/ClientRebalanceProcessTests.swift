import Foundation
import NIOConcurrencyHelpers
import NIOCore
import SetteeClient
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

/// A task executor on one dedicated thread that a test can block on purpose ("stall"). Tasks that prefer it
/// (`withTaskExecutorPreference`) are resumed only by that thread, so a stall reproduces, for those tasks
/// only, what a starved cooperative pool does to every task of a process: two cores, and test harness calls
/// (process starts, HTTP polling, a rebalance wait) blocking its threads for seconds.
///
/// `stall(seconds:times:)` with `times > 1` pulses: stall, run every job queued meanwhile, stall again, ...
/// Each task then advances one step per pulse, as on an oversubscribed pool, so any operation that needs a
/// second step of its task after a pulse longer than its deadline is caught, deterministically.
final class StallableExecutor: TaskExecutor, @unchecked Sendable {
    private enum Work {
        case job(UnownedJob)
        case stall(TimeInterval, times: Int)
    }

    private let condition = NSCondition()
    private var queue: [Work] = []
    private var stopped = false

    init() {
        let thread = Thread { [self] in run() }
        thread.name = "stallable-executor"
        thread.start()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        condition.lock()
        queue.append(.job(unowned))
        condition.signal()
        condition.unlock()
    }

    /// Blocks the executor's thread for `seconds`, starting before any job queued now; then `times - 1` more
    /// times, each after the jobs queued during the previous stall have run.
    func stall(seconds: TimeInterval, times: Int = 1) {
        condition.lock()
        queue.insert(.stall(seconds, times: times), at: 0)
        condition.signal()
        condition.unlock()
    }

    /// Ends the thread once the queue is empty (call after every task using it has finished).
    func shutdown() {
        condition.lock()
        stopped = true
        condition.signal()
        condition.unlock()
    }

    private func run() {
        while true {
            condition.lock()
            while queue.isEmpty && !stopped { condition.wait() }
            if queue.isEmpty {
                condition.unlock()
                return
            }
            let work = queue.removeFirst()
            condition.unlock()
            switch work {
            case .job(let job): job.runSynchronously(on: asUnownedTaskExecutor())
            case .stall(let seconds, let times):
                Thread.sleep(forTimeInterval: seconds)
                if times > 1 {
                    condition.lock()
                    queue.append(.stall(seconds, times: times - 1))
                    condition.unlock()
                }
            }
        }
    }
}

/// Lets a non-Sendable harness object (a `ServerProcess`) be used from a thread the test starts.
struct Unchecked<T>: @unchecked Sendable {
    let value: T
}

/// What the load of `ClientRebalanceProcessTests.runLoad` saw.
struct LoadReport: Sendable {
    var operations = 0
    var failures: [String] = []
    /// Reads that did not return the value the same worker wrote last (each worker owns its keys).
    var wrongReads: [String] = []
    var slowest: Duration = .zero

    mutating func merge(_ other: LoadReport) {
        operations += other.operations
        failures += other.failures
        wrongReads += other.wrongReads
        slowest = max(slowest, other.slowest)
    }
}

/// The smart client through vBucket moves and through a starved caller: every operation ends with the node's
/// answer, and none fails `timeout` or `ambiguous` because the task that issued it could not run for a while
/// (the gateway's 503 "get timed out after 10000 ms" during a rebalance in a full CI run).
@Suite(.serialized, .onTestThreads) struct ClientRebalanceProcessTests {
    static func options(_ server: ServerProcess, timeoutMs: Int, seeds: [Seed]? = nil) -> ClientOptions {
        ClientOptions(
            seeds: seeds ?? [.http(NodeAddress(host: "127.0.0.1", port: server.adminPort))], bucket: "demo",
            username: server.user, password: server.password, operationTimeoutMs: timeoutMs)
    }

    /// UTC time of day with milliseconds, as the nodes' logs print it (to the second).
    static func clockTime() -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withTime, .withColonSeparatorInTime, .withFractionalSeconds]
        return f.string(from: Date())
    }

    /// `workers` concurrent loops of upsert-then-get on each worker's own 16 keys until `stop` is set, on
    /// `executor`. Any thrown error is a failure; a get must return the value just written.
    static func runLoad(
        _ client: BucketClient, workers: Int, executor: StallableExecutor, stop: NIOLockedValueBox<Bool>
    ) async -> LoadReport {
        await withTaskExecutorPreference(executor) {
            await withTaskGroup(of: LoadReport.self) { group in
                for w in 0..<workers {
                    group.addTask {
                        var report = LoadReport()
                        var n = 0
                        while !stop.withLockedValue({ $0 }) {
                            let key = "w\(w)-k\(n % 16)"
                            let value = Array("\(w):\(n)".utf8)
                            let began = ContinuousClock.now
                            do {
                                _ = try await client.upsert(key, value)
                                let got = try await client.get(key)
                                if got.value != value {
                                    report.wrongReads.append("\(key): \(String(decoding: got.value, as: UTF8.self))")
                                }
                            } catch {
                                // Wall-clock time, to match a failure with the nodes' logs (test-output/*.log).
                                report.failures.append("\(key) at \(Self.clockTime()): \(error)")
                            }
                            report.slowest = max(report.slowest, ContinuousClock.now - began)
                            report.operations += 2
                            n += 1
                        }
                        return report
                    }
                }
                var total = LoadReport()
                for await r in group { total.merge(r) }
                return total
            }
        }
    }

    /// Proves that a caller whose task cannot run for longer than the operation timeout still gets the
    /// node's answer: 8 workers write and read through one client (1 s deadline) while their executor is
    /// pulsed three times (two 1.2 s stalls with one step of every task between). Every operation succeeds
    /// and reads its own writes. Before the operation loop ran on event-loop callbacks, an operation whose
    /// task resumed after its deadline wrote its request too late: nearly every operation started between
    /// two stalls failed `timeout` (reads) or `ambiguous` (writes).
    @Test func starvedCallersStillGetTheNodesAnswer() async throws {
        let server = try await offPool { Unchecked(value: try ServerProcess.started(name: "client-starve")) }.value
        defer { server.stopAndRemove() }
        let boxed = Unchecked(value: server)
        try await offPool { try boxed.value.initialize(authType: "sasl") }
        let client = try await BucketClient.connect(Self.options(server, timeoutMs: 1_000), logger: quietClientLogger)
        let executor = StallableExecutor()
        let stop = NIOLockedValueBox(false)
        let load = Task { await Self.runLoad(client, workers: 8, executor: executor, stop: stop) }
        for _ in 0..<3 {
            try await Task.sleep(for: .milliseconds(300))
            executor.stall(seconds: 1.2, times: 2)
            try await Task.sleep(for: .milliseconds(2_500))
        }
        stop.withLockedValue { $0 = true }
        let report = await load.value
        executor.shutdown()
        await client.close()
        #expect(report.failures.isEmpty, "\(report.failures.count) failed: \(report.failures.prefix(5))")
        #expect(report.wrongReads.isEmpty, "\(report.wrongReads.prefix(5))")
        #expect(report.operations > 100, "only \(report.operations) operations")
    }

    /// Proves that a retry does not wait for a slow config refresh when the map arrives another way: a
    /// scripted node owns every vBucket in the client's map, answers the first GET with NOT_MY_VBUCKET
    /// without a map, and pushes the real node's map with its answer to the next one. The refresh
    /// meanwhile asks an admin seed that accepts and never answers (30 s HTTP timeout). The GET (20 s
    /// deadline) is answered by the real node well before that refresh ends: under 16 s even on a loaded
    /// 2-core run (alone the test takes ~1.2 s; fresh-clone rehearsals measured 1.64 s, 5.76 s with
    /// `make torture` running beside the whole suite, which failed the earlier 4 s bound, and 8.79 s with
    /// torture and two release builds beside it, which failed the 8 s one). Waiting for the refresh would
    /// outlast the GET's deadline, so the GET's success is the proof; the bound keeps the margin visible.
    @Test func retryDoesNotWaitForASlowRefresh() async throws {
        let server = try await offPool { Unchecked(value: try ServerProcess.started(name: "client-slowrefresh")) }
            .value
        defer { server.stopAndRemove() }
        let boxed = Unchecked(value: server)
        let realConfig = try await offPool { () throws -> [UInt8] in
            try boxed.value.initialize(authType: "sasl")
            return Array(try boxed.value.http("GET", "/pools/default/b/demo").body)
        }
        let writer = try await BucketClient.connect(Self.options(server, timeoutMs: 5_000), logger: quietClientLogger)
        _ = try await writer.upsert("k", Array("v".utf8))
        await writer.close()
        let portBox = NIOLockedValueBox(0)
        let dataRequests = NIOLockedValueBox(0)
        let fake = try FakeKVNode { f in
            let forged = FakeKVNode.forgedConfig(kvPort: portBox.withLockedValue { $0 })
            if let r = FakeKVNode.handshake(f, config: { forged }) { return r }
            let n = dataRequests.withLockedValue { n -> Int in
                n += 1
                return n
            }
            var b = n > 1 ? FakeKVNode.mapPush(realConfig) : ByteBuffer()
            var nmvb = FakeKVNode.response(to: f, status: .notMyVBucket)
            b.writeBuffer(&nmvb)
            return b
        }
        defer { fake.stop() }
        portBox.withLockedValue { $0 = fake.port }
        let mute = try FakeKVNode { _ in nil }
        defer { mute.stop() }
        var options = Self.options(
            server, timeoutMs: 20_000,
            seeds: [
                .kv(NodeAddress(host: "127.0.0.1", port: fake.port)),
                .http(NodeAddress(host: "127.0.0.1", port: mute.port)),
            ])
        options.connectTimeoutMs = 30_000
        options.configPollIntervalMs = 0
        let client = try await BucketClient.connect(options, logger: quietClientLogger)
        let began = ContinuousClock.now
        let got = try await client.get("k")
        let took = ContinuousClock.now - began
        await client.close()
        #expect(got.value == Array("v".utf8))
        #expect(took < .milliseconds(16_000), "the GET took \(took)")
        #expect(dataRequests.withLockedValue { $0 } >= 2)
    }

    /// Proves the client through real rebalances with starved callers: 8 workers write and read their own
    /// keys through one client (2 s deadline, replicas on) while a second node is added and rebalanced in,
    /// then rebalanced out again, and their executor runs freely for 0.5 s, then is pulsed twice (2.2 s
    /// stalls), over and over. Every
    /// operation ends with the right answer (no timeout, no ambiguous write, every read sees the last
    /// write), and the client ends on the cluster's final map.
    @Test func operationsThroughRebalanceInAndOut() async throws {
        let (a, b) = try await offPool { () throws -> Unchecked<(ServerProcess, ServerProcess)> in
            let a = try ServerProcess(name: "client-reb-a")
            let b = try ServerProcess(name: "client-reb-b")
            try a.start()
            try b.start()
            try a.initialize(replicaNumber: 1, authType: "sasl")
            return Unchecked(value: (a, b))
        }.value
        defer { [a, b].forEach { $0.stopAndRemove() } }
        let nodes = Unchecked(value: (a, b))
        let client = try await BucketClient.connect(Self.options(a, timeoutMs: 2_000), logger: quietClientLogger)
        let executor = StallableExecutor()
        let stop = NIOLockedValueBox(false)
        let load = Task { await Self.runLoad(client, workers: 8, executor: executor, stop: stop) }
        let rebalancing = NIOLockedValueBox(true)
        let staller = Task {
            while rebalancing.withLockedValue({ $0 }) {
                try? await Task.sleep(for: .milliseconds(500))
                executor.stall(seconds: 2.2, times: 2)
                try? await Task.sleep(for: .milliseconds(4_500))
            }
        }
        try await Task.sleep(for: .milliseconds(300))
        let outcome = try await offPool { () throws -> String in
            let (a, b) = nodes.value
            guard try ClusterHarness.addNode(a, b).status == 200 else { return "addNode refused" }
            var phases = "rebalance in from \(Self.clockTime())"
            let into = try ClusterHarness.rebalance(a, known: [a, b])
            if let e = into["errorMessage"] { return "rebalance in: \(e)" }
            phases += " to \(Self.clockTime())"
            Thread.sleep(forTimeInterval: 1)
            phases += ", out from \(Self.clockTime())"
            let out = try ClusterHarness.rebalance(a, known: [a, b], ejected: [b])
            if let e = out["errorMessage"] { return "rebalance out: \(e)" }
            print("ClientRebalanceProcessTests.operationsThroughRebalanceInAndOut: \(phases) to \(Self.clockTime())")
            return "ok"
        }
        rebalancing.withLockedValue { $0 = false }
        await staller.value
        // Operations after the last move, then stop.
        try await Task.sleep(for: .milliseconds(3_000))
        stop.withLockedValue { $0 = true }
        let report = await load.value
        executor.shutdown()
        let finalMap = try await offPool { try ClusterHarness.map(nodes.value.0) }
        let revision = client.configRevision
        await client.close()

        #expect(outcome == "ok")
        #expect(report.failures.isEmpty, "\(report.failures.count) failed: \(report.failures.prefix(5))")
        #expect(report.wrongReads.isEmpty, "\(report.wrongReads.prefix(5))")
        #expect(report.operations > 200, "only \(report.operations) operations")
        #expect(
            revision == MapRevision(epoch: Int64(finalMap.epoch), rev: Int64(finalMap.rev)),
            "client on \(String(describing: revision)), cluster on \(finalMap.epoch).\(finalMap.rev)")
    }
}
