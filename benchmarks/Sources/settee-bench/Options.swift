import ArgumentParser
import NIOCore
import SetteeBenchKit

/// `30s`, `500ms`, `2m` or a plain number of seconds.
struct Duration: ExpressibleByArgument {
    var amount: TimeAmount
    init?(argument: String) {
        let units: [(String, Double)] = [("ms", 1e6), ("us", 1e3), ("s", 1e9), ("m", 60e9)]
        for (suffix, nanos) in units where argument.hasSuffix(suffix) {
            guard let n = Double(argument.dropLast(suffix.count)), n >= 0 else { return nil }
            amount = .nanoseconds(Int64(n * nanos))
            return
        }
        guard let n = Double(argument), n >= 0 else { return nil }
        amount = .nanoseconds(Int64(n * 1e9))
    }
}

struct WorkloadOptions: ParsableArguments {
    @Option(
        name: .customLong("target"),
        help: "[NAME@]KIND=HOST:PORT, KIND memcached-binary or redis; loopback only. Repeatable.")
    var targets: [String] = []

    @Option(help: "Operation mix, e.g. get=90,set=10.")
    var mix: String = "get=90,set=10"

    @Option(help: "Value size in bytes for SETs and the preload.")
    var valueSize: Int = 1024

    @Option(help: "Size of the key space; keys are chosen uniformly.")
    var keys: Int = 100_000

    @Option(help: "Client connections.")
    var connections: Int = 64

    @Option(help: "Closed loop: requests kept outstanding per connection (pipelining depth).")
    var depth: Int = 1

    @Option(help: "How long to measure (30s, 500ms, 2m).")
    var duration: Duration?

    @Option(help: "Stop after this many ops instead of after a duration.")
    var ops: Int?

    @Option(help: "Ops started during this first part of the run are not counted.")
    var warmup: Duration = Duration(argument: "1s")!

    @Option(help: "Open loop: total requests per second, latency from the intended send time.")
    var rate: Double?

    @Option(help: "Open loop: most outstanding requests per connection; later ones wait (and that wait is latency).")
    var maxInflight: Int = 1024

    @Option(help: "Open loop: shortest sleep between send checks; a request may leave this late, counted as latency.")
    var tick: Duration = Duration(argument: "200us")!

    @Option(help: "Event-loop threads for the client.")
    var threads: Int = 2

    @Flag(help: "Skip writing every key once before measuring.")
    var noPreload = false

    @Option(help: "Pipelining depth per connection for the preload.")
    var preloadDepth: Int = 32

    @Option(help: "Seed for key and op choice.")
    var seed: UInt64 = 42

    @Flag(help: "No progress line on stderr.")
    var quiet = false

    @Option(help: "Write the results as JSON to this file.")
    var json: String?

    @Option(help: "settee targets: the bucket to load.")
    var bucket: String = "demo"

    @Option(help: "settee targets: user for the cluster (the bucket's password for SASL).")
    var username: String = "Administrator"

    @Option(help: "settee targets: password.")
    var password: String = "password"

    func validate() throws {
        guard !targets.isEmpty else { throw ValidationError("at least one --target is required") }
        for t in targets {
            do { _ = try BenchTarget.parse(t) } catch { throw ValidationError(error.description) }
        }
        guard Workload.parseMix(mix) != nil else { throw ValidationError("--mix must look like get=90,set=10") }
        guard keys > 0, valueSize >= 0, connections > 0, connections <= 10_000, depth > 0, depth <= 65_536,
            threads > 0, preloadDepth > 0, maxInflight > 0
        else { throw ValidationError("keys, connections, depth, threads must be positive (connections ≤ 10000)") }
        if let rate, !(rate > 0) { throw ValidationError("--rate must be positive") }
        if duration == nil && ops == nil { throw ValidationError("give --duration or --ops") }
        if let ops, ops <= 0 { throw ValidationError("--ops must be positive") }
    }

    var parsedTargets: [BenchTarget] { targets.map { try! BenchTarget.parse($0) } }

    var workload: Workload { Workload(getPercent: Workload.parseMix(mix)!, valueSize: valueSize, keys: keys) }

    var phase: PhaseOptions {
        var p = PhaseOptions(
            connections: connections, depth: depth, duration: duration?.amount, ops: ops,
            warmup: ops == nil ? warmup.amount : .zero, rate: rate, maxInFlight: maxInflight, seed: seed)
        p.tick = tick.amount
        return p
    }

    var preloadPhase: PhaseOptions {
        PhaseOptions(
            connections: min(connections, 16), depth: preloadDepth, duration: nil, ops: keys, maxInFlight: maxInflight,
            timeout: .seconds(300), seed: seed, keyOrder: .sequential)
    }
}
