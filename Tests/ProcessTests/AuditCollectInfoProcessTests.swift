import Foundation
import SetteeProtocol
import SetteeTestSupport
import Testing

/// A real node's audit log and logs collection (ADR 0148), in one short run.
@Suite(.serialized, .onTestThreads) struct AuditCollectInfoProcessTests {
    /// Proves, against one `settee-server`: KV SASL logins (ok through the CLI's smart client, failed with PLAIN) and REST
    /// logins reach the audit log; `settee collect-info --redact partial` starts `/controller/startLogsCollection`,
    /// follows the `clusterLogsCollection` task of `/pools/default/tasks` to `completed` and downloads a tar.gz
    /// holding the node's `settee.log`, `audit/audit.log`, `stats.json` and `cluster.json`, in which user names are
    /// salted SHA-1 digests inside `<ud>` tags, and neither the known password nor the cluster's secrets appear.
    @Test func auditAndCollectInfo() throws {
        let server = try ServerProcess.started(name: "audit-collect")
        defer { server.stopAndRemove() }
        try server.initialize(authType: "sasl")
        let password = "Pr0c-Kn0wn-Pa55-e2b"
        #expect(try server.http("POST", "/settings/audit", form: [("auditdEnabled", "true")]).status == 200)
        let put = try server.http(
            "PUT", "/settings/rbac/users/local/annie", form: [("password", password), ("roles", "data_writer[demo]")])
        #expect(put.status == 200, "\(put.text)")
        let ok = try runCLI(
            ["kv", "set", "k1", #"{"a":1}"#, "--bucket", "demo"],
            environment: [
                "SETTEE_CLUSTER": "http://127.0.0.1:\(server.adminPort)", "SETTEE_USERNAME": "annie",
                "SETTEE_PASSWORD": password,
            ])
        #expect(ok.status == 0, "\(ok.stderr)")
        // A wrong SASL PLAIN password on the KV port itself.
        let kv = try TestKVClient(port: server.kvPort)
        #expect(try kv.authenticate(user: "annie", password: password + "-wrong") != .success)

        let dir = TemporaryDirectory("collect-info")
        let archive = dir.path + "/info.tar.gz"
        let collect = try runCLI(["collect-info", "--output", archive, "--redact", "partial"], server: server)
        #expect(collect.status == 0, "\(collect.stdout) \(collect.stderr)")
        let tasks = try server.http("GET", "/pools/default/tasks")
        let task = (try tasks.json() as? [[String: Any]])?.first { $0["type"] as? String == "clusterLogsCollection" }
        #expect(task?["status"] as? String == "completed")
        #expect(task?["progress"] as? Int == 100)

        let untar = try ChildProcess.run(
            "/usr/bin/env", ["tar", "-xzf", archive, "-C", dir.path], output: .collectedApart)
        #expect(untar.status == 0, "\(untar.standardError)")
        let nodes = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0 != "info.tar.gz" }
        #expect(nodes.count == 1)
        let node = dir.path + "/" + (nodes.first ?? "")
        func read(_ name: String) -> String { (try? String(contentsOfFile: node + "/" + name, encoding: .utf8)) ?? "" }
        let audit = read("audit/audit.log")
        let kvLogins = audit.split(separator: "\n").filter { $0.contains("\"source\":\"kv-sasl\"") }
        #expect(kvLogins.contains { $0.contains("\"id\":8192") }, "\(audit)")
        #expect(kvLogins.contains { $0.contains("\"id\":8193") }, "\(audit)")
        #expect(!audit.contains("annie"))
        #expect(audit.range(of: #"<ud>[0-9a-f]{40}</ud>"#, options: .regularExpression) != nil)
        #expect(!read("settee.log").isEmpty)
        #expect(read("stats.json").contains("\"demo\""))
        let cluster = read("cluster.json")
        #expect(cluster.contains("\"demo\""))
        #expect(!cluster.contains("internalSecret") && !cluster.contains("storedKey"))
        for name in ["audit/audit.log", "settee.log", "stats.json", "cluster.json"] {
            #expect(!read(name).contains(password), "\(name) holds the password")
        }
    }
}
