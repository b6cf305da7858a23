import Foundation
import SetteeTestSupport
import Testing

/// The official Couchbase Python SDK (`couchbase==4.6.3`, installed into `.build-py/venv` by
/// `scripts/python-deps.sh`) against one real settee node: `sdk/sdk_roundtrip.py` runs KV operations
/// with CAS, expiry, counters, durability levels, locks, bucket management, each SCRAM mechanism, a wrong
/// password and RBAC users, and prints PASS/FAIL per check.
@Suite(.serialized, .onTestThreads) struct PythonSDKProcessTests {
    static var python: URL { TestOutput.packageRoot.appendingPathComponent(".build-py/venv/bin/python") }

    /// Installs the SDK if missing (idempotent; needs PyPI the first time).
    static func ensureSDK() throws {
        let run = try ChildProcess.run(
            "/bin/bash", [TestOutput.packageRoot.appendingPathComponent("scripts/python-deps.sh").path], timeout: 900)
        guard run.status == 0 else { throw HarnessError("scripts/python-deps.sh failed: \(run.output.suffix(2000))") }
    }

    /// Runs a script from `sdk/` with arguments; returns its exit status and output (stdout + stderr).
    static func run(script: String, arguments: [String], log: URL) throws -> (Int32, String) {
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)  // this run's output only
        // Bounded: the script's own timeouts are seconds; anything past 5 minutes is a hang.
        let run = try ChildProcess.run(
            python.path,
            [TestOutput.packageRoot.appendingPathComponent("Tests/ProcessTests/sdk/\(script)").path] + arguments,
            environment: ["PYCBC_LOG_LEVEL": nil], output: .log(log), timeout: 300)
        return (run.status, run.output)
    }

    /// Proves the unchanged SDK with default settings (SCRAM-SHA512 on plain TCP, no PLAIN forcing)
    /// bootstraps, runs get/upsert/insert/replace/remove with CAS, exists, touch, get_and_touch,
    /// get_and_lock/unlock, counters with initial values, append/prepend, expiry and durability levels
    /// with the exceptions Couchbase causes, manages buckets over HTTP, pings, authenticates with
    /// SCRAM-SHA256/SHA1/PLAIN on request, refuses a wrong password, and that a data_reader user
    /// created through the SDK's user manager may read but not write.
    @Test func officialPythonSDKRoundTrip() throws {
        try Self.runOnOneNode(script: "sdk_roundtrip.py", name: "python-sdk", passes: 12) { server in
            // The default authenticator's wrong password was refused by the SCRAM proof check (not PLAIN); the user
            // name is logged as user data (`<ud>`, partial redaction by default).
            let serverLog = (try? String(contentsOf: server.logURL, encoding: .utf8)) ?? ""
            #expect(serverLog.contains("reason=invalidProof") && serverLog.contains("user=<ud>Administrator</ud>"))
        }
    }

    /// Proves the unchanged SDK (default settings: SCRAM over plain TCP) on a 3-node cluster with replicaNumber 1:
    /// majority-durable upserts succeed; upserts and gets running through a rebalance that adds a fourth node see
    /// no error; after a node is SIGKILLed and failed over, every majority-durable write is read back, the only
    /// errors on the way being the timeouts Couchbase documents for a failover; writes succeed afterwards.
    @Test func officialPythonSDKThroughRebalanceAndFailover() throws {
        try Self.runThroughRebalanceAndFailover(script: "sdk_cluster.py", name: "python-sdk-cluster", passes: 4)
    }

    /// Runs an SDK `script` against one initialised node (bucket `demo`, SASL): its arguments are the KV port,
    /// credentials and bucket. Expects exit 0 and `passes` PASS lines; `then` looks at the node afterwards.
    static func runOnOneNode(
        script: String, name: String, passes: Int, then: (ServerProcess) throws -> Void = { _ in }
    ) throws {
        try ensureSDK()
        let server = try ServerProcess.started(name: name)
        defer { server.stopAndRemove() }
        try server.initialize(authType: "sasl")
        let log = TestOutput.directory.appendingPathComponent("\(name)-\(server.kvPort).out")
        let (status, output) = try run(
            script: script, arguments: [String(server.kvPort), server.user, server.password, "demo"], log: log)
        expectPassed(script: script, status: status, output: output, log: log, passes: passes)
        try then(server)
    }

    /// A script passed: exit 0 (its failed checks listed otherwise) and exactly `passes` PASS lines.
    static func expectPassed(script: String, status: Int32, output: String, log: URL, passes: Int) {
        let failed = output.split(separator: "\n").filter { $0.hasPrefix("FAIL ") }
        #expect(status == 0, "\(script) checks failed (\(log.path)):\n\(failed.joined(separator: "\n"))")
        #expect(output.split(separator: "\n").filter { $0.hasPrefix("PASS ") }.count == passes)
    }

    /// Runs an SDK `script` against a 3-node cluster (replicaNumber 1) with a fourth node to add and the third to
    /// kill: its arguments are the KV seeds, the admin URL, credentials, bucket, the node to add, the victim's name
    /// and pid. Expects exit 0 and `passes` PASS lines.
    static func runThroughRebalanceAndFailover(script: String, name: String, passes: Int) throws {
        try ensureSDK()
        let nodes = try (0..<4).map { try ServerProcess(name: "\(name)-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for s in nodes { try s.start() }
        let (a, b, c, d) = (nodes[0], nodes[1], nodes[2], nodes[3])
        try ClusterHarness.formCluster([a, b, c], authType: "sasl")
        let victimPID = try #require(c.process?.processIdentifier)
        let log = TestOutput.directory.appendingPathComponent("\(name)-\(a.kvPort).out")
        let (status, output) = try run(
            script: script,
            arguments: [
                [a, b, c].map { "127.0.0.1:\($0.kvPort)" }.joined(separator: ","), "http://127.0.0.1:\(a.adminPort)",
                a.user, a.password, "demo", "127.0.0.1:\(d.adminPort)", ClusterHarness.nodeName(c), String(victimPID),
            ], log: log)
        expectPassed(script: script, status: status, output: output, log: log, passes: passes)
    }
}
