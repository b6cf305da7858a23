import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import SetteeClusterMap
import SetteeCore
import SetteeRegistry
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeAdmin

/// The admin port's `/settee/views` relay reads the views service's answer whole before relaying it: at most
/// `ViewsRelay.Bounds.maxReplyBytes` (413 `too_large` past it, as the views port answers a query past its budget),
/// all of it within `Bounds.deadline` (504 past it).
@Suite struct ViewsRelayBoundsTests {
    /// A stand-in for this node's views port: a view query answers what the test scripts.
    final class FakeViewsPort: Sendable {
        enum Script: Sendable {
            /// `{"rows":[]}`.
            case small
            /// `bytes` of one JSON string in 16 KiB writes.
            case large(bytes: Int)
            /// The head, then one space every `everyMs`, for as long as the relay reads.
            case drip(everyMs: Int)
        }
        let script = Mutex(Script.small)
        /// The byte count of every design document PUT body the port received, in order.
        let designBodies = Mutex<[Int]>([])
        private let task = Mutex<Task<Void, any Error>?>(nil)

        /// The port it listens on (127.0.0.1).
        func start() async -> Int {
            let router = Router(context: BasicRequestContext.self)
            router.get("/b/_design/d/_view/v") { _, _ in
                let script = self.script.withLock { $0 }
                return Response(
                    status: .ok, headers: [.contentType: "application/json"],
                    body: ResponseBody { writer in
                        switch script {
                        case .small:
                            try await writer.write(ByteBuffer(string: #"{"rows":[]}"#))
                        case .large(let total):
                            try await writer.write(ByteBuffer(string: "\""))
                            let piece = ByteBuffer(bytes: [UInt8](repeating: 0x61, count: 16 * 1024))
                            var sent = 0
                            while sent < total {
                                try await writer.write(piece)
                                sent += piece.readableBytes
                            }
                            try await writer.write(ByteBuffer(string: "\""))
                        case .drip(let every):
                            while true {
                                try await writer.write(ByteBuffer(string: " "))
                                try await Task.sleep(for: .milliseconds(every))
                            }
                        }
                        try await writer.finish(nil)
                    })
            }
            router.put("/b/_design/d") { request, _ in
                var request = request
                let body = try await request.collectBody(upTo: 16 << 20)
                self.designBodies.withLock { $0.append(body.readableBytes) }
                return Response(
                    status: .created, headers: [.contentType: "application/json"],
                    body: ResponseBody(byteBuffer: ByteBuffer(string: #"{"ok":true,"id":"_design/d"}"#)))
            }
            return await serveOnLoopback(router, in: task)
        }

        func stop() { task.withLock { $0?.cancel() } }
    }

    // Proves the relay answers 413 `too_large` once the views service's answer passes its bound (64 KiB here, an
    // answer of 1 MiB), relays an answer within it, and answers 504 to an answer dripped a byte every 50 ms once its
    // deadline (1 s) passes. Before, it read the answer whole (up to 256 MiB) and relayed it, and a dripped answer
    // held the relay until the guard's 20 s.
    @Test func theRelayBoundsTheViewsServicesAnswer() async throws {
        @Sendable func query(_ client: any TestClientProtocol) async -> (HTTPResponse.Status, String)? {
            await withTaskGroup(of: (HTTPResponse.Status, String)?.self) { group in
                group.addTask {
                    guard
                        let r = try? await client.execute(
                            uri: "/settee/views/b/_design/d/_view/v", method: .get, headers: [:], body: nil)
                    else { return nil }
                    return (r.status, String(buffer: r.body))
                }
                group.addTask {
                    try? await Task.sleep(for: .seconds(20))
                    return nil
                }
                defer { group.cancelAll() }
                return await group.next() ?? nil
            }
        }
        // The size bound, with a deadline a loaded machine cannot reach: only the bytes decide.
        let roomy = ViewsRelay.Bounds(maxReplyBytes: 64 * 1024, deadline: .seconds(60))
        try await withRelay("views-relay", bounds: roomy) { views, client in
            views.script.withLock { $0 = .large(bytes: 1 << 20) }
            let large = await query(client)
            #expect(large?.0 == .contentTooLarge, "\(String(describing: large?.0))")
            #expect(large?.1.contains("\"too_large\"") == true, "\(String(describing: large?.1.prefix(200)))")

            views.script.withLock { $0 = .small }
            let small = await query(client)
            #expect(small?.0 == .ok)
            #expect(small?.1 == #"{"rows":[]}"#)
        }
        // The deadline, with a dripped answer.
        let bounds = ViewsRelay.Bounds(maxReplyBytes: 64 * 1024, deadline: .seconds(1))
        try await withRelay("views-relay-drip", bounds: bounds) { views, client in
            views.script.withLock { $0 = .drip(everyMs: 50) }
            let clock = ContinuousClock()
            let t0 = clock.now
            let dripped = await query(client)
            let took = clock.now - t0
            #expect(dripped?.0 == .gatewayTimeout, "\(String(describing: dripped?.0)) after \(took)")
            #expect(took >= .seconds(1), "answered after \(took)")
        }
    }

    // Proves the relay forwards a caller's body whole or not at all: a design document PUT within the bound (past the
    // old 1 MiB cap, read by the relay then) reaches the views port with all its bytes, and one past the bound is
    // answered 413 `too_large` without reaching the views port. Before, a body past 1 MiB was dropped and the PUT
    // forwarded without it (the views port saw an empty design document; the caller a 201 or the views port's 400).
    @Test func theRelayForwardsTheCallersBodyWholeOrAnswers413() async throws {
        #expect(ViewsRelay.Bounds().maxRequestBytes == Limits.maxViewsRequestBody)
        #expect(Limits.viewsRelayMaxRequestBytes > Limits.maxAdminRequestBody)
        // The old cap was 1 MiB: a bound above it shows the body within it goes whole.
        let bounds = ViewsRelay.Bounds(maxRequestBytes: 2 << 20)
        try await withRelay("views-relay-body", bounds: bounds) { views, client in
            // A design document of `bytes` bytes.
            func design(bytes: Int) -> ByteBuffer {
                let (head, tail) = (#"{"views":{},"x":""#, #""}"#)
                let filler = String(repeating: "a", count: max(0, bytes - head.utf8.count - tail.utf8.count))
                return ByteBuffer(string: head + filler + tail)
            }
            let within = design(bytes: (1 << 20) + (512 << 10))
            let r1 = try await client.execute(
                uri: "/settee/views/b/_design/d", method: .put, headers: [.contentType: "application/json"],
                body: within)
            #expect(r1.status == .created, "\(r1.status) \(String(buffer: r1.body))")
            #expect(views.designBodies.withLock { $0 } == [within.readableBytes])

            let past = design(bytes: (2 << 20) + 1)
            #expect(past.readableBytes == (2 << 20) + 1)
            let r2 = try await client.execute(
                uri: "/settee/views/b/_design/d", method: .put, headers: [.contentType: "application/json"],
                body: past)
            #expect(r2.status == .contentTooLarge, "\(r2.status) \(String(buffer: r2.body))")
            #expect(String(buffer: r2.body).contains(#""error":"too_large""#), "\(String(buffer: r2.body))")
            // Not forwarded at all (before: forwarded without its body).
            #expect(views.designBodies.withLock { $0 } == [within.readableBytes])
        }
    }

    /// Runs `body` with a fake views port and a client of an admin router that serves the relay, with `bounds`,
    /// towards it (a one-node registry in a temporary directory named after `name`).
    private func withRelay(
        _ name: String, bounds: ViewsRelay.Bounds,
        _ body: @escaping @Sendable (FakeViewsPort, any TestClientProtocol) async throws -> Void
    ) async throws {
        let views = FakeViewsPort()
        let port = await views.start()
        defer { views.stop() }
        let dir = TemporaryDirectory(name)
        defer { dir.remove() }
        let node = NodeInfo(
            otpNode: NodeID("n_0@127.0.0.1"), host: "127.0.0.1", adminPort: 9000, kvPort: 12000, viewsPort: port,
            nodeUUID: "")
        let registry = try NodeRegistry(dataDirectory: dir.path, node: node, logger: testLogger)
        defer { _ = registry.shutdown() }
        let cluster = ClusterManager(registry: registry, logger: testLogger)
        let api = AdminAPI(registry: registry, logger: testLogger, started: .now, cluster: cluster)
        let router = Router(context: AdminRequestContext.self)
        ViewsRelay.add(to: router, api: api, bounds: bounds)
        try await Application(router: router).test(.router) { client in try await body(views, client) }
        await cluster.shutdown()
    }
}
