import Foundation
import NIOCore
import NIOPosix
import SetteeAuth
import SetteeClusterMap
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import SetteeStorage
import SetteeTestSupport
import Testing

@testable import SetteeNode

#if canImport(Glibc)
    import Glibc
#endif

@Suite(.serialized) struct LoginThrottleNodeTests {
    /// Proves KV logins are throttled: each failed SASL PLAIN is answered only after
    /// `Limits.loginFailureDelayMs`, and after `Limits.loginFailuresBeforeThrottle` failures from this address
    /// even the right password is refused (no PBKDF2 run) until the window passes. Before, a client could try
    /// passwords as fast as the thread pool hashed them.
    @Test func failedPlainLoginsAreDelayedThenThrottled() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let settings = BucketSettings(
            name: bucketName, uuid: String(repeating: "ab", count: 16), ramQuotaMB: 256, replicaNumber: 0,
            flushEnabled: false, authType: .sasl, numVBuckets: 4)
        let node = try await TestDataNode(name: "n0@127.0.0.1", settings: settings, group: group)
        let c = try TestKVClient(port: node.info.kvPort, timeoutSeconds: 10)
        let started = ContinuousClock.now
        for _ in 0..<Limits.loginFailuresBeforeThrottle {
            #expect(try c.authenticate(user: adminUser, password: "wrong-guess") == .authError)
        }
        let elapsed = ContinuousClock.now - started
        #expect(elapsed >= .milliseconds(Limits.loginFailureDelayMs * Limits.loginFailuresBeforeThrottle))
        #expect(try c.authenticate(user: adminUser, password: adminPassword) == .authError)
        let other = try TestKVClient(port: node.info.kvPort, timeoutSeconds: 10)
        #expect(try other.authenticate(user: adminUser, password: adminPassword) == .authError)
        await node.destroy()
        try? await group.shutdownGracefully()
    }

    /// Proves SCRAM exchanges count against the throttle's allowance from SASL_AUTH on, as PLAIN logins do from
    /// their arrival: 20 connections from 127.0.0.1 each start SCRAM as the administrator before any proof is sent,
    /// and only `Limits.loginFailuresBeforeThrottle` are challenged; the rest wait in the throttle's line. The
    /// challenged ones' wrong proofs fail, and the fifth failure answers every waiter AUTH_ERROR unchallenged: 5
    /// proofs checked, not 20. Before, SASL_AUTH only asked `decide`, which sees no failure until a proof fails, so
    /// all 20 were challenged and 20 passwords tried in a window meant for 5. The administrator still logs in with
    /// SCRAM from 127.0.0.2, where no login failed.
    @Test func scramExchangesStartedTogetherCostAtMostTheAllowance() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let settings = BucketSettings(
            name: bucketName, uuid: String(repeating: "ef", count: 16), ramQuotaMB: 256, replicaNumber: 0,
            flushEnabled: false, authType: .sasl, numVBuckets: 4)
        let node = try await TestDataNode(name: "n0@127.0.0.1", settings: settings, group: group)
        let loginGuard = node.registry.loginGuard
        func scramAuth(_ c: TestKVClient, password: String) throws -> ScramClient {
            let client = ScramClient(hash: .sha512, username: adminUser, password: password, clientNonce: "nonce")
            var b = ByteBuffer()
            b.writeRequest(
                opcode: .saslAuth, vbucket: 0, opaque: 1, key: Array("SCRAM-SHA512".utf8), value: client.clientFirst)
            try c.send(b)
            return client
        }
        func scramStep(_ c: TestKVClient, _ client: inout ScramClient, _ challenge: Frame) throws -> Status {
            guard let proof = client.receiveServerFirst(challenge.valueBytes) else { return .internalError }
            return try c.request(.saslStep, key: "SCRAM-SHA512", value: proof).status
        }
        func answered(_ c: TestKVClient) -> Bool {
            var p = pollfd(fd: c.fd, events: Int16(POLLIN), revents: 0)
            return poll(&p, 1, 0) > 0
        }

        let admin = try TestKVClient(port: node.info.kvPort, timeoutSeconds: 10, source: "127.0.0.2")
        var adminClient = try scramAuth(admin, password: adminPassword)
        #expect(try scramStep(admin, &adminClient, try admin.receive()) == .success)

        let n = 20
        let attackers = try (0..<n).map { _ in try TestKVClient(port: node.info.kvPort, timeoutSeconds: 10) }
        var clients = try attackers.enumerated().map { try scramAuth($1, password: "wrong-\($0)") }
        let deadline = ContinuousClock.now + .seconds(3)
        var ready: [Int] = []
        while ContinuousClock.now < deadline {
            ready = attackers.indices.filter { answered(attackers[$0]) }
            if ready.count + loginGuard.waiterCount == n { break }
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(ready.count == Limits.loginFailuresBeforeThrottle, "\(ready.count) of \(n) exchanges challenged")
        #expect(loginGuard.waiterCount == n - ready.count)
        for i in ready {
            let challenge = try attackers[i].receive()
            #expect(challenge.status == .authContinue)
            #expect(try scramStep(attackers[i], &clients[i], challenge) == .authError)
        }
        for i in attackers.indices where !ready.contains(i) {
            #expect(try attackers[i].receive().status == .authError)
        }
        #expect(loginGuard.waiterCount == 0)

        let again = try TestKVClient(port: node.info.kvPort, timeoutSeconds: 10, source: "127.0.0.2")
        var againClient = try scramAuth(again, password: adminPassword)
        #expect(try scramStep(again, &againClient, try again.receive()) == .success)
        await node.destroy()
        try? await group.shutdownGracefully()
    }
}
