import Foundation
import SetteeDocument
import SetteeJSON
import Testing

@testable import SetteeGateway

/// The gateway's write path timed in process (issue 69 item 6), run only on request: `SETTEE_MEASURE=1 swift test
/// --skip-build --filter GatewayWriteMeasureTests`. `GatewayDatabase.put` of a 1 KiB document as updates of one
/// document (each reads the document back with its kept ancestor bodies and writes them into `_sync` again), on a
/// walrus bucket, with both layouts; prints microseconds per update. A measurement, not a check: the assertions are
/// only that every update was made. `benchmarks/Benchmarks/Hotpaths/GatewayWrite.swift` is the release benchmark.
@Suite(.serialized, .enabled(if: ProcessInfo.processInfo.environment["SETTEE_MEASURE"] != nil))
struct GatewayWriteMeasureTests {
    static func body(_ n: Int, rev: String?) -> JSON {
        var members: [(String, JSON)] = []
        if let rev { members.append(("_rev", .string(rev))) }
        members += [
            ("type", "order"), ("channels", .array(["store-1"])), ("n", .integer(Int128(n))),
            ("items", .array((0..<40).map { .string("sku-\($0)") })),
            ("note", .string(String(repeating: "x", count: 560))),
        ]
        return .object(members)
    }

    @Test(arguments: [true, false]) func updatesOfOneDocument(sharedAccess: Bool) async throws {
        let bucket = try EmbeddedBucket(server: "walrus:", name: "measure", logger: quietLogger())
        var options = DatabaseOptions(name: "db")
        options.sharedBucketAccess = sharedAccess
        let db = try await GatewayDatabase(options: options, bucket: bucket, logger: quietLogger())
        var rev = try await db.put("doc", body: Self.body(0, rev: nil), user: nil)
        for i in 1...50 { rev = try await db.put("doc", body: Self.body(i, rev: rev.description), user: nil) }
        let n = 300
        let clock = ContinuousClock()
        let start = clock.now
        for i in 1...n { rev = try await db.put("doc", body: Self.body(i, rev: rev.description), user: nil) }
        let elapsed = clock.now - start
        let micros = Double(elapsed.components.seconds) * 1e6 + Double(elapsed.components.attoseconds) / 1e12
        print("GatewayWriteMeasure sharedAccess=\(sharedAccess): \(n) updates, \(Int(micros / Double(n))) µs each")
        #expect(rev.generation == 51 + n)
        await db.close()
        await bucket.close()
    }
}
