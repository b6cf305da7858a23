import Foundation
import SetteeCore
import SetteeJSON
import Testing

@testable import SetteeGateway

@Suite struct ConcurrentGatewayLoginTests {
    /// Logs in `count` times at once; the HTTP status of each attempt (200, 401 or 429).
    static func statuses(
        _ count: Int, name: @escaping @Sendable (Int) -> String, password: String, source: String,
        db: GatewayDatabase, server: GatewayServer
    ) async -> [Int] {
        await withTaskGroup(of: Int.self) { group in
            for i in 0..<count {
                group.addTask {
                    do {
                        _ = try await GatewayResponder.login(
                            name: name(i), password: password, source: source, db: db, guard: server.loginGuard)
                        return 200
                    } catch let e as GatewayError {
                        return e.status
                    } catch {
                        return 0
                    }
                }
            }
            var all: [Int] = []
            for await s in group { all.append(s) }
            return all
        }
    }

    /// Proves gateway Basic/session logins count against the throttle as they arrive (issue 16): 20 wrong
    /// passwords for bob sent together from one address run `Limits.loginFailuresBeforeThrottle` bcrypt checks
    /// (`passwordChecks`) and only those are 401, the rest 429 unchecked. With `decide`/`record*` all 20 were
    /// checked. 20 unknown names from another address are 20 (user, source) pairs, each within its allowance (ADR
    /// 0144): all are checked (the decoy bcrypt run) and answered 401, none 429. A burst of 12 right logins from a
    /// third address all succeed.
    @Test func concurrentWrongLoginsRunAtMostTheAllowance() async throws {
        let (server, db) = try await GatewayLoginTests.open()
        let n = Limits.loginFailuresBeforeThrottle

        var before = server.passwordChecks
        let wrong = await Self.statuses(
            20, name: { _ in "bob" }, password: "guess", source: "10.7.0.1", db: db, server: server)
        #expect(server.passwordChecks - before == n)
        #expect(wrong.filter { $0 == 401 }.count == n, "\(wrong)")
        #expect(wrong.filter { $0 == 429 }.count == 20 - n, "\(wrong)")

        before = server.passwordChecks
        let unknown = await Self.statuses(
            20, name: { "nobody-\($0)" }, password: "guess", source: "10.7.0.2", db: db, server: server)
        #expect(server.passwordChecks - before == 20)
        #expect(unknown.allSatisfy { $0 == 401 }, "\(unknown)")

        before = server.passwordChecks
        let right = await Self.statuses(
            12, name: { _ in "alice" }, password: "alice-pw", source: "10.7.0.3", db: db, server: server)
        #expect(right.allSatisfy { $0 == 200 }, "\(right)")
        #expect(server.passwordChecks - before == 12)
        await server.close()
    }
}
