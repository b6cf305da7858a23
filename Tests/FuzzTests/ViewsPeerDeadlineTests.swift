import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import SetteeClusterMap
import SetteeCore
import SetteeJSON
import SetteeRegistry
import SetteeTestSupport
import SetteeViewsServer
import Synchronization
import Testing

/// A coordinator's call to a peer for its part of a view query is bounded as a whole, head and body, by the query's
/// `connection_timeout`: a peer sending its answer a byte at a time fails its part as a peer that sends nothing does.
@Suite struct ViewsPeerDeadlineTests {
    static let auth: HTTPFields = [.authorization: "Basic QWRtaW5pc3RyYXRvcjpwYXNzd29yZA=="]

    /// A stand-in for a peer's views port on 127.0.0.1: its part of a query is answered as the test scripts.
    final class FakePeer: Sendable {
        enum Script: Sendable {
            /// The head, then one space every 50 ms, for as long as the coordinator reads.
            case drip
            /// Nothing for 30 s.
            case silent
        }
        let script = Mutex(Script.drip)
        private let task = Mutex<Task<Void, any Error>?>(nil)

        /// The port it listens on.
        func start() async -> Int {
            let router = Router(context: BasicRequestContext.self)
            router.get("/b/_design/d/_view/v") { _, _ in
                if case .silent = self.script.withLock({ $0 }) { try await Task.sleep(for: .seconds(30)) }
                return Response(
                    status: .ok, headers: [.contentType: "application/json"],
                    body: ResponseBody { writer in
                        while true {
                            try await writer.write(ByteBuffer(string: " "))
                            try await Task.sleep(for: .milliseconds(50))
                        }
                    })
            }
            return await serveOnLoopback(router, in: task)
        }

        func stop() { task.withLock { $0?.cancel() } }
    }

    // Proves a peer dripping its part of a query (a byte every 50 ms) fails that part at the query's
    // connection_timeout (500 ms here) with the report a peer sending nothing gets: in `errors` with
    // on_error=continue (the default), the query failing with on_error=stop. Before, only the peer's head was bounded
    // and the drip held the query until the guard's 20 s.
    @Test func aPeerDrippingItsPartFailsItAtTheQuerysConnectionTimeout() async throws {
        let peer = FakePeer()
        let port = await peer.start()
        defer { peer.stop() }
        let node = try LoneNode("views-peer-deadline")
        defer { node.close() }
        let views = NodeViews(registry: node.registry, logger: node.logger)
        defer { views.shutdown() }
        let registry = node.registry
        let app = Application(router: ViewsServer.makeRouter(views: views, logger: node.logger))
        try await app.test(.router) { client in
            let design = #"{"views":{"v":{"map":"function(d){ emit(d.n, null); }"}}}"#
            let put = try await client.execute(
                uri: "/b/_design/d", method: .put, headers: Self.auth, body: ByteBuffer(string: design))
            #expect(put.status.code == 201)
            // A second member, the fake peer, holds half the vBuckets: the node coordinates and asks it for its part.
            let me = registry.node
            let other = NodeInfo(
                otpNode: NodeID("n_1@127.0.0.1"), host: "127.0.0.1", adminPort: 9001, kvPort: 12001, viewsPort: port,
                nodeUUID: "")
            try registry.updateCluster { members, placements in
                members = [
                    ClusterMember(node: me, membership: .active), ClusterMember(node: other, membership: .active),
                ]
                placements[LoneNode.bucket.name] = .initial(
                    numVBuckets: LoneNode.bucket.numVBuckets, numReplicas: 0, nodes: [me.otpNode, other.otpNode])
            }

            @Sendable func query(_ parameters: String) async -> (UInt, JSON, Duration)? {
                await withTaskGroup(of: (UInt, JSON, Duration)?.self) { group in
                    group.addTask {
                        let clock = ContinuousClock()
                        let t0 = clock.now
                        guard
                            let r = try? await client.execute(
                                uri: "/b/_design/d/_view/v?" + parameters, method: .get, headers: Self.auth),
                            let body = try? JSON.parse(Array(r.body.readableBytesView))
                        else { return nil }
                        return (UInt(r.status.code), body, clock.now - t0)
                    }
                    group.addTask {
                        try? await Task.sleep(for: .seconds(20))
                        return nil
                    }
                    defer { group.cancelAll() }
                    return await group.next() ?? nil
                }
            }
            func errors(_ body: JSON) -> [(String, String)] {
                (body["errors"]?.arrayValue ?? []).map {
                    ($0["from"]?.stringValue ?? "", $0["reason"]?.stringValue ?? "")
                }
            }

            peer.script.withLock { $0 = .drip }
            let dripped = try #require(await query("connection_timeout=500"), "the drip held the query")
            #expect(dripped.0 == 200)
            #expect(dripped.2 >= .milliseconds(500) && dripped.2 < .seconds(10), "answered after \(dripped.2)")
            let dripErrors = errors(dripped.1)
            #expect(dripErrors.count == 1 && dripErrors.first?.0.contains("127.0.0.1:\(port)") == true, "\(dripped.1)")
            #expect(dripped.1["rows"]?.arrayValue != nil)

            // The same report as a peer that sends nothing at all.
            peer.script.withLock { $0 = .silent }
            let silent = try #require(await query("connection_timeout=500"))
            #expect(silent.0 == 200)
            #expect(errors(silent.1).map(\.1) == dripErrors.map(\.1), "\(silent.1) vs \(dripped.1)")

            // on_error=stop: the query fails (Couchbase's 200 with only the errors, as for a peer that sends nothing).
            peer.script.withLock { $0 = .drip }
            let stopped = try #require(await query("connection_timeout=500&on_error=stop"), "the drip held the query")
            #expect(stopped.0 == 200)
            #expect(errors(stopped.1).count == 1)
            #expect(stopped.1["rows"]?.arrayValue?.isEmpty == true)
            #expect(stopped.2 < .seconds(10), "answered after \(stopped.2)")
        }
    }
}
