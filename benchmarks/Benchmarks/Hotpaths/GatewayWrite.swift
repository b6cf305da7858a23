// The gateway's write path in process (issue 69 item 6): `GatewayDatabase.put` of a 1 KiB JSON document on an
// in-memory (`walrus:`) bucket with the default sync function, shared bucket access (the default layout) — what a
// REST `PUT /db/doc` does after its body is parsed: revision digest, revision tree, sync function, the bucket's
// sub-document write and the channel index. No HTTP, no network.
import Benchmark
import Logging
import SetteeGateway
import SetteeJSON

/// One database on an embedded bucket for the write benchmarks, opened in `setup` and closed in `teardown`.
final class GatewayWriteFixture: @unchecked Sendable {
    static let shared = GatewayWriteFixture()
    private(set) var bucket: EmbeddedBucket?
    private(set) var database: GatewayDatabase?

    func open() async throws {
        var logger = Logger(label: "bench")
        logger.logLevel = .critical
        let bucket = try EmbeddedBucket(server: "walrus:", name: "bench", logger: logger)
        var options = DatabaseOptions(name: "db")
        options.sharedBucketAccess = true  // a config's default (Sync Gateway 3.0)
        database = try await GatewayDatabase(options: options, bucket: bucket, logger: logger)
        self.bucket = bucket
    }

    func close() async {
        await database?.close()
        await bucket?.close()
        database = nil
        bucket = nil
    }
}

let gatewayWriteBenchmarks: @Sendable () -> Void = {
    // 1 KiB: a channel, a few scalars, an array and a padding string, as a mobile app's document.
    func body(_ n: Int, rev: String?) -> JSON {
        var members: [(String, JSON)] = []
        if let rev { members.append(("_rev", .string(rev))) }
        members += [
            ("type", "order"), ("channels", .array(["store-1"])), ("n", .integer(Int128(n))),
            ("items", .array((0..<40).map { .string("sku-\($0)") })),
            ("note", .string(String(repeating: "x", count: 560))),
        ]
        return .object(members)
    }
    let setup: @Sendable () async throws -> Void = { try await GatewayWriteFixture.shared.open() }
    let teardown: @Sendable () async throws -> Void = { await GatewayWriteFixture.shared.close() }

    Benchmark(
        "GatewayDatabase.put new 1 KiB document (walrus, shared access)",
        configuration: .init(setup: setup, teardown: teardown)
    ) { benchmark in
        guard let db = GatewayWriteFixture.shared.database else { return }
        // The closure runs once per warm-up and measured run on one database: ids new to each run.
        let run = UInt64.random(in: 0...UInt64.max)
        var i = 0
        for _ in benchmark.scaledIterations {
            i += 1
            blackHole(try await db.put("new-\(run)-\(i)", body: body(i, rev: nil), user: nil))
        }
    }

    Benchmark(
        "GatewayDatabase.put update of a 1 KiB document (walrus, shared access)",
        // One update reads the document back with its kept ancestor bodies: milliseconds, not microseconds.
        configuration: .init(scalingFactor: .one, maxDuration: .seconds(3), setup: setup, teardown: teardown)
    ) { benchmark in
        guard let db = GatewayWriteFixture.shared.database else { return }
        let id = "updated-\(UInt64.random(in: 0...UInt64.max))"
        var rev = try await db.put(id, body: body(0, rev: nil), user: nil)
        var i = 0
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            i += 1
            rev = try await db.put(id, body: body(i, rev: String(describing: rev)), user: nil)
        }
        benchmark.stopMeasurement()
        blackHole(rev)
    }
}
