import Foundation
import SetteeAuth
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

/// The login throttle keyed by (user, source) pair (ADR 0144), against real `settee-gateway` and `settee-server`
/// processes, with clients on distinct loopback addresses (Linux routes all of 127/8 to lo). Only the issue's two
/// lockouts are checked here, with the fewest password checks that reproduce them (each costs a bcrypt or PBKDF2 run
/// and `Limits.loginFailureDelayMs`); the per-pair rule itself is `LoginThrottleTests`', the ports' use of it
/// `LoginThrottleNodeTests`', `LoginThrottleAdminTests`' and `GatewayLoginTests`'.
@Suite(.serialized, .onTestThreads) struct LoginLockoutProcessTests {
    /// The status of one HTTP request sent from `source` (a raw socket bound there), read from the response's status
    /// line as soon as its head has arrived.
    static func status(port: Int, _ path: String, auth: (String, String), from source: String) throws -> Int {
        let c = try TestKVClient(port: port, timeoutSeconds: 30, source: source)
        let credentials = Data("\(auth.0):\(auth.1)".utf8).base64EncodedString()
        let head =
            "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAuthorization: Basic \(credentials)\r\n\r\n"
        try c.send(bytes: Array(head.utf8))
        let end = Array("\r\n\r\n".utf8)
        let answer = c.read { bytes in bytes.count >= end.count && bytes.suffix(end.count).elementsEqual(end) }.bytes
        return Int(String(decoding: answer, as: UTF8.self).dropFirst(9).prefix(3)) ?? 0
    }

    /// Regression (issue 72 item 5), both lockouts the issue found, each with one guessing source:
    /// - Gateway: guesses at alice's password (eight clients in the issue) made her correct requests answer 429 from
    ///   every address, 20 of 20. Now `loginFailuresBeforeThrottle` wrong passwords from 127.0.0.10 (401 each)
    ///   throttle that pair only (its next attempt, even with the right password, answers 429), and alice's right
    ///   password from 127.0.0.1 answers 200 on each of 20 requests; `/_metrics` counts the one refusal in
    ///   `settee_gateway_login_throttled_total`.
    /// - KV SASL: failed logins in made-up names from a fuzzer on 127.0.0.1 locked the administrator out of
    ///   127.0.0.1. Now one more failure than the allowance there (AUTH_ERROR each) leaves the administrator logging
    ///   in from 127.0.0.1 with PLAIN and SCRAM-SHA512.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: GatewayProcess.binary)))
    func guessesFromOneSourceLockOutNobodyElse() throws {
        let n = Limits.loginFailuresBeforeThrottle
        let gw = try AccessGatewayProcess(
            name: "gw-lockout",
            databases: #"{"db":{"server":"walrus:","users":{"GUEST":{"disabled":true},"#
                + #""alice":{"password":"alice-pw","admin_channels":["*"]}}}}"#)
        try gw.start()
        defer { gw.stop() }
        let port = gw.publicPort
        var guesses: [Int] = []
        for i in 0..<n {
            guesses.append(try Self.status(port: port, "/db/", auth: ("alice", "guess-\(i)"), from: "127.0.0.10"))
        }
        #expect(guesses == Array(repeating: 401, count: n))
        #expect(try Self.status(port: port, "/db/", auth: ("alice", "alice-pw"), from: "127.0.0.10") == 429)
        var right: [Int] = []
        for _ in 0..<20 {
            right.append(try Self.status(port: port, "/db/", auth: ("alice", "alice-pw"), from: "127.0.0.1"))
        }
        #expect(right == Array(repeating: 200, count: 20), "\(right)")
        let metrics = try gw.http(admin: true, "GET", "/_metrics")
        #expect(metrics.status == 200)
        #expect(metrics.text.contains("\nsettee_gateway_login_throttled_total 1\n"), "\(metrics.text.prefix(600))")

        let server = try ServerProcess.started(name: "loginlockout")
        defer { server.stopAndRemove() }
        try server.initialize()
        // One connection per attempt, so no connection outlives the KV handshake deadline on a loaded machine.
        var fuzzed: [Status] = []
        for i in 0...n {
            fuzzed.append(
                try TestKVClient(port: server.kvPort, timeoutSeconds: 30).authenticate(
                    user: "fuzz-\(i)", password: "x\(i)"))
        }
        #expect(fuzzed == Array(repeating: .authError, count: n + 1))
        let admin = try TestKVClient(port: server.kvPort, timeoutSeconds: 30)
        #expect(try admin.authenticate(user: server.user, password: server.password) == .success)
        let (scram, verified) = try AuthProcessTests.scram(
            try TestKVClient(port: server.kvPort, timeoutSeconds: 30), .sha512, user: server.user,
            password: server.password)
        #expect(scram == .success && verified)
    }
}
