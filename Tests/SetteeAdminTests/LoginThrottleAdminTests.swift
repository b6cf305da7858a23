import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import SetteeCore
import SetteeStorage
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
}
