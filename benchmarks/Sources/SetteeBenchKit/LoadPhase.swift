import NIOCore
import NIOPosix

/// How one phase (preload or measurement) loads a target.
public struct PhaseOptions: Sendable {
    public var connections: Int
    /// Closed loop: requests outstanding per connection.
    public var depth: Int
    /// Stop starting ops after this long (nil: run until `ops` are done).
    public var duration: TimeAmount?
    /// Stop after this many ops in total (nil: bounded by `duration`).
    public var ops: Int?
    /// Ops started in the first `warmup` of the phase are sent but not counted.
    public var warmup: TimeAmount
    /// Open loop: total requests per second over all connections (nil: closed loop).
    public var rate: Double?
    public var maxInFlight: Int
    /// Open loop: shortest sleep between send checks (see `ConnectionPlan.tickNanos`).
    public var tick: TimeAmount = .microseconds(200)
    /// Hard limit for the whole phase; outstanding requests then count as timeouts.
    public var timeout: TimeAmount
    public var seed: UInt64
    public var keyOrder: KeyOrderChoice
    /// Requests refused for now are sent again under this policy (the preload); nil: counted as errors.
    public var retry: TemporaryFailureRetry? = nil

    public enum KeyOrderChoice: Sendable { case uniform, sequential }

    public init(
        connections: Int, depth: Int, duration: TimeAmount?, ops: Int?, warmup: TimeAmount = .zero,
        rate: Double? = nil, maxInFlight: Int = 1024, timeout: TimeAmount = .seconds(600), seed: UInt64 = 42,
        keyOrder: KeyOrderChoice = .uniform
    ) {
        precondition(connections > 0 && depth > 0, "connections \(connections) / depth \(depth) must be positive")
        precondition(duration != nil || ops != nil, "a phase needs a duration or an op count")
        self.connections = connections
        self.depth = depth
        self.duration = duration
        self.ops = ops
        self.warmup = warmup
        self.rate = rate
        self.maxInFlight = maxInFlight
        self.timeout = timeout
        self.seed = seed
        self.keyOrder = keyOrder
    }
}

/// What a phase measured, before formatting.
public struct PhaseResult: Sendable {
    public var report: ConnectionReport
    /// From the end of the warmup to the last counted response.
    public var measuredSeconds: Double
    public var connected: Int
    /// Completed operations in each second of the phase (warmup included), for throughput dips.
    public var timeline: [Int] = []
}

/// A target with its codec tables built, reusable across phases and rounds.
public enum PreparedTarget: Sendable {
    case memcachedBinary(BenchTarget, KeySpace)
    case redis(BenchTarget, RESPCodec.Tables)
    case settee(BenchTarget, KeySpace, bucket: String, credentials: (String, String)?)

    public init(
        _ target: BenchTarget, keySpace: KeySpace, bucket: String = "demo", credentials: (String, String)? = nil
    ) {
        switch target.kind {
        case .memcachedBinary: self = .memcachedBinary(target, MemcachedBinaryCodec.prepare(keySpace))
        case .redis: self = .redis(target, RESPCodec.prepare(keySpace))
        case .settee: self = .settee(target, keySpace, bucket: bucket, credentials: credentials)
        }
    }

    public var target: BenchTarget {
        switch self {
        case .memcachedBinary(let t, _), .redis(let t, _), .settee(let t, _, _, _): return t
        }
    }
}

/// Runs phases against targets over one event-loop group.
public struct LoadGenerator: Sendable {
    public let group: any EventLoopGroup

    public init(group: any EventLoopGroup) { self.group = group }

    /// Connects `options.connections` channels, starts them together, prints a progress line to
    /// stderr once a second (if `progressLabel` is set) and merges the connections' reports.
    public func run(
        _ prepared: PreparedTarget, workload: Workload, options: PhaseOptions, progressLabel: String?
    ) async -> PhaseResult {
        switch prepared {
        case .memcachedBinary(let target, let shared):
            return await run(MemcachedBinaryCodec.self, shared, target, workload, options, progressLabel)
        case .redis(let target, let shared):
            return await run(RESPCodec.self, shared, target, workload, options, progressLabel)
        case .settee(let target, let keySpace, let bucket, let credentials):
            return await SmartClientLoad.run(
                target, keySpace, bucket: bucket, credentials: credentials, workload: workload, options: options,
                group: group, progressLabel: progressLabel)
        }
    }

