import Foundation
import NIOCore
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A built executable of this package (beside `settee-server`).
func builtBinary(_ name: String) -> String { BuiltExecutable.path(name) }

/// Runs the memcached project's binary-protocol conformance suite (`memccapable -b`, Debian's
/// libmemcached-tools) against `port` and expects every case to pass but the `refused` ones, which must
/// fail; its output goes to `report`.
func expectMemccapablePasses(port: Int, report: String, refused: [String] = []) throws {
    let tool = ["/usr/bin/memccapable", "/usr/local/bin/memccapable"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }
    let path = try #require(tool, "memccapable not installed: `make test` installs libmemcached-tools")
    let run = try ChildProcess.run(path, ["-h", "127.0.0.1", "-p", String(port), "-b", "-t", "10"])
    let output = run.output
    try output.write(to: TestOutput.directory.appendingPathComponent(report), atomically: true, encoding: .utf8)
    let failed = output.split(separator: "\n").filter { $0.hasSuffix("[FAIL]") }.compactMap {
        $0.split(separator: " ").dropFirst().first.map(String.init)
    }
    #expect(Set(failed) == Set(refused), "memccapable output:\n\(output)")
    #expect(output.contains("[pass]"))
    if refused.isEmpty {
        #expect(output.contains("All tests passed"), "memccapable output:\n\(output)")
        #expect(run.status == 0)
    }
}

/// A running `settee-router` process, killed when dropped.
final class RouterProcess {
    let port: Int
    let logURL: URL
    private let child: ChildProcess
    var process: Process { child.process }

    /// `cluster`: the router's `--cluster` (default: the node's admin URL).
    init(server: ServerProcess, cluster: String? = nil, extraArguments: [String] = []) throws {
        port = try freePort()
        logURL = TestOutput.directory.appendingPathComponent("router-\(port).log")
        let arguments =
            [
                "--listen", "127.0.0.1:\(port)", "--cluster", cluster ?? "http://127.0.0.1:\(server.adminPort)",
                "--bucket", "demo",
                "-u", server.user, "-p", server.password, "--threads", "1",
            ] + extraArguments
        child = try ChildProcess(builtBinary("settee-router"), arguments, output: .log(logURL))
        try child.waitUntilListening([port], timeout: 30)
    }
}

/// `settee-router` in front of one real node, driven by raw binary frames and by memcaslap.
@Suite(.serialized, .onTestThreads) struct RouterProcessTests {
    /// Proves the router's protocol contract with one pipelined write: keyed commands are routed whatever
    /// vBucket the client sends (all sent as vb 0 here); responses come back in request order with the
    /// client's opaques; SETQ successes and GETQ misses produce no response; GETKQ hits carry the key;
    /// mutation extras are stripped for a client that did not negotiate MutationSeqno; NOOP, VERSION and
    /// STAT are answered locally; a wrong SASL password is refused and the right one accepted.
    @Test func pipelinedBinaryWithQuietOps() throws {
        let server = try ServerProcess.started(name: "router-pipe")
        defer { server.stopAndRemove() }
        try server.initialize(authType: "sasl")
        let router = try RouterProcess(server: server)
        let c = try TestKVClient(port: router.port)

        var out = ByteBuffer()
        let extras = TestKVClient.setExtras(flags: 7, expiry: 0)
        for i in 0..<50 {
            out.writeRequest(
                opcode: .setq, vbucket: 0, opaque: UInt32(100 + i), extras: extras, key: Array("rk\(i)".utf8),
                value: Array("v\(i)".utf8))
        }
        out.writeRequest(opcode: .getq, vbucket: 0, opaque: 200, key: Array("rk3".utf8))
        out.writeRequest(opcode: .getq, vbucket: 0, opaque: 201, key: Array("missing".utf8))
        out.writeRequest(opcode: .getkq, vbucket: 0, opaque: 202, key: Array("rk4".utf8))
        out.writeRequest(opcode: .set, vbucket: 0, opaque: 203, extras: extras, key: Array("rkx".utf8), value: [1])
        out.writeRequest(opcode: .addq, vbucket: 0, opaque: 204, extras: extras, key: Array("rk6".utf8), value: [1])
        out.writeRequest(opcode: .get, vbucket: 0, opaque: 205, key: Array("missing".utf8))
        out.writeRequest(opcode: .noop, opaque: 206)
        try c.send(out)

        let hit = try c.receive()
        #expect(hit.opaque == 200 && hit.opcode == .getq && hit.status == .success)
        #expect(hit.valueBytes == Array("v3".utf8) && hit.flags == 7)
        let khit = try c.receive()
        #expect(khit.opaque == 202 && khit.opcode == .getkq && String(buffer: khit.key) == "rk4")
        let set = try c.receive()
        #expect(set.opaque == 203 && set.status == .success && set.extras.readableBytes == 0 && set.cas != 0)
        let addExists = try c.receive()
        #expect(addExists.opaque == 204 && addExists.status == .keyExists)
        let miss = try c.receive()
        #expect(miss.opaque == 205 && miss.status == .keyNotFound)
        let noop = try c.receive()
        #expect(noop.opaque == 206 && noop.opcode == .noop)

        // Every SETQ landed on the node, in its right vBucket.
        let direct = try TestKVClient(port: server.kvPort)
        try direct.hello([.json])
        #expect(try direct.authenticate(user: server.user, password: server.password) == .success)
        #expect(try direct.request(.selectBucket, key: "demo").status == .success)
        let allThere = try (0..<50).allSatisfy {
            try direct.request(.get, key: "rk\($0)").valueBytes == Array("v\($0)".utf8)
        }
        #expect(allThere)

        #expect(String(buffer: try c.request(.version).value).hasPrefix("settee-router"))
        #expect(try c.authenticate(user: server.user, password: "nope") == .authError)
        #expect(try c.authenticate(user: server.user, password: server.password) == .success)
        let stats = try c.stats()
        #expect(Int(stats["cmd_forwarded"] ?? "") ?? 0 >= 56)
        #expect(stats["router_bucket"] == "demo")
    }

