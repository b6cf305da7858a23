import Dispatch
import Histogram
import Logging
import NIOCore
import SetteeClient
import SetteeCore
import SetteeProtocol
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The `settee` target kind: load through `SetteeClient.BucketClient`, the smart client an application
/// links, over a whole cluster. It bootstraps from the admin port given as the target's address, routes
/// every key to its vBucket's owner and follows map changes (NOT_MY_VBUCKET, pushes, polling), so this is the
/// kind to use for cluster runs and for load during a rebalance.
///
/// Closed loop only: `connections × depth` tasks each keep one operation outstanding (the client multiplexes
/// them over one pipelined connection per node, as SDKs do). Latency is measured around each `await`.
enum SmartClientLoad {
    static func run(
        _ target: BenchTarget, _ keySpace: KeySpace, bucket: String, credentials: (String, String)?,
        workload: Workload, options: PhaseOptions, group: any EventLoopGroup, progressLabel: String?
    ) async -> PhaseResult {
        var merged = ConnectionReport()
        guard options.rate == nil else {
            merged.addError("the settee target supports closed-loop runs only (no --rate)")
            return PhaseResult(report: merged, measuredSeconds: 0, connected: 0)
        }
        let client: BucketClient
        // `,collection=S.C`: every operation through a handle on a collection-aware client (ADR 0134), so the
        // same workload on the default collection and on a named one compares the key prefix's cost.
        var resolved: CollectionHandle?
        do {
            var clientOptions = ClientOptions(
                seeds: [.http(NodeAddress(host: target.host, port: target.port))], bucket: bucket,
                username: credentials?.0, password: credentials?.1, operationTimeoutMs: 10_000)
            clientOptions.collections = target.collection != nil
            client = try await BucketClient.connect(
                clientOptions, group: group, logger: Logger(label: "settee-bench.client"))
            if let path = target.collection {
                let parts = path.split(separator: ".", maxSplits: 1).map(String.init)
                let h = client.collection(parts[0], parts.count > 1 ? parts[1] : "")
                // Resolve the id before the clock starts: the first operation would otherwise pay it.
                _ = try await client.collectionID(scope: h.scope, collection: h.name)
                resolved = h
            }
        } catch {
            merged.addError("connect: \(error)")
            return PhaseResult(report: merged, measuredSeconds: 0, connected: 0)
        }
        let handle = resolved
        let durability: DurabilityLevel? =
            switch target.durability {
            case "majority": .majority
            case "majorityAndPersistActive": .majorityAndPersistActive
            case "persistToMajority": .persistToMajority
            default: nil
            }
        let control = RunControl(opLimit: options.ops)
        // SIGINT ends the phase early but cleanly (the report and JSON are still written): scripts use it to
        // stop a steady background load when the experiment around it is over.
        signal(SIGINT, SIG_IGN)
        let interrupt = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        interrupt.setEventHandler { control.stop() }
        interrupt.resume()
        defer {
            interrupt.cancel()
            signal(SIGINT, SIG_DFL)
        }
        let start = uptimeNanos()
        let recordAfter = start + UInt64(options.warmup.nanoseconds)
        let stopAt = options.duration.map { start + UInt64($0.nanoseconds) }
        let lanes = options.connections * options.depth
        let progress = Task { () -> [Int] in
            var timeline: [Int] = []
            var last = 0
            var seconds = 0
            while !Task.isCancelled {
                do { try await Task.sleep(for: .seconds(1)) } catch { return timeline }
                seconds += 1
                let done = control.completedCount
                timeline.append(done - last)
                if let progressLabel {
                    printErr(
                        "[\(progressLabel)] \(seconds)s  \(done - last) ops/s  total \(done)  errors \(control.failedCount)"
                    )
                }
                last = done
            }
            return timeline
        }
        await withTaskGroup(of: ConnectionReport.self) { tasks in
            for lane in 0..<lanes {
                tasks.addTask {
                    var report = ConnectionReport()
                    var rng = SplitMix64(seed: options.seed &+ UInt64(lane) &* 0x9E37_79B9_7F4A_7C15)
                    // A sequential pass (the preload): this lane's own share of the keys, each key written by one
                    // lane once. It used to take any lane's next turn and wrap around the key space, so a lane
                    // faster than the others wrote some keys twice and a slower one's last keys never.
                    var keys = KeyCursor(
                        options.keyOrder == .uniform ? .uniform : .sequential(first: lane, stride: lanes),
                        keys: keySpace.keys.count)
                    while !control.isStopped {
                        if let stopAt, uptimeNanos() >= stopAt { break }
                        guard let index = keys.next(&rng), control.takeOne() else { break }
                        let isGet = Int(rng.next() % 100) < workload.getPercent
                        let key = String(decoding: keySpace.keys[index], as: UTF8.self)
                        let began = uptimeNanos()
                        let kind: OpKind = isGet ? .get : .set
                        do {
                            var retries = 0
                            while true {
                                do {
                                    switch (isGet, handle) {
                                    case (true, nil): _ = try await client.get(key)
                                    case (true, let h?): _ = try await h.get(key)
                                    case (false, nil):
                                        _ = try await client.upsert(key, keySpace.value, durability: durability)
                                    case (false, let h?):
                                        _ = try await h.upsert(key, keySpace.value, durability: durability)
                                    }
                                    break
                                } catch let e as ClientError where e == .temporaryFailure || e == .outOfMemory {
                                    // Refused for now: again after the policy's back-off, or an error when spent.
                                    guard let policy = options.retry,
                                        case .retry(let delay) = policy.decide(
                                            retries: retries, phaseStart: start, now: uptimeNanos())
                                    else {
                                        if options.retry != nil { report.failedAfterRetries += 1 }
                                        throw e
                                    }
                                    report.retried += 1
                                    retries += 1
                                    try await Task.sleep(nanoseconds: delay)
                                }
                            }
                            let now = uptimeNanos()
                            control.completed.add(1, ordering: .relaxed)
                            if began >= recordAfter {
                                report.latency[kind.rawValue].record(now - began)
                                report.ok[kind.rawValue] += 1
                                report.lastCompletion = max(report.lastCompletion, now)
                            }
                        } catch ClientError.keyNotFound {
                            control.completed.add(1, ordering: .relaxed)
                            if began >= recordAfter { report.misses += 1 }
                        } catch {
                            control.failed.add(1, ordering: .relaxed)
                            report.addError("\(kind.name): \(error)")
                        }
                    }
                    return report
                }
            }
            for await report in tasks { merged.merge(report) }
        }
        progress.cancel()
        let timeline = await progress.value
        await client.close()
        let end = merged.lastCompletion
        let seconds = end > recordAfter ? Double(end - recordAfter) / 1e9 : 0
        return PhaseResult(report: merged, measuredSeconds: seconds, connected: lanes, timeline: timeline)
    }
}
