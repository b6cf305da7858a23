import Foundation
import NIOCore
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

/// A login flood against a real `settee-server`, measured by the node's own `/metrics`.
@Suite(.serialized, .onTestThreads) struct LoginFloodMetricsProcessTests {
    /// `settee_password_checks_total` from the node's `/metrics`, read over a connection from `source`.
    static func passwordChecks(_ server: ServerProcess, source: String) throws -> Int {
        let c = try TestKVClient(port: server.adminPort, timeoutSeconds: 20, source: source)
        let auth = Data("\(server.user):\(server.password)".utf8).base64EncodedString()
        try c.send(
            bytes: Array(
                "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Basic \(auth)\r\nConnection: close\r\n\r\n"
                    .utf8))
        let text = String(decoding: c.readUntilClosed().bytes, as: UTF8.self)
        let prefix = "settee_password_checks_total "
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix(prefix) }),
            let n = Int(line.dropFirst(prefix.count))
        else { throw HarnessError("no \(prefix)in /metrics: \(text.prefix(300))") }
        return n
    }

    /// Proves a flood of wrong SASL PLAIN logins costs the node no more password checks than the throttle
    /// allows, as the node itself reports it: 200 wrong logins for Administrator from 20 connections at
    /// 127.0.0.1 (10 pipelined each) are all refused, and `settee_password_checks_total` rises by at most
    /// `Limits.loginFailuresBeforeThrottle` (plus the one check of the `/metrics` read itself); the administrator
    /// still logs in from 127.0.0.2 afterwards (ADR 0144: the throttle counts failures per user and source).
    @Test func wrongPlainLoginFloodCostsAtMostTheAllowance() throws {
        let server = try ServerProcess.started(name: "loginfloodmetrics")
        defer { server.stopAndRemove() }
        try server.initialize()
        let admin = try TestKVClient(port: server.kvPort, timeoutSeconds: 20, source: "127.0.0.2")
        #expect(try admin.authenticate(user: server.user, password: server.password) == .success)
        let before = try Self.passwordChecks(server, source: "127.0.0.2")

        let started = Date()
        let attackers = try (0..<20).map { _ in try TestKVClient(port: server.kvPort, timeoutSeconds: 20) }
        for (i, attacker) in attackers.enumerated() {
            var burst = ByteBuffer()
            for j in 0..<10 {
                burst.writeRequest(
                    opcode: .saslAuth, vbucket: 0, opaque: UInt32(i * 10 + j), key: Array("PLAIN".utf8),
                    value: [0] + Array(server.user.utf8) + [0] + Array("wrong-\(i)-\(j)".utf8))
            }
            try attacker.send(burst)
        }
        var statuses: [Status: Int] = [:]
        for attacker in attackers {
            for _ in 0..<10 { statuses[try attacker.receive().status, default: 0] += 1 }
        }
        let flood = Date().timeIntervalSince(started)
        #expect(statuses == [.authError: 200], "\(statuses)")

        let after = try Self.passwordChecks(server, source: "127.0.0.2")
        let checks = after - before - 1
        #expect(checks >= 1 && checks <= Limits.loginFailuresBeforeThrottle, "\(checks) password checks for 200 logins")
        let again = try TestKVClient(port: server.kvPort, timeoutSeconds: 20, source: "127.0.0.2")
        #expect(try again.authenticate(user: server.user, password: server.password) == .success)
        print("login flood: 200 wrong PLAIN logins in \(flood) s, \(checks) password checks")
    }
}
