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

@Suite(.serialized) struct AnonymousFlushTests {
    /// Proves a KV connection without credentials cannot FLUSH the open (`authType=none`) bucket it may read
    /// and write (ADR 0015: anonymous callers never get `manage`): EACCESS, and the documents survive; the
    /// admin still flushes. Before, any stranger could empty the bucket with one frame.
    @Test func anonymousConnectionCannotFlush() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let settings = BucketSettings(
            name: bucketName, uuid: String(repeating: "ef", count: 16), ramQuotaMB: 256, replicaNumber: 0,
            flushEnabled: true, authType: .none, numVBuckets: 4)
        let node = try await TestDataNode(name: "n0@127.0.0.1", settings: settings, group: group)
        let anonymous = try TestKVClient(port: node.info.kvPort, timeoutSeconds: 10)
        let extras = [UInt8](repeating: 0, count: 8)
        #expect(
            try anonymous.request(.set, key: "k", value: Array("v".utf8), extras: extras, vbucket: 3).status == .success
        )
        #expect(try anonymous.request(.flush).status == .accessDenied)
        #expect(try anonymous.request(.flushq).status == .accessDenied)
        #expect(try anonymous.request(.get, key: "k", vbucket: 3).status == .success)

        let admin = try TestKVClient(port: node.info.kvPort, timeoutSeconds: 10)
        #expect(try admin.authenticate(user: adminUser, password: adminPassword) == .success)
        #expect(try admin.request(.selectBucket, key: bucketName).status == .success)
        #expect(try admin.request(.flush).status == .success)
        await node.destroy()
        try? await group.shutdownGracefully()
    }
}
