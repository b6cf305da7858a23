import Foundation
import Testing

/// Result of one `settee` CLI run.
struct CLIRun {
    var status: Int32
    var stdout: String
    var stderr: String
}

/// Runs the built `settee` CLI with `arguments`, pointing it at `server` through the environment
/// variables the CLI documents.
func runCLI(_ arguments: [String], server: ServerProcess) throws -> CLIRun {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: builtBinary("settee"))
    p.arguments = arguments
    var env = ProcessInfo.processInfo.environment
    env["SETTEE_CLUSTER"] = "http://127.0.0.1:\(server.adminPort)"
    env["SETTEE_USERNAME"] = server.user
    env["SETTEE_PASSWORD"] = server.password
    p.environment = env
    let out = Pipe()
    let err = Pipe()
    p.standardOutput = out
    p.standardError = err
    try p.run()
    let o = out.fileHandleForReading.readDataToEndOfFile()
    let e = err.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return CLIRun(
        status: p.terminationStatus, stdout: String(decoding: o, as: UTF8.self),
        stderr: String(decoding: e, as: UTF8.self))
}

/// The `settee` CLI against one real node.
@Suite(.serialized) struct CLIProcessTests {
    /// Proves `settee kv set/get/rm` round-trip a JSON document through the smart client, that `get` of a
    /// removed key exits non-zero with "key not found", and that `--cluster/-u/-p` flags work as the
    /// environment does (a wrong password fails).
    @Test func kvCommands() throws {
        let server = try ServerProcess.started(name: "cli-kv")
        defer { server.stopAndRemove() }
        try server.initialize(authType: "sasl")
        let set = try runCLI(["kv", "set", "user::1", #"{"name":"jane"}"#], server: server)
        #expect(set.status == 0, "\(set.stderr)")
        #expect(set.stdout.hasPrefix("OK cas="))
        let get = try runCLI(["kv", "get", "user::1", "--bucket", "demo"], server: server)
        #expect(get.status == 0 && get.stdout == "{\"name\":\"jane\"}\n", "\(get.stdout) \(get.stderr)")
        let rm = try runCLI(["kv", "rm", "user::1"], server: server)
        #expect(rm.status == 0 && rm.stdout == "OK\n", "\(rm.stderr)")
        let gone = try runCLI(["kv", "get", "user::1"], server: server)
        #expect(gone.status != 0 && gone.stderr.contains("key not found"), "\(gone.stderr)")
        let badPass = try runCLI(
            ["kv", "get", "x", "--cluster", "http://127.0.0.1:\(server.adminPort)", "-u", server.user, "-p", "bad"],
            server: server)
        #expect(badPass.status != 0 && badPass.stderr.contains("authentication failed"), "\(badPass.stderr)")
    }

    /// Proves `settee bucket create/list/delete`: a created bucket is listed with its quota and replicas
    /// and is usable through `kv`; after delete it is no longer listed; `cluster status` shows the node
    /// healthy and active with all 1024 vBuckets of each bucket active on it.
    @Test func bucketAndClusterStatusCommands() throws {
        let server = try ServerProcess.started(name: "cli-bucket")
        defer { server.stopAndRemove() }
        try server.initialize(authType: "sasl")
        let create = try runCLI(
            ["bucket", "create", "cli1", "--ram-quota", "128", "--replicas", "0", "--flush"], server: server)
        #expect(create.status == 0, "\(create.stdout) \(create.stderr)")
        let list = try runCLI(["bucket", "list"], server: server)
        #expect(list.status == 0, "\(list.stderr)")
        let line = list.stdout.split(separator: "\n").first { $0.hasPrefix("cli1\t") } ?? ""
        #expect(line.contains("ram=128MiB") && line.contains("replicas=0"), "\(list.stdout)")
        #expect(list.stdout.contains("demo\t"))

        // The new bucket serves KV (it may take a moment to be selectable on the node).
        var set = try runCLI(["kv", "set", "k", "v", "--bucket", "cli1"], server: server)
        for _ in 0..<20 where set.status != 0 {
            usleep(250_000)
            set = try runCLI(["kv", "set", "k", "v", "--bucket", "cli1"], server: server)
        }
        #expect(set.status == 0, "\(set.stderr)")
        #expect(try runCLI(["kv", "get", "k", "--bucket", "cli1"], server: server).stdout == "v\n")

        let status = try runCLI(["cluster", "status"], server: server)
        #expect(status.status == 0, "\(status.stderr)")
        #expect(status.stdout.contains("1 node(s), 2 bucket(s)"), "\(status.stdout)")
        let nodeLine =
            status.stdout.split(separator: "\n").first {
                !$0.hasPrefix("cluster ") && $0.contains("127.0.0.1:\(server.adminPort)")
            } ?? ""
        #expect(
            nodeLine.contains("healthy") && nodeLine.contains("active") && nodeLine.contains("kv"), "\(status.stdout)")
        #expect(nodeLine.contains("1024/0"), "\(status.stdout)")
        #expect(nodeLine.contains(String(server.kvPort)), "\(status.stdout)")

        let delete = try runCLI(["bucket", "delete", "cli1"], server: server)
        #expect(delete.status == 0, "\(delete.stderr)")
        let after = try runCLI(["bucket", "list"], server: server)
        #expect(!after.stdout.contains("cli1\t") && after.stdout.contains("demo\t"), "\(after.stdout)")
        let missing = try runCLI(["bucket", "delete", "cli1"], server: server)
        #expect(missing.status != 0 && missing.stderr.contains("404"), "\(missing.stderr)")
    }
}
