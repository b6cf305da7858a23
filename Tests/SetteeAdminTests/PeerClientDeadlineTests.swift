import AsyncHTTPClient
import Hummingbird
import NIOCore
import NIOHTTP1
import SetteeCore
import SetteePeerHTTP
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeAdmin

/// Every call to another node's admin API is bounded as a whole, its reply's body included: a call with no deadline
/// of its own gets its head timeout plus `PeerClient.replyBodyTime` (`Limits.peerReplyBodySeconds`).
@Suite struct PeerClientDeadlineTests {
    // Proves a member that answers its head at once and then sends its body a byte every 50 ms fails the call with
    // `PeerDeadlinePassed` once the head timeout (2 s, room for a loaded machine to send the head) plus the body's
    // time (1 s) pass, while a member answering normally is read whole. Before, only the head was bounded, and AsyncHTTPClient's read timeout (30 s between two
    // reads) let the drip hold the call until the guard's 20 s.
    @Test func aMemberDrippingItsReplyFailsTheCallAtItsBound() async throws {
        let task = Mutex<Task<Void, any Error>?>(nil)
        let router = Router(context: BasicRequestContext.self)
        router.get("/whole") { _, _ in "{}" }
        router.get("/drip") { _, _ in
            Response(
                status: .ok,
                body: ResponseBody { writer in
                    while true {
                        try await writer.write(ByteBuffer(string: " "))
                        try await Task.sleep(for: .milliseconds(50))
                    }
                })
        }
        let port = await serveOnLoopback(router, in: task)
        defer { task.withLock { $0?.cancel() } }
        let peers = PeerClient(http: HTTPClient.shared, replyBodyTime: .seconds(1))
        #expect(PeerClient(http: HTTPClient.shared).replyBodyTime == .seconds(Limits.peerReplyBodySeconds))

        let whole = try await peers.call(
            host: "127.0.0.1", port: port, .GET, "/whole", credentials: nil, timeout: .seconds(10))
        #expect(whole.status == 200 && whole.body == Array("{}".utf8))

        let clock = ContinuousClock()
        let t0 = clock.now
        let outcome = await withTaskGroup(of: Result<PeerReply, any Error>?.self) { group in
            group.addTask {
                do {
                    return .success(
                        try await peers.call(
                            host: "127.0.0.1", port: port, .GET, "/drip", credentials: nil, timeout: .seconds(2)))
                } catch { return .failure(error) }
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(20))
                return nil
            }
            defer { group.cancelAll() }
            return await group.next() ?? nil
        }
        let took = clock.now - t0
        guard case .failure(let error)? = outcome else {
            Issue.record("expected PeerDeadlinePassed, got \(String(describing: outcome)) after \(took)")
            return
        }
        #expect(error is PeerDeadlinePassed, "\(error)")
        #expect(took >= .seconds(3), "failed after \(took)")
    }
}