    /// Proves a vBucket-unaware memcached client sees a memcached: `memccapable -b` passes through the router,
    /// FLUSH included (it runs the bucket's cluster-wide doFlush; it used to answer NOT_SUPPORTED) and DELETE
    /// answering CAS 0 to a client that did not say HELLO (it used to pass the node's tombstone CAS on).
    @Test func memccapableThroughRouter() throws {
        let server = try ServerProcess.started(name: "router-memccapable")
        defer { server.stopAndRemove() }
        try server.initialize()
        let router = try RouterProcess(server: server)
        try expectMemccapablePasses(port: router.port, report: "memccapable-router.txt")
    }

    /// Proves a vBucket-unaware load generator works through the router: memcaslap (binary protocol,
    /// 90/10 get/set) for 4 seconds reports operations, no errors and no get misses; the router counts no
    /// failed forwards.
    @Test func memcaslapThroughRouter() throws {
        let server = try ServerProcess.started(name: "router-memcaslap")
        defer { server.stopAndRemove() }
        try server.initialize(authType: "sasl")
        let router = try RouterProcess(server: server)
        let logURL = TestOutput.directory.appendingPathComponent("memcaslap-router-\(router.port).log")
        let run = try ChildProcess.run(
            "/usr/bin/memcaslap",
            ["-s", "127.0.0.1:\(router.port)", "-B", "-T", "1", "-c", "8", "-t", "4s", "-X", "256"],
            output: .log(logURL))
        let output = run.output
        #expect(run.status == 0, "memcaslap failed: \(output.suffix(2000))")
        // "Run time: 4.0s Ops: 123456 TPS: 30864 Net_rate: ..."
        let runLine = output.split(separator: "\n").first { $0.hasPrefix("Run time") } ?? ""
        let fields = runLine.split(separator: " ")
        let ops = fields.firstIndex(of: "Ops:").flatMap { Int(fields[$0 + 1]) } ?? 0
        #expect(ops > 1000, "memcaslap output: \(output.suffix(2000))")
        let failures = output.split(separator: "\n").filter {
            $0.lowercased().contains("error") || $0.lowercased().contains("fail")
        }
        #expect(failures.isEmpty, "memcaslap reported: \(failures)")
        // Every key memcaslap reads it wrote first, so a miss would mean a mis-routed or lost write.
        let missLine = output.split(separator: "\n").first { $0.hasPrefix("get_misses:") } ?? ""
        #expect(missLine == "get_misses: 0", "\(output.suffix(1000))")
        // The router counted no failed forwards.
        let c = try TestKVClient(port: router.port)
        let errors = try c.stats()["router_errors"] ?? "?"
        #expect(errors == "0", "router_errors \(errors); memcaslap: \(output.suffix(1000))")
    }
}
