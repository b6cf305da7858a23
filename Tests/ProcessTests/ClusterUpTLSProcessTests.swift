import Foundation
import SetteeTestSupport
import Testing

/// `cluster/up` with `SETTEE_TLS` (ADR 0040): `make cluster` can start a TLS cluster.
@Suite(.serialized, .onTestThreads) struct ClusterUpTLSProcessTests {
    /// Proves `SETTEE_TLS=only cluster/up 2` on runtime ports starts two `--tls-only` nodes, joins them over pinned
    /// HTTPS, creates `demo` and a gateway on it over TLS (its own interfaces HTTPS only, with a certificate made for
    /// it, key owner-only): the plain admin, KV and views ports refuse connections;
    /// the printed `settee kv set` form (`--cacert` with the bundle) writes through the smart client over TLS, the
    /// gateway imports the document, `cluster/status` shows both nodes healthy over HTTPS; `cluster/down` stops it.
    @Test func tlsOnlyClusterStartsAndServes() throws {
        let started = Date()
        let data = TestOutput.scratch("cluster-up-tls")
        let plain = try ReadmeExamples.clusterBasePorts(nodes: 2)
        let tls = try ReadmeExamples.clusterBasePorts(nodes: 2)
        let env = [
            "SETTEE_TLS": "only", "SETTEE_BASE_ADMIN_PORT": "\(plain.admin)", "SETTEE_BASE_KV_PORT": "\(plain.kv)",
            "SETTEE_BASE_VIEWS_PORT": "\(plain.views)", "SETTEE_BASE_ADMIN_TLS_PORT": "\(tls.admin)",
            "SETTEE_BASE_KV_TLS_PORT": "\(tls.kv)", "SETTEE_BASE_VIEWS_TLS_PORT": "\(tls.views)",
            "SETTEE_SERVER_BIN": ServerProcess.binary, "SETTEE_CLUSTER_DATA": data.path,
            "SETTEE_GATEWAY_BIN": GatewayProcess.binary, "SETTEE_GATEWAY_PORT": "\(try freePort())",
            "SETTEE_GATEWAY_ADMIN_PORT": "\(try freePort())", "SETTEE_BIN": BuiltExecutable.path("settee"),
        ]
        defer { ReadmeExamplesProcessTests.tearDownCluster(data, env) }
        let up = try ReadmeExamples.shell("cluster/up 2", env, timeout: 240)
        let logs = ["gateway.log", "n0.log", "n1.log"].map { name in
            let text = (try? String(contentsOfFile: data.path + "/" + name, encoding: .utf8)) ?? ""
            return "\(name): \(text.suffix(1500))"
        }
        #expect(up.status == 0, "\(up.output) \(up.standardError) \(logs.joined(separator: "\n"))")
        #expect(up.output.contains("Settee is running (2 node(s))") && up.output.contains("gateway started"))
        #expect(up.output.contains("plain ports closed"), "\(up.output)")
        for port in [plain.admin, plain.kv, plain.views, plain.admin + 10, plain.kv + 10, plain.views + 10] {
            #expect(!Loopback.canConnect(port: port), "plain port \(port) accepts connections")
        }
        let bundle = data.path + "/ca-bundle.pem"
        let set = try ReadmeExamples.shell(
            "settee kv set --cluster https://127.0.0.1:\(tls.admin) --cacert \(bundle) user::1 '{\"name\":\"jane\"}'",
            env)
        #expect(set.status == 0 && set.output.contains("OK cas="), "\(set.output) \(set.standardError)")
        // The gateway serves HTTPS only, with the certificate cluster/up made for it.
        let gatewayPort = env["SETTEE_GATEWAY_PORT"] ?? ""
        let gatewayCert = data.path + "/gateway-tls/cert.pem"
        #expect(up.output.contains("https://127.0.0.1:\(gatewayPort)/demo/"), "\(up.output)")
        #expect(
            ReadmeExamples.eventually(20) {
                try ReadmeExamples.shell(
                    "curl -s --cacert \(gatewayCert) https://127.0.0.1:\(gatewayPort)/demo/user::1", env
                ).output.contains(#""name":"jane""#)
            }, "the gateway did not import the document over TLS, or does not serve HTTPS")
        let plainGateway = try ReadmeExamples.shell(
            "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:\(gatewayPort)/demo/", env)
        #expect(plainGateway.output != "200", "the gateway answered plain HTTP: \(plainGateway.output)")
        let keyMode = try FileManager.default.attributesOfItem(atPath: data.path + "/gateway-tls/key.pem")[
            .posixPermissions]
        #expect((keyMode as? Int).map { $0 & 0o077 } == 0, "the gateway's key is readable by others")
        let status = try ReadmeExamples.shell("cluster/status", env)
        #expect(status.output.components(separatedBy: "healthy").count - 1 == 2, "\(status.output)")
        let down = try ReadmeExamples.shell("cluster/down", env, timeout: 120)
        #expect(down.status == 0 && down.output.contains("stopped n1"), "\(down.output)")
        print("cluster/up TLS process test: \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
    }
}
