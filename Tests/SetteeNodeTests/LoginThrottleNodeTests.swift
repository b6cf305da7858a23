import Foundation
import NIOCore
import NIOPosix
import SetteeClusterMap
import SetteeCore
import SetteeProtocol
import SetteeStorage
import SetteeTestSupport
import Testing

@testable import SetteeNode

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
}
