import Foundation
import SetteeTestSupport
import Testing

/// `settee_http_closed_without_response_total{port,reason}` on a real node's `/metrics` (ADR 0053).
@Suite(.onTestThreads) struct UnansweredCloseMetricsProcessTests {
    /// Proves the node counts a connection its admin port closed unanswered: one that sent nothing, closed by the head
    /// deadline (1 s here, from `--http-idle-timeout 1`), shows as `port="admin",reason="head_deadline"` 1, while the
    /// answered requests of the set-up and of the scrape count nothing.
    @Test func aSilentConnectionShowsOnMetrics() async throws {
        let server = try ServerProcess(name: "unanswered-metrics")
        server.extraArguments = ["--http-idle-timeout", "1"]
        try server.start()
        defer { server.stopAndRemove() }
        let web = try server.http(
            "POST", "/settings/web",
            form: [("username", server.user), ("password", server.password), ("port", "SAME")],
            useAuth: false)
        #expect(web.status == 200, "\(web.status) \(web.text)")
        let adminPort = server.adminPort
        let closed = try await offPool { () throws -> Bool in
            let silent = try TestKVClient(port: adminPort, timeoutSeconds: 10)
            return silent.readUntilClosed().closed
        }
        #expect(closed)
        let metrics = try server.http("GET", "/metrics")
        #expect(metrics.status == 200)
        let lines = metrics.text.split(separator: "\n").filter {
            $0.hasPrefix("settee_http_closed_without_response_total{")
        }
        #expect(
            lines.contains {
                $0.contains(#"port="admin""#) && $0.contains(#"reason="head_deadline""#) && $0.hasSuffix(" 1")
            },
            "\(lines)")
        let others = lines.filter { !($0.contains(#"port="admin""#) && $0.contains(#"reason="head_deadline""#)) }
        #expect(others.allSatisfy { $0.hasSuffix(" 0") }, "\(others)")
        #expect(lines.contains { $0.contains(#"port="views""#) }, "every HTTP port is listed")
    }
}