    private func run<Codec: LoadCodec>(
        _: Codec.Type, _ shared: Codec.Shared, _ target: BenchTarget, _ workload: Workload, _ options: PhaseOptions,
        _ progressLabel: String?
    ) async -> PhaseResult {
        let control = RunControl(opLimit: options.ops)
        var merged = ConnectionReport()

        // 1. Connect everything first, so connection setup is not measured.
        var channels: [any Channel] = []
        let attempts = (0..<options.connections).map { _ in
            ClientBootstrap(group: group)
                .channelOption(.socketOption(.tcp_nodelay), value: 1)
                .connectTimeout(.seconds(5))
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(
                            LoadHandler<Codec>(codec: Codec(shared: shared), control: control))
                    }
                }
                .connect(host: target.host, port: target.port)
        }
        for attempt in attempts {
            do {
                channels.append(try await attempt.get())
            } catch {
                merged.addError("connect: \(error)")
            }
        }

        // 2. Start all connections with one shared clock.
        let start = uptimeNanos()
        let recordAfter = start + UInt64(options.warmup.nanoseconds)
        let stopAt = options.duration.map { NIODeadline.uptimeNanoseconds(start + UInt64($0.nanoseconds)) }
        let abandonAt = NIODeadline.uptimeNanoseconds(
            start + UInt64((options.duration.map { $0 + .seconds(10) } ?? options.timeout).nanoseconds))
        let interval = options.rate.map { UInt64(Double(options.connections) * 1e9 / $0) }
        var futures: [EventLoopFuture<ConnectionReport>] = []
        for (i, channel) in channels.enumerated() {
            let plan = ConnectionPlan(
                getPercent: workload.getPercent, keys: workload.keys,
                keyOrder: options.keyOrder == .uniform
                    ? .uniform : .sequential(first: i, stride: channels.count),
                depth: options.depth, stopAt: stopAt, abandonAt: abandonAt, recordAfter: recordAfter,
                // Stagger the connections' schedules evenly across one interval.
                openLoop: interval.map { ($0, start + $0 * UInt64(i) / UInt64(channels.count)) },
                maxInFlight: options.maxInFlight, tickNanos: UInt64(options.tick.nanoseconds),
                seed: options.seed &+ UInt64(i) &* 0x9E37_79B9_7F4A_7C15, retry: options.retry, phaseStart: start)
            futures.append(
                channel.eventLoop.submit {
                    let handler = try channel.pipeline.syncOperations.handler(type: LoadHandler<Codec>.self)
                    handler.start(plan)
                    return handler.reportFuture
                }.flatMap { $0 })
        }

        // 3. Progress once a second while the connections run.
        let progress: Task<Void, Never>? = progressLabel.map { label in
            Task {
                var last = 0
                var seconds = 0
                while !Task.isCancelled {
                    do { try await Task.sleep(for: .seconds(1)) } catch { return }
                    seconds += 1
                    let done = control.completedCount
                    let failed = control.failedCount
                    printErr("[\(label)] \(seconds)s  \(done - last) ops/s  total \(done)  errors \(failed)")
                    last = done
                }
            }
        }
        for future in futures {
            do {
                merged.merge(try await future.get())
            } catch {
                merged.addError("connection: \(error)")
            }
        }
        progress?.cancel()
        let end = merged.lastCompletion
        let seconds = end > recordAfter ? Double(end - recordAfter) / 1e9 : 0
        return PhaseResult(report: merged, measuredSeconds: seconds, connected: channels.count)
    }
}

func printErr(_ line: String) {
    var line = line
    line.append("\n")
    FileHandleStderr.put(line)
}
