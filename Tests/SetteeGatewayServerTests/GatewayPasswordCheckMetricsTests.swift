import Foundation
import SetteeCore
import SetteeJSON
import Testing

@testable import SetteeGateway

@Suite struct GatewayPasswordCheckMetricsTests {
    /// Proves the gateway exports its password (bcrypt) check count, as the node's `/metrics` does its own: in
    /// `/_expvar` as `syncgateway.global.resource_utilization.password_checks` (the `per_db` stats stay where they
    /// were) and in `/_metrics` as `settee_gateway_password_checks_total`, both admin-port routes only. Two wrong
    /// logins and one right one are 3 checks; five wrong ones from another address five more, and the login refused
    /// by the throttle after them none; that refusal is `settee_gateway_login_throttled_total` 1.
    @Test func expvarAndMetricsCountPasswordChecks() async throws {
        #expect(GatewayRoute.match(method: "GET", path: "/_metrics", admin: true) == .route(GatewayRoute(.metrics)))
        #expect(GatewayRoute.match(method: "GET", path: "/_metrics", admin: false) == .notFound)
        let (server, db) = try await GatewayLoginTests.open()
        func checks() throws -> (expvar: JSON?, metrics: String) {
            let expvar = server.expvar()
            return (
                expvar["syncgateway"]?["global"]?["resource_utilization"]?["password_checks"],
                String(decoding: server.prometheusText(), as: UTF8.self)
            )
        }
        let before = server.passwordChecks
        #expect(try checks().expvar == .integer(Int128(before)))
        #expect(server.expvar()["syncgateway"]?["per_db"]?["db"] != nil)
        for password in ["guess-1", "guess-2", "alice-pw"] {
            _ = try? await GatewayResponder.login(
                name: "alice", password: password, source: "10.8.0.1", db: db, guard: server.loginGuard)
        }
        var now = try checks()
        #expect(now.expvar == .integer(Int128(before + 3)))
        #expect(now.metrics.contains("# TYPE settee_gateway_password_checks_total counter\n"), "\(now.metrics)")
        #expect(now.metrics.contains("settee_gateway_password_checks_total \(before + 3)\n"), "\(now.metrics)")

        let n = Limits.loginFailuresBeforeThrottle
        for i in 0..<n {
            _ = try? await GatewayResponder.login(
                name: "alice", password: "guess-\(i)", source: "10.8.0.2", db: db, guard: server.loginGuard)
        }
        await #expect(throws: GatewayError.self) {
            _ = try await GatewayResponder.login(
                name: "alice", password: "alice-pw", source: "10.8.0.2", db: db, guard: server.loginGuard)
        }
        now = try checks()
        #expect(now.expvar == .integer(Int128(before + 3 + n)))
        #expect(now.metrics.contains("settee_gateway_password_checks_total \(before + 3 + n)\n"), "\(now.metrics)")
        #expect(now.metrics.contains("settee_gateway_login_throttled_total 1\n"), "\(now.metrics)")
        await server.close()
    }
}
