import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import SetteeAuth
import SetteeCore
import SetteeRegistry
import SetteeStorage
import SetteeTestSupport
import Testing

@testable import SetteeAdmin

@Suite struct LoginThrottleAdminTests {
    /// Proves the admin API throttles a user name after `Limits.loginFailuresBeforeThrottle` wrong passwords:
    /// then even the right one gets 429 with Retry-After, without a PBKDF2 run, while another user is
    /// unaffected. Before, every attempt was checked (and a flood of them took the CPU).
    @Test func wrongPasswordsThrottleTheUser() async throws {
        try await withAdmin { client, registry in
            _ = try await call(
                client, .put, "/settings/rbac/users/local/ops", form: "password=ops-pw1&roles=cluster_admin")
            let wrong = RBACAPITests.basic("Administrator", "guess")
            for _ in 0..<Limits.loginFailuresBeforeThrottle {
                #expect(try await call(client, .get, "/pools/default", auth: wrong).status == .unauthorized)
            }
            let right = try await call(client, .get, "/pools/default")
            #expect(right.status == .tooManyRequests)
            #expect(right.headers[.retryAfter] != nil)
            let ops = try await call(client, .get, "/pools/default", auth: RBACAPITests.basic("ops", "ops-pw1"))
            #expect(ops.status == .ok)
            _ = registry
        }
    }

    /// Proves failures in a user's name from another address do not lock that user out of an address that did not
    /// fail (a live server, so the request context carries the peer address): before, six wrong KV logins as
    /// Administrator from anywhere made every admin call answer 429 for a minute, and a name that had never logged in
    /// from 127.0.0.1 stayed throttled there too. `loginFailuresBeforeThrottle` failures as Administrator and as ops
    /// from 192.0.2.1 leave both answered 200 at 127.0.0.1 (ADR 0144: the throttle's key is the pair).
    @Test func failuresFromElsewhereDoNotLockOutTheAdministratorsAddress() async throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try makeRegistry(dir)
        defer { registry.shutdown() }
        let app = AdminServer.makeApplication(registry: registry, host: "127.0.0.1", port: 0, logger: testLogger)
        try await app.test(.live) { client in
            let web = try await call(
                client, .post, "/settings/web", form: "username=Administrator&password=password&port=SAME", auth: nil)
            #expect(web.status == .ok)
            _ = try await call(
                client, .put, "/settings/rbac/users/local/ops", form: "password=ops-pw1&roles=cluster_admin")
            #expect(try await call(client, .get, "/pools/default").status == .ok)
            for _ in 0..<Limits.loginFailuresBeforeThrottle {
                registry.loginGuard.recordFailure(source: "192.0.2.1", user: "Administrator")
                registry.loginGuard.recordFailure(source: "192.0.2.1", user: "ops")
            }
            #expect(try await call(client, .get, "/pools/default").status == .ok)
            let ops = try await call(client, .get, "/pools/default", auth: RBACAPITests.basic("ops", "ops-pw1"))
            #expect(ops.status == .ok)
            #expect(registry.loginGuard.decide(source: "192.0.2.1", user: "ops") != .allow)
        }
    }
}
