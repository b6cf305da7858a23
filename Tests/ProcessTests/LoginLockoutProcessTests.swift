import Foundation
import NIOCore
import SetteeAuth
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Synchronization
import Testing

/// The login throttle keyed by (user, source) pair (ADR 0144), against real `settee-gateway` and `settee-server`
/// processes, with clients on distinct loopback addresses (Linux routes all of 127/8 to lo).
@Suite(.serialized, .onTestThreads) struct LoginLockoutProcessTests {
    /// The status of one HTTP request sent from `source` (a raw socket bound there, `Connection: close`).
    static func status(
        port: Int, _ method: String, _ path: String, auth: (String, String)?, from source: String
    ) throws -> (status: Int, text: String) {
        let c = try TestKVClient(port: port, timeoutSeconds: 30, source: source)
        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        if let (user, password) = auth {
            head += "Authorization: Basic \(Data("\(user):\(password)".utf8).base64EncodedString())\r\n"
        }
        try c.send(bytes: Array((head + "\r\n").utf8))
        let text = String(decoding: c.readUntilClosed().bytes, as: UTF8.self)
        return (Int(text.dropFirst(9).prefix(3)) ?? 0, text)
    }

    /// The value of the Prometheus counter `name` in `text`.
    static func counter(_ name: String, in text: String) -> Int? {
        text.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap { Int($0.dropFirst(name.count + 1)) }
    }

    /// Regression (issue 72 item 5): eight clients guessing a gateway user's password, each from its own address,
    /// made that user's correct requests answer 429 from every address (20 of 20). Now, after eight clients at
    /// 127.0.0.10-17 each sent `loginFailuresBeforeThrottle + 2` wrong passwords for alice (each throttled there: its
    /// last attempts answer 429), alice's right password from 127.0.0.1, where she never failed, answers 200 on
    /// each of 20 requests; the right password from a guessing address still answers 429, and the gateway's
    /// `/_metrics` counts those refusals in `settee_gateway_login_throttled_total`.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: GatewayProcess.binary)))
    func guessingAUsersPasswordFromManyAddressesLeavesTheUserWorkingElsewhere() throws {
        let gw = try AccessGatewayProcess(
            name: "gw-lockout",
            databases: #"{"db":{"server":"walrus:","users":{"GUEST":{"disabled":true},"#
                + #""alice":{"password":"alice-pw","admin_channels":["*"]}}}}"#)
        try gw.start()
        defer { gw.stop() }
        let port = gw.publicPort
        let n = Limits.loginFailuresBeforeThrottle
        let results = Mutex<[[Int]]>(Array(repeating: [], count: 8))
        DispatchQueue.concurrentPerform(iterations: 8) { client in
            var statuses: [Int] = []
            for i in 0..<(n + 2) {
                let s = try? Self.status(
                    port: port, "GET", "/db/", auth: ("alice", "guess-\(client)-\(i)"), from: "127.0.0.\(10 + client)")
                statuses.append(s?.status ?? 0)
            }
            results.withLock { $0[client] = statuses }
        }
        for statuses in results.withLock({ $0 }) {
            #expect(statuses == Array(repeating: 401, count: n) + [429, 429], "\(statuses)")
        }
        var right: [Int] = []
        for _ in 0..<20 {
            right.append(
                try Self.status(port: port, "GET", "/db/", auth: ("alice", "alice-pw"), from: "127.0.0.1").status)
        }
        #expect(right == Array(repeating: 200, count: 20), "\(right)")
        #expect(
            try Self.status(port: port, "GET", "/db/", auth: ("alice", "alice-pw"), from: "127.0.0.10").status == 429)

        let metrics = try gw.http(admin: true, "GET", "/_metrics")
        #expect(metrics.status == 200)
        let throttled = Self.counter("settee_gateway_login_throttled_total", in: metrics.text)
        #expect(throttled == 8 * 2 + 1, "\(metrics.text.prefix(600))")
    }

    /// Regression (issue 72 item 5): failed SASL logins from a fuzzer on 127.0.0.1 locked the administrator out of
    /// 127.0.0.1. Now 10 connections from 127.0.0.1 pipelining 10 PLAIN logins each in made-up names (100 failures,
    /// each answered AUTH_ERROR), and 10 wrong passwords for the administrator from 127.0.0.3 (the last 5 throttled),
    /// leave the administrator logging in from 127.0.0.1 with PLAIN and SCRAM-SHA512; from 127.0.0.3 the right
    /// password is refused, and `/metrics` counts the refusals in `settee_login_throttled_total`.
    @Test func aSASLFuzzerDoesNotLockTheAdministratorOutOfItsAddress() throws {
        let server = try ServerProcess.started(name: "loginlockout")
        defer { server.stopAndRemove() }
        try server.initialize()
        let fuzzers = try (0..<10).map { _ in try TestKVClient(port: server.kvPort, timeoutSeconds: 30) }
        for (i, fuzzer) in fuzzers.enumerated() {
            var burst = ByteBuffer()
            for j in 0..<10 {
                burst.writeRequest(
                    opcode: .saslAuth, vbucket: 0, opaque: UInt32(i * 10 + j), key: Array("PLAIN".utf8),
                    value: [0] + Array("fuzz-\(i)-\(j)".utf8) + [0] + Array("x\(j)".utf8))
            }
            try fuzzer.send(burst)
        }
        let guesser = try TestKVClient(port: server.kvPort, timeoutSeconds: 30, source: "127.0.0.3")
        var guesses = ByteBuffer()
        for j in 0..<10 {
            guesses.writeRequest(
                opcode: .saslAuth, vbucket: 0, opaque: UInt32(j), key: Array("PLAIN".utf8),
                value: [0] + Array(server.user.utf8) + [0] + Array("wrong-\(j)".utf8))
        }
        try guesser.send(guesses)
        var statuses: [Status: Int] = [:]
        for fuzzer in fuzzers {
            for _ in 0..<10 { statuses[try fuzzer.receive().status, default: 0] += 1 }
        }
        for _ in 0..<10 { statuses[try guesser.receive().status, default: 0] += 1 }
        #expect(statuses == [.authError: 110], "\(statuses)")

        let admin = try TestKVClient(port: server.kvPort, timeoutSeconds: 30)
        #expect(try admin.authenticate(user: server.user, password: server.password) == .success)
        let (scram, verified) = try AuthProcessTests.scram(
            try TestKVClient(port: server.kvPort, timeoutSeconds: 30), .sha512, user: server.user,
            password: server.password)
        #expect(scram == .success && verified)
        let refused = try TestKVClient(port: server.kvPort, timeoutSeconds: 30, source: "127.0.0.3")
        #expect(try refused.authenticate(user: server.user, password: server.password) == .authError)

        let metrics = try Self.status(
            port: server.adminPort, "GET", "/metrics", auth: (server.user, server.password), from: "127.0.0.1")
        #expect(metrics.status == 200)
        let throttled = Self.counter("settee_login_throttled_total", in: metrics.text) ?? 0
        #expect(throttled >= 6, "\(throttled) throttled logins counted")
    }
}
