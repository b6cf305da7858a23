import Foundation
import Logging
import SetteeCore
import SetteeStorage
import SetteeTestSupport
import Testing

@testable import SetteeGateway

/// A gateway that shuts down closes its buckets too, instead of leaving them to the process's exit: a walrus
/// bucket's temporary directory is removed, and a file-backed bucket's engine shuts down cleanly.
@Suite struct GatewayShutdownTests {
    @Test func closingTheServerClosesItsBuckets() async throws {
        let dir = TemporaryDirectory("gateway-shutdown")
        defer { dir.remove() }
        var logger = Logger(label: "settee.gateway.test")
        logger.logLevel = .critical
        let config = try GatewayConfig.parse(
            Array(#"{"databases": {"kept": {"server": "\#(dir.path)"}, "mem": {"server": "walrus:"}}}"#.utf8))
        let server = try await GatewayServer.open(config: config, logger: logger)
        let kept = try #require(server.databases["kept"]?.bucket as? EmbeddedBucket)
        let mem = try #require(server.databases["mem"]?.bucket as? EmbeddedBucket)
        let key = Array("doc".utf8)
        let vb = VBucketHash.vbucket(forKey: key, count: kept.engine.settings.numVBuckets)
        _ = try kept.engine.store(
            .set, vb, key, value: Array("{}".utf8), flags: 0, expiry: 0, datatype: .json, cas: .zero)
        #expect(FileManager.default.fileExists(atPath: mem.directory))

        await server.close()
        #expect(!FileManager.default.fileExists(atPath: mem.directory), "the walrus bucket's directory was left")
        // The file-backed bucket holds the write, and its file was shut down cleanly: warmup starts no new
        // failover-log entry, which it does after a crash.
        let reopened = try EmbeddedBucket(directory: kept.directory, temporary: false, name: "kept", logger: logger)
        #expect(try reopened.engine.get(vb, key).value == Array("{}".utf8))
        #expect(reopened.engine.failoverLog(vb).count == 1)
        await reopened.close()
        // A second close returns at once.
        await server.close()
    }

    /// A start that fails at its second database (a sync function that does not compile) closes what it had opened:
    /// the first database's walrus directory is gone.
    @Test func aFailedStartClosesTheBucketsItOpened() async throws {
        var logger = Logger(label: "settee.gateway.test")
        logger.logLevel = .critical
        let probe = "probe\(UInt32.random(in: 0...UInt32.max))"
        let config = try GatewayConfig.parse(
            Array(
                #"{"databases": {"a": {"server": "walrus:", "bucket": "\#(probe)"}, "b": {"server": "walrus:", "sync": "function( {"}}}"#
                    .utf8))
        await #expect(throws: GatewayStartError.self) { try await GatewayServer.open(config: config, logger: logger) }
        let left = try FileManager.default.contentsOfDirectory(atPath: NSTemporaryDirectory())
            .filter { $0.hasPrefix("settee-walrus-\(probe)-") }
        #expect(left.isEmpty, "left behind: \(left)")
    }
}
