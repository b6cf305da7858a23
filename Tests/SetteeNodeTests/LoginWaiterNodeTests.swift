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

@Suite(.serialized) struct LoginWaiterNodeTests {
    /// Proves a KV PLAIN login past the allowance of running checks waits in the throttle's line without holding
    /// the event loop, and is admitted by the check that ends: with five checks of the administrator at 127.0.0.1
    /// running (the throttle counts per user and source, ADR 0144; begun on the
    /// node's guard), a right login waits (one waiter, and another connection's request is served meanwhile);
    /// ending one check admits it, answered well before the 5 s deadline. A waiting connection that closes leaves
    /// the line at once.
    @Test func aWaitingPlainLoginIsAdmittedWhenACheckEndsAndWithdrawnOnClose() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let settings = BucketSettings(
            name: bucketName, uuid: String(repeating: "cd", count: 16), ramQuotaMB: 256, replicaNumber: 0,
            flushEnabled: false, authType: .sasl, numVBuckets: 4)
        let node = try await TestDataNode(name: "n0@127.0.0.1", settings: settings, group: group)
        let loginGuard = node.registry.loginGuard
        let n = Limits.loginFailuresBeforeThrottle
        for _ in 0..<n { #expect(loginGuard.beginCheck(source: "127.0.0.1", user: adminUser) == .allow) }

        func plain(_ c: TestKVClient, _ user: String, _ password: String) throws {
            var b = ByteBuffer()
            b.writeRequest(
                opcode: .saslAuth, vbucket: 0, opaque: 9, key: Array("PLAIN".utf8),
                value: [0] + Array(user.utf8) + [0] + Array(password.utf8))
            try c.send(b)
        }
        func waitForWaiters(_ count: Int) async throws {
            let deadline = ContinuousClock.now + .seconds(3)
            while loginGuard.waiterCount != count && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(2))
            }
            #expect(loginGuard.waiterCount == count)
        }

        // Close while waiting: the waiter is withdrawn, not left until its deadline.
        do {
            let leaving = try TestKVClient(port: node.info.kvPort, timeoutSeconds: 10)
            try plain(leaving, adminUser, "x")
            try await waitForWaiters(1)
            withExtendedLifetime(leaving) {}
        }
        try await waitForWaiters(0)

        let waiting = try TestKVClient(port: node.info.kvPort, timeoutSeconds: 10)
        try plain(waiting, adminUser, adminPassword)
        try await waitForWaiters(1)
        let other = try TestKVClient(port: node.info.kvPort, timeoutSeconds: 10, source: "127.0.0.2")
        #expect(try other.request(.noop, key: "").status == .success)
        loginGuard.endCheck(source: "127.0.0.1", user: adminUser, succeeded: true)
        #expect(loginGuard.waiterCount == 0)
        // Success, not the auth error a waiter gets at its deadline: the ended check admitted it.
        let answer = try waiting.receive()
        #expect(answer.status == .success)
        #expect(loginGuard.waiterCount == 0)
        for _ in 1..<n { loginGuard.endCheck(source: "127.0.0.1", user: adminUser, succeeded: true) }
        await node.destroy()
        try? await group.shutdownGracefully()
    }
}
