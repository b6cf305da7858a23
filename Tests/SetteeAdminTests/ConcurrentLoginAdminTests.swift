import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import SetteeAuth
import SetteeCore
import SetteeRegistry
import Testing

@testable import SetteeAdmin

@Suite struct ConcurrentLoginAdminTests {
    /// Proves admin Basic logins count against the throttle as they arrive (issue 16): 20 wrong logins as
    /// Administrator sent together run `Limits.loginFailuresBeforeThrottle` password checks (the guard's
    /// `passwordChecks`, one per `endCheck`) and only those are answered 401; the rest waited while the checks ran
    /// and were then refused with 429 unchecked. With `decide`/`record*` every one was decided before the first
    /// failure was recorded, so all 20 ran PBKDF2 and were answered 401.
    @Test func concurrentWrongLoginsRunAtMostTheAllowance() async throws {
        try await withAdmin { client, registry in
            let n = Limits.loginFailuresBeforeThrottle
            let before = registry.loginGuard.passwordChecks
            let wrong = RBACAPITests.basic("Administrator", "guess")
            let statuses = try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                for _ in 0..<20 {
                    group.addTask { try await call(client, .get, "/pools/default", auth: wrong).status }
                }
                var all: [HTTPResponse.Status] = []
                for try await s in group { all.append(s) }
                return all
            }
            #expect(registry.loginGuard.passwordChecks - before == n)
            #expect(statuses.filter { $0 == .unauthorized }.count == n, "\(statuses)")
            #expect(statuses.filter { $0 == .tooManyRequests }.count == 20 - n, "\(statuses)")
        }
    }

    /// Proves a burst of correct admin logins is only delayed, never refused: 12 sent together (more than the
    /// allowance of running checks) all answer 200, each after one password check.
    @Test func concurrentRightLoginsAllSucceed() async throws {
        try await withAdmin { client, registry in
            let before = registry.loginGuard.passwordChecks
            let statuses = try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                for _ in 0..<12 { group.addTask { try await call(client, .get, "/pools/default").status } }
                var all: [HTTPResponse.Status] = []
                for try await s in group { all.append(s) }
                return all
            }
            #expect(statuses.allSatisfy { $0 == .ok }, "\(statuses)")
            #expect(registry.loginGuard.passwordChecks - before == 12)
        }
    }

    /// Proves `/metrics` shows the password checks the node ran (`settee_password_checks_total`), so a process
    /// test or an operator can see a login flood cost no more than the allowance: two wrong Basic logins and one
    /// right one are 3 checks; a throttled login adds none, and is counted in `settee_login_throttled_total`
    /// (issue 72 item 5, ADR 0144).
    @Test func metricsCountPasswordChecks() async throws {
        try await withAdmin { client, registry in
            let metrics = NodeMetrics(registry: registry) { .init(connections: 0, gets: 0, sets: 0) }
            let before = registry.loginGuard.passwordChecks
            let throttledBefore = registry.loginGuard.throttledLogins
            let wrong = RBACAPITests.basic("Administrator", "guess")
            var statuses: [HTTPResponse.Status] = []
            for _ in 0..<2 { statuses.append(try await call(client, .get, "/pools/default", auth: wrong).status) }
            statuses.append(try await call(client, .get, "/pools/default").status)
            #expect(statuses == [.unauthorized, .unauthorized, .ok])
            let text = String(decoding: metrics.render(), as: UTF8.self)
            #expect(text.contains("settee_password_checks_total \(before + 3)\n"), "\(text)")
            registry.loginGuard.reset()
            for _ in 0..<Limits.loginFailuresBeforeThrottle {
                registry.loginGuard.recordFailure(source: nil, user: "Administrator")
            }
            let throttled = try await call(client, .get, "/pools/default").status
            #expect(throttled == .tooManyRequests)
            let after = String(decoding: metrics.render(), as: UTF8.self)
            #expect(after.contains("settee_password_checks_total \(before + 3)\n"), "\(after)")
            #expect(after.contains("settee_login_throttled_total \(throttledBefore + 1)\n"), "\(after)")
        }
    }
}
