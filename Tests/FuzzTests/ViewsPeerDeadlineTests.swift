import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import SetteeClusterMap
import SetteeCore
import SetteeJSON
import SetteeRegistry
import SetteeStorage
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
            /// An empty part after this long.
            case answerAfter(Duration)
        }
        let script = Mutex(Script.drip)
        /// When each request for a part arrived.
        let arrivals = Mutex<[ContinuousClock.Instant]>([])
        private let task = Mutex<Task<Void, any Error>?>(nil)

        /// The port it listens on.
        func start() async -> Int {
            let router = Router(context: BasicRequestContext.self)
            router.get("/b/_design/d/_view/v") { _, _ in
                self.arrivals.withLock { $0.append(ContinuousClock.now) }
                switch self.script.withLock({ $0 }) {
                case .silent: try await Task.sleep(for: .seconds(30))
                case .answerAfter(let wait):
                    try await Task.sleep(for: wait)
                    return Response(
                        status: .ok, headers: [.contentType: "application/json"],
                        body: ResponseBody(byteBuffer: ByteBuffer(string: #"{"total_rows":0,"rows":[]}"#)))
                case .drip: break
                }
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

    /// Stores design document `d` (`design`) through the views port, then makes the fake peer on `peer` a second
    /// member holding half the vBuckets: the node coordinates each query and asks the peer for its part.
    static func scatter(
        _ client: some TestClientProtocol, _ registry: NodeRegistry, design: String, peer: Int
    ) async throws {
        let put = try await client.execute(
            uri: "/b/_design/d", method: .put, headers: Self.auth, body: ByteBuffer(string: design))
        #expect(put.status.code == 201)
        let me = registry.node
        let other = NodeInfo(
            otpNode: NodeID("n_1@127.0.0.1"), host: "127.0.0.1", adminPort: 9001, kvPort: 12001, viewsPort: peer,
            nodeUUID: "")
        try registry.updateCluster { members, placements in
            members = [ClusterMember(node: me, membership: .active), ClusterMember(node: other, membership: .active)]
            placements[LoneNode.bucket.name] = .initial(
                numVBuckets: LoneNode.bucket.numVBuckets, numReplicas: 0, nodes: [me.otpNode, other.otpNode])
        }
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
            try await Self.scatter(
                client, registry, design: #"{"views":{"v":{"map":"function(d){ emit(d.n, null); }"}}}"#, peer: port)

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

    // Proves a coordinator asks the peers for their parts while its own part runs: with stale=false and a map
    // function of 100 ms a document, the local part takes seconds to build its index, yet the peer's request arrives
    // in the first half of the query (before, only once the local part had answered), and the query answers
    // the local rows merged with the peer's empty part.
    @Test func thePeersPartsAreAskedForWhileTheLocalPartRuns() async throws {
        let peer = FakePeer()
        peer.script.withLock { $0 = .answerAfter(.milliseconds(200)) }
        let port = await peer.start()
        defer { peer.stop() }
        let node = try LoneNode("views-peer-concurrent")
        defer { node.close() }
        let views = NodeViews(registry: node.registry, logger: node.logger)
        defer { views.shutdown() }
        let registry = node.registry
        let engine = try #require(registry.bucket(named: LoneNode.bucket.name))
        for n in 0..<40 {
            let key = Array("doc\(n)".utf8)
            let vb = VBucketHash.vbucket(forKey: key, count: LoneNode.bucket.numVBuckets)
            _ = try engine.store(
                .set, vb, key, value: Array(#"{"n":\#(n)}"#.utf8), flags: 0, expiry: 0, datatype: .json, cas: .zero)
        }
        let app = Application(router: ViewsServer.makeRouter(views: views, logger: node.logger))
        try await app.test(.router) { client in
            try await Self.scatter(
                client, registry,
                design:
                    #"{"views":{"v":{"map":"function(d){ var t = Date.now(); while (Date.now() - t < 100) {} emit(d.n, null); }"}}}"#,
                peer: port)
            let clock = ContinuousClock()
            let t0 = clock.now
            let r = try await client.execute(
                uri: "/b/_design/d/_view/v?stale=false&connection_timeout=60000", method: .get, headers: Self.auth)
            let took = clock.now - t0
            #expect(r.status.code == 200)
            let body = try JSON.parse(Array(r.body.readableBytesView))
            let rows = body["rows"]?.arrayValue ?? []
            #expect(!rows.isEmpty && body["errors"] == nil, "\(body)")
            let arrived = try #require(peer.arrivals.withLock { $0.first })
            // The check means something only if the local part was slow.
            #expect(took >= .milliseconds(1500), "the local part took \(took)")
            // Asked in order, the peer's request came 200 ms before the answer; asked at once, at the start.
            #expect(arrived - t0 < took / 2, "the peer was asked after \(arrived - t0) of \(took)")
        }
    }
}
