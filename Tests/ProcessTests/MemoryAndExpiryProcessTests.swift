import Foundation
import NIOCore
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

/// Quota enforcement, eviction with background fetch over the wire, and expiry, on real processes.
@Suite(.serialized, .onTestThreads) struct MemoryAndExpiryProcessTests {
    /// Proves `ramQuotaMB` is enforced without losing data: 220 MiB of values into a 100 MiB bucket
    /// succeed (TMPFAIL is a retryable answer while the flusher catches up), values of persisted
    /// items are evicted, and every value still reads back intact — evicted ones fetched from disk
    /// without blocking other requests on the connection.
    @Test func quotaEvictsAndFetchesBack() throws {
        let server = try ServerProcess.started(name: "quota")
        defer { server.stopAndRemove() }
        try server.initialize(ramQuotaMB: 100)
        let client = try TestKVClient(port: server.kvPort)
        var rng = SplitMix64(seed: 0x9007a)
        let count = 220
        var values: [[UInt8]] = []
        var tmpfails = 0
        for i in 0..<count {
            // Incompressible, so LZ4 cannot shrink the problem away.
            var words = [UInt64](repeating: 0, count: 1024 * 1024 / 8)
            for w in words.indices { words[w] = rng.next() }
            let value = words.withUnsafeBytes { Array($0) }
            values.append(value)
            var attempts = 0
            while true {
                let r = try client.request(
                    .set, key: "big-\(i)", value: value, extras: TestKVClient.setExtras(flags: UInt32(i), expiry: 0))
                if r.status == .success { break }
                #expect(r.status == .temporaryFailure, "set big-\(i): \(r.status)")
                tmpfails += 1
                attempts += 1
                #expect(attempts < 600, "big-\(i) still refused after 60 s")
                if attempts >= 600 { return }
                usleep(100_000)
            }
        }
        // Read everything back, pipelined, so a fetch from disk sits among in-memory hits.
        var out = ByteBuffer()
        for i in 0..<count {
            out.writeRequest(
                opcode: .get, vbucket: VBucketHash.vbucket(forKey: Array("big-\(i)".utf8)).rawValue, opaque: UInt32(i),
                key: Array("big-\(i)".utf8))
        }
        try client.send(out)
        for i in 0..<count {
            let r = try client.receive()
            #expect(r.opaque == UInt32(i), "responses must stay in request order")
            #expect(r.status == .success)
            #expect(r.flags == UInt32(i))
            // Compare as a Bool: a failing `==` on two 1 MiB arrays would make the test library
            // compute their difference, which takes minutes.
            let same = r.valueBytes == values[Int(r.opaque)]
            #expect(
                same, "value of big-\(r.opaque) differs: \(r.valueBytes.count) bytes, first \(r.valueBytes.prefix(8))")
        }
        let stats = try client.stats()
        let ejects = Int(stats["ep_num_value_ejects"] ?? "0") ?? 0
        let fetched = Int(stats["ep_bg_fetched"] ?? "0") ?? 0
        let memUsed = Int(stats["mem_used"] ?? "0") ?? 0
        #expect(ejects > 0, "values must have been evicted: \(stats)")
        #expect(fetched > 0, "evicted values must have been fetched from disk")
        #expect(memUsed <= 100 * 1024 * 1024, "mem_used \(memUsed) above the quota")
        try? "tmpfails=\(tmpfails) ejects=\(ejects) bgFetched=\(fetched) memUsed=\(memUsed)\n"
            .write(to: TestOutput.directory.appendingPathComponent("quota-test.txt"), atomically: true, encoding: .utf8)
    }

    /// Proves expiry on the wire: relative expiry hides a document once it passes, TOUCH extends
    /// it, GAT reads and re-arms it, and an expired document can be ADDed again.
    @Test func expiryTouchAndGat() throws {
        let server = try ServerProcess.started(name: "expiry")
        defer { server.stopAndRemove() }
        try server.initialize()
        let c = try TestKVClient(port: server.kvPort)
        #expect(
            try c.request(
                .set, key: "short", value: Array("a".utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 1)
            ).status == .success)
        #expect(
            try c.request(
                .set, key: "touched", value: Array("b".utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 1)
            ).status == .success)
        #expect(
            try c.request(.set, key: "gat", value: Array("c".utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 1))
                .status == .success)
        #expect(try c.request(.touch, key: "touched", extras: [0, 0, 0, 100]).status == .success)
        let gat = try c.request(.gat, key: "gat", extras: [0, 0, 0, 100])
        #expect(gat.status == .success)
        #expect(gat.valueBytes == Array("c".utf8))
        usleep(2_200_000)
        #expect(try c.request(.get, key: "short").status == .keyNotFound)
        #expect(try c.request(.get, key: "touched").status == .success)
        #expect(try c.request(.get, key: "gat").status == .success)
        #expect(
            try c.request(
                .add, key: "short", value: Array("again".utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 0)
            ).status == .success)
        #expect(try c.request(.get, key: "short").valueBytes == Array("again".utf8))
    }

}
