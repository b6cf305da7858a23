import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import SetteeHTTPServer
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The unanswered-close counts of a live `HTTPServerBuilder.settee` server (what the admin and views ports run),
/// with a 3 s head deadline injected.
@Suite struct UnansweredCloseServerTests {
    /// Proves a connection that sends nothing is closed by the head deadline and counted as `head_deadline`, a
    /// garbage request answered 400 is not counted, an answered request followed by the client's close is not
    /// counted, and a client that connects and leaves at once is not counted either. The test client's own kept
    /// connection asks first, so its later silence is the idle timeout's (30 s), not the head deadline's; the
    /// deadline is 3 s so that a client stalled a moment between connect and write on a loaded machine is not
    /// closed (the fresh-clone CI at load 8 counted 2 with a 1 s deadline).
    @Test func countsOnlyTheClosesTheServerMadeUnanswered() async throws {
        let closes = UnansweredCloseCounts()
        let router = Router()
        router.get("/") { _, _ in "ok" }
        let app = Application(
            router: router, server: .settee(idleTimeout: .seconds(30), headDeadline: .seconds(3), closes: closes),
            configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await app.test(.live) { client in
            let port = try #require(client.port)
            #expect(try await client.execute(uri: "/", method: .get).status == .ok)
            let (silentClosed, garbage, answered) = try await offPool {
                () throws -> (Bool, [UInt8], [UInt8]) in
                // Leaves at once: the client's close.
                _ = try TestKVClient(port: port, timeoutSeconds: 5)
                let answered = try TestKVClient(port: port, timeoutSeconds: 5)
                try answered.send(bytes: Array("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8))
                let ok = answered.readUntilClosed().bytes
                let bad = try TestKVClient(port: port, timeoutSeconds: 5)
                try bad.send(bytes: [0x00, 0x01] + Array("garbage\r\n\r\n".utf8))
                let badReply = bad.readUntilClosed().bytes
                let silent = try TestKVClient(port: port, timeoutSeconds: 5)
                return (silent.readUntilClosed().closed, badReply, ok)
            }
            #expect(String(decoding: answered.prefix(12), as: UTF8.self) == "HTTP/1.1 200")
            #expect(String(decoding: garbage.prefix(12), as: UTF8.self) == "HTTP/1.1 400")
            #expect(silentClosed)
            // The close is counted when the server sees it: give its event loop a moment.
            for _ in 0..<50 where closes.count(.headDeadline) == 0 { try await Task.sleep(for: .milliseconds(20)) }
            #expect(closes.count(.headDeadline) == 1)
            let others = UnansweredCloseReason.allCases.filter { $0 != .headDeadline }.map { closes.count($0) }
            #expect(others.allSatisfy { $0 == 0 }, "\(others)")
        }
    }
}
