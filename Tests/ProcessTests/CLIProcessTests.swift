import Foundation
import SetteeTestSupport
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

#if canImport(Glibc)
    import Glibc
#endif

/// Result of one `settee` CLI run.
struct CLIRun {
    var status: Int32
    var stdout: String
    var stderr: String
}

/// Runs the built `settee` CLI with `arguments`, pointing it at `server` through the environment
/// variables the CLI documents.
func runCLI(_ arguments: [String], server: ServerProcess) throws -> CLIRun {
    try runCLI(
        arguments,
        environment: [
            "SETTEE_CLUSTER": "http://127.0.0.1:\(server.adminPort)", "SETTEE_USERNAME": server.user,
            "SETTEE_PASSWORD": server.password,
        ])
}

/// Runs the built `settee` CLI with `arguments` and `environment` laid over this process's.
func runCLI(_ arguments: [String], environment: [String: String?] = [:]) throws -> CLIRun {
    let run = try ChildProcess.run(
        builtBinary("settee"), arguments, environment: environment, output: .collectedApart)
    return CLIRun(status: run.status, stdout: run.output, stderr: run.standardError)
}

/// The `settee` CLI against one real node.
@Suite(.serialized, .onTestThreads) struct CLIProcessTests {
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
        // Management commands say why too: a wrong password used to print only "HTTP 401".
        let badList = try runCLI(
            ["bucket", "list", "--cluster", "http://127.0.0.1:\(server.adminPort)", "-u", server.user, "-p", "bad"],
            server: server)
        #expect(badList.status != 0, "\(badList.stdout)")
        #expect(
            badList.stderr.contains("authentication failed for user \(server.user)")
                && badList.stderr.contains("--password"), "\(badList.stderr)")
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

/// A fake admin API (Python's http.server) implementing the documented shapes of `addNode`,
/// `rebalance`, `rebalanceProgress` and `failOver`, recording what it was sent. The real endpoints come
/// with the cluster orchestrator; this pins the CLI to the documented contract meanwhile.
final class FakeAdminAPI {
    let port: Int
    /// SIGKILLed when dropped (the test runner's ignored SIGTERM is inherited by the child).
    private let child: ChildProcess

