import Foundation
import NIOCore
import NIOEmbedded
import SetteeAuth
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import Testing

@testable import SetteeNode

/// What STAT and GET_CLUSTER_CONFIG tell a connection that has not authenticated, on the connection handler driven
/// through NIO's testing channel.
@Suite(.serialized) struct NodeInformationAccessTests {
    typealias Fixture = KVHandlerChannelTests.Fixture

    /// Proves a stranger (no login, no open bucket) is refused STAT and GET_CLUSTER_CONFIG with EACCESS, as
    /// kv_engine refuses a connection that has not authenticated (they told anyone the process id, connection and
    /// login counters, and the cluster's nodes), and that the same connection is answered once it logged in.
    @Test func aStrangerIsRefusedStatsAndTheClusterConfig() async throws {
        let f = try await Fixture(open: false, handshakeDeadline: .zero)
        try await f.channel.writeInbound(f.request(.stat))
        try await f.channel.writeInbound(f.request(.stat, key: "vbucket"))
        try await f.channel.writeInbound(f.request(.getClusterConfig))
        let refused = try await f.responses()
        #expect(refused.map(\.status) == [.accessDenied, .accessDenied, .accessDenied])
        #expect(refused.allSatisfy { $0.key.readableBytes == 0 })

        var (client, challenge) = try await ScramExchangeChannelTests.start(f)
        #expect(try await ScramExchangeChannelTests.finish(f, &client, challenge) == .success)
        try await f.channel.writeInbound(f.request(.stat))
        let stats = try await f.responses()
        #expect(stats.count > 1 && stats.allSatisfy { $0.status == .success })
        #expect(stats.contains { String(buffer: $0.key) == "pid" })
        try await f.channel.writeInbound(f.request(.getClusterConfig))
        let config = try #require(try await f.responses().first)
        #expect(config.status == .success && config.value.readableBytes > 0)
        await f.finish()
    }

    /// Proves an anonymous client of an open (`authType=none`) bucket keeps STAT and GET_CLUSTER_CONFIG (the
    /// benchmarks' STAT and an SDK's bootstrap use them without logging in), through the implicit bucket and after
    /// SELECT_BUCKET.
    @Test func anOpenBucketsAnonymousClientKeepsStatsAndTheClusterConfig() async throws {
        let f = try await Fixture(open: true, handshakeDeadline: .zero)
        try await f.channel.writeInbound(f.request(.stat))
        let stats = try await f.responses()
        #expect(stats.count > 1 && stats.allSatisfy { $0.status == .success })
        try await f.channel.writeInbound(f.request(.getClusterConfig))
        let config = try #require(try await f.responses().first)
        #expect(config.status == .success)
        #expect(String(buffer: config.value).contains("\"name\":\"\(bucketName)\""))
        try await f.channel.writeInbound(f.request(.selectBucket, key: bucketName))
        try await f.channel.writeInbound(f.request(.getClusterConfig))
        #expect(try await f.responses().map(\.status) == [.success, .success])

        await f.finish()
    }
}
