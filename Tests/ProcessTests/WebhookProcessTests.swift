import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1
import SetteeJSON
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// An HTTP endpoint on 127.0.0.1 for webhooks: records every POST (path and body) and answers the status
/// `status(path, attempt)` gives (attempt counts that path's requests from 0). One thread per connection;
/// keep-alive, as AsyncHTTPClient reuses connections.
final class WebhookReceiver: @unchecked Sendable {
    let port: Int
    private let listener: LoopbackListener
    private let status: @Sendable (String, Int) -> Int
    /// (path, body) of every request, in arrival order.
    let received = NIOLockedValueBox<[(path: String, body: [UInt8])]>([])

    init(status: @escaping @Sendable (String, Int) -> Int) throws {
        self.status = status
        listener = try LoopbackListener(name: "webhook receiver")
        port = listener.port
        listener.start { [self] fd in serve(fd) }
    }

    func requests(_ path: String) -> [[UInt8]] {
        received.withLockedValue { $0.filter { $0.path == path }.map(\.body) }
    }

    private func serve(_ fd: Int32) {
        var inbound: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        let separator: [UInt8] = Array("\r\n\r\n".utf8)
        while true {
            // One request: headers, then Content-Length bytes of body.
            var headerEnd: Int?
            while headerEnd == nil {
                if let r = Self.find(separator, in: inbound) {
                    headerEnd = r
                    break
                }
                let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n <= 0 { return }
                inbound += chunk[0..<n]
            }
            guard let end = headerEnd else { return }
            let head = String(decoding: inbound[0..<end], as: UTF8.self)
            let lines = head.split(separator: "\r\n")
            let path = lines.first.map { $0.split(separator: " ") }.flatMap { $0.count > 1 ? String($0[1]) : nil } ?? ""
            let length =
                lines.dropFirst().compactMap { line -> Int? in
                    let parts = line.split(separator: ":", maxSplits: 1)
                    guard parts.count == 2, parts[0].lowercased() == "content-length" else { return nil }
                    return Int(parts[1].trimmingCharacters(in: .whitespaces))
                }.first ?? 0
            while inbound.count < end + 4 + length {
                let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n <= 0 { return }
                inbound += chunk[0..<n]
            }
            let body = Array(inbound[(end + 4)..<(end + 4 + length)])
            inbound.removeFirst(end + 4 + length)
            let attempt = received.withLockedValue { r -> Int in
                let before = r.filter { $0.path == path }.count
                r.append((path, body))
                return before
            }
            let code = status(path, attempt)
            let reply = Array("HTTP/1.1 \(code) X\r\nContent-Length: 0\r\n\r\n".utf8)
            _ = reply.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
    }

    private static func find(_ needle: [UInt8], in hay: [UInt8]) -> Int? {
        guard hay.count >= needle.count else { return nil }
        for i in 0...(hay.count - needle.count) where hay[i] == needle[0] {
            if Array(hay[i..<(i + needle.count)]) == needle { return i }
        }
        return nil
    }

    func stop() { listener.stop() }
}

@Suite("Gateway webhooks (real processes)", .serialized, .onTestThreads)
struct WebhookProcessTests {
    /// Proves Sync Gateway's `event_handlers` on a real gateway, delivering to a local endpoint: every change
    /// (creations, updates, a deletion as `_deleted`) reaches the plain webhook, one document's revisions in the
    /// order they were made; the filtered webhook gets only the documents its JavaScript filter accepts; a
    /// webhook whose endpoint answers 500 is tried exactly `Limits.webhookMaxAttempts` (3) times per event, and
    /// one answering 503 once then 200 is retried and delivered; `/_expvar` counts all of it.
    @Test func documentChangedWebhooks() async throws {
        let receiver = try WebhookReceiver { path, attempt in
            switch path {
            case "/failing": return 500
            case "/flaky": return attempt % 2 == 0 ? 503 : 200
            default: return 200
            }
        }
        defer { receiver.stop() }
        let hook = "http://127.0.0.1:\(receiver.port)"
        let config = """
            {"databases": {"db": {"server": "walrus:",
              "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]}},
              "event_handlers": {"max_processes": 4, "wait_for_process": "100", "document_changed": [
                {"handler": "webhook", "url": "\(hook)/all"},
                {"handler": "webhook", "url": "\(hook)/orders", "filter": `function(doc) { return doc.type == "order"; }`},
                {"handler": "webhook", "url": "\(hook)/failing", "timeout": 2},
                {"handler": "webhook", "url": "\(hook)/flaky"}
              ]}}}}
            """
        let gw = try GatewayProcess(name: "webhooks", config: config)
        try gw.start()
        defer { gw.stop() }
        let db = "http://127.0.0.1:\(gw.adminPort)/db"

        var revs: [String] = []
        var rev: String?
        for n in 1...3 {
            let url = "\(db)/a" + (rev.map { "?rev=\($0)" } ?? "")
            let r = try await GatewayHTTP.request(.PUT, url, body: Array(#"{"type":"note","n":\#(n)}"#.utf8))
            #expect(r.status == 201, "\(r.text)")
            rev = try JSON.parse(r.body)["rev"]?.stringValue
            revs.append(rev ?? "")
        }
        for (id, type) in [("o1", "order"), ("o2", "order"), ("n1", "note")] {
            let r = try await GatewayHTTP.request(.PUT, "\(db)/\(id)", body: Array(#"{"type":"\#(type)"}"#.utf8))
            #expect(r.status == 201, "\(r.text)")
        }
        let del = try await GatewayHTTP.request(.DELETE, "\(db)/a?rev=\(rev ?? "")")
        #expect(del.status == 200, "\(del.text)")
        let events = 7

        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if receiver.requests("/all").count >= events && receiver.requests("/orders").count >= 2
                && receiver.requests("/failing").count >= 3 * events && receiver.requests("/flaky").count >= 2 * events
            {
                break
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        let all = try receiver.requests("/all").map { try JSON.parse($0) }
        #expect(all.count == events)
        let aRevs = all.filter { $0["_id"]?.stringValue == "a" }.compactMap { $0["_rev"]?.stringValue }
        #expect(Array(aRevs.prefix(3)) == revs, "revisions of a out of order: \(aRevs)")
        #expect(all.contains { $0["_id"]?.stringValue == "a" && $0["_deleted"] == .bool(true) })
        let orders = try receiver.requests("/orders").map { try JSON.parse($0)["_id"]?.stringValue ?? "" }
        #expect(orders.sorted() == ["o1", "o2"])
        #expect(receiver.requests("/failing").count == 3 * events)
        #expect(receiver.requests("/flaky").count == 2 * events)

        // The receiver counts a request before it answers, and the gateway counts the answer after reading it: the
        // last attempts' outcomes can reach `/_expvar` a moment after the receiver saw them.
        func readStats() async throws -> (GatewayHTTP.Reply, JSON?) {
            let r = try await GatewayHTTP.request(.GET, "http://127.0.0.1:\(gw.adminPort)/_expvar")
            return (r, try JSON.parse(r.body)["syncgateway"]?["per_db"]?["db"]?["event_handlers"])
        }
        var (expvar, stats) = try await readStats()
        while Date() < deadline.addingTimeInterval(10),
            stats?["webhooks_failed"] != .integer(Int128(events))
                || stats?["webhooks_posted"] != .integer(Int128(events + 2 + events))
                || stats?["webhooks_retried"] != .integer(Int128(2 * events + events))
        {
            try await Task.sleep(for: .milliseconds(100))
            (expvar, stats) = try await readStats()
        }
        #expect(expvar.status == 200)
        #expect(stats?["handlers"] == .integer(4))
        #expect(stats?["webhooks_posted"] == .integer(Int128(events + 2 + events)), "\(expvar.text)")
        #expect(stats?["webhooks_failed"] == .integer(Int128(events)), "\(expvar.text)")
        #expect(stats?["webhooks_retried"] == .integer(Int128(2 * events + events)), "\(expvar.text)")
        #expect(stats?["events_filtered_out"] == .integer(Int128(events - 2)), "\(expvar.text)")
        #expect(stats?["events_dropped"] == .integer(0))
        // The public port does not serve it.
        let publicExpvar = try await GatewayHTTP.request(.GET, "http://127.0.0.1:\(gw.port)/_expvar")
        #expect(publicExpvar.status == 404)
    }

    /// A filter that is not valid JavaScript stops the gateway at start-up with the config path named.
    @Test func invalidFilterIsRefused() throws {
        let config = """
            {"databases": {"db": {"server": "walrus:", "event_handlers": {"document_changed": [
              {"handler": "webhook", "url": "http://127.0.0.1:9/x", "filter": "function(doc) { return ("}]}}}}
            """
        let gw = try GatewayProcess(name: "webhook-bad", config: config)
        let (status, output) = try gw.runToExit()
        #expect(status != 0)
        #expect(output.contains("filter"), "\(output)")
    }
}