    static let script = #"""
        import json, sys, urllib.parse
        from http.server import BaseHTTPRequestHandler, HTTPServer
        recorded = []
        progress = [0.25, 0.5, 0.75]
        class H(BaseHTTPRequestHandler):
            def log_message(self, *a): pass
            def reply(self, code, obj):
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            def do_GET(self):
                if self.path == "/pools/default":
                    self.reply(200, {"nodes": [
                        {"otpNode": "ns_1@127.0.0.1", "hostname": "127.0.0.1:1", "status": "healthy",
                         "clusterMembership": "active", "services": ["kv"], "ports": {"direct": 2}},
                        {"otpNode": "ns_2@127.0.0.1", "hostname": "127.0.0.1:3", "status": "healthy",
                         "clusterMembership": "active", "services": ["kv"], "ports": {"direct": 4}}]})
                elif self.path == "/pools/default/rebalanceProgress":
                    if progress:
                        p = progress.pop(0)
                        self.reply(200, {"status": "running", "ns_1@127.0.0.1": {"progress": p},
                                         "ns_2@127.0.0.1": {"progress": p}})
                    else:
                        self.reply(200, {"status": "none"})
                elif self.path == "/recorded":
                    self.reply(200, recorded)
                else:
                    self.reply(404, {})
            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                form = dict(urllib.parse.parse_qsl(self.rfile.read(n).decode()))
                recorded.append({"path": self.path, "form": form,
                                 "auth": self.headers.get("Authorization", "")})
                if self.path == "/controller/addNode":
                    self.reply(200, {"otpNode": "ns_3@" + form.get("hostname", "?").split(":")[0]})
                elif self.path in ("/controller/rebalance", "/controller/failOver"):
                    self.reply(200, {})
                else:
                    self.reply(404, {})
        HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
        """#

    init() throws {
        port = try freePort()
        let url = TestOutput.directory.appendingPathComponent("fake-admin-\(port).py")
        try Self.script.write(to: url, atomically: true, encoding: .utf8)
        child = try ChildProcess(
            "/usr/bin/env", ["python3", url.path, String(port)],
            output: .log(TestOutput.directory.appendingPathComponent("fake-admin-\(port).log")))
        try child.waitUntilListening([port], timeout: 30)
    }
}

extension CLIProcessTests {
    /// Proves `node add`, `rebalance --eject` and `failover` send Couchbase's documented forms (with Basic
    /// auth) and that `rebalance` polls rebalanceProgress, drawing the bar to 100% until status `none`.
    /// Against a fake admin API: the real endpoints arrive with the cluster orchestrator.
    @Test func membershipCommandsAgainstDocumentedShapes() throws {
        let fake = try FakeAdminAPI()
        func run(_ args: [String]) throws -> CLIRun {
            try runCLI(args + ["--cluster", "http://127.0.0.1:\(fake.port)", "-u", "Administrator", "-p", "pw"])
        }
        let add = try run(["node", "add", "127.0.0.1:9100"])
        #expect(add.status == 0 && add.stdout.contains("ns_3@127.0.0.1"), "\(add.stdout) \(add.stderr)")
        let rebalance = try run(["rebalance", "--eject", "ns_2@127.0.0.1"])
        #expect(rebalance.status == 0, "\(rebalance.stderr)")
        #expect(rebalance.stdout.contains("50%") && rebalance.stdout.contains("100%"), "\(rebalance.stdout)")
        #expect(rebalance.stdout.contains("rebalance complete"))
        let unknown = try run(["rebalance", "--eject", "ns_9@127.0.0.1"])
        #expect(unknown.status != 0 && unknown.stderr.contains("not a node of this cluster"), "\(unknown.stderr)")
        let failover = try run(["failover", "ns_2@127.0.0.1"])
        #expect(failover.status == 0, "\(failover.stderr)")
        let unsafe = try run(["failover", "ns_2@127.0.0.1", "--allow-unsafe"])
        #expect(unsafe.status == 0, "\(unsafe.stderr)")

        let recorded = try #require(
            try JSONSerialization.jsonObject(with: Data(Array(try fake.get("/recorded").utf8))) as? [[String: Any]])
        let forms = recorded.map { ($0["path"] as? String ?? "", $0["form"] as? [String: String] ?? [:]) }
        #expect(forms.count == 4, "\(recorded)")
        guard forms.count == 4 else { return }
        #expect(forms[0].0 == "/controller/addNode")
        #expect(
            forms[0].1 == ["hostname": "127.0.0.1:9100", "user": "Administrator", "password": "pw", "services": "kv"])
        #expect(forms[1].0 == "/controller/rebalance")
        #expect(forms[1].1 == ["knownNodes": "ns_1@127.0.0.1,ns_2@127.0.0.1", "ejectedNodes": "ns_2@127.0.0.1"])
        #expect(forms[2].0 == "/controller/failOver" && forms[2].1 == ["otpNode": "ns_2@127.0.0.1"])
        // --allow-unsafe passes the server's unsafe-failover override along.
        #expect(
            forms[3].0 == "/controller/failOver" && forms[3].1 == ["otpNode": "ns_2@127.0.0.1", "allowUnsafe": "true"])
        let auth = recorded.compactMap { $0["auth"] as? String }
        #expect(auth.allSatisfy { $0 == "Basic " + Data("Administrator:pw".utf8).base64EncodedString() })
    }
}

extension FakeAdminAPI {
    /// GET `path` (no auth) and return the body.
    func get(_ path: String) throws -> String {
        var req = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        req.httpMethod = "GET"
        return try RawHTTP.send(port: port, request: req).text
    }
}
