import Foundation
import Logging
import NIOCore
import SetteeGateway
import SetteeJSON
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A `GatewayServer` run in this process on free loopback ports (walrus: databases), spoken to over HTTP.
final class InProcessGateway: Sendable {
    let publicPort: Int
    let adminPort: Int
    let task: Task<Void, any Error>

    private init(publicPort: Int, adminPort: Int, task: Task<Void, any Error>) {
        self.publicPort = publicPort
        self.adminPort = adminPort
        self.task = task
    }

    /// `headDeadline`: the request-head deadline of both ports (nil: `Limits.httpHeadDeadlineSeconds`), with a 30 s
    /// idle timeout then so that the deadline, not the idle timeout, is what closes a slow head.
    static func start(config text: String, headDeadline: TimeAmount? = nil) async throws -> InProcessGateway {
        var logger = Logger(label: "settee.gateway.test")
        logger.logLevel = .critical
        let config = try GatewayConfig.parse(Array(text.utf8))
        let server = try await GatewayServer.open(config: config, logger: logger)
        return await start(server: server, headDeadline: headDeadline)
    }

    /// Serves `server` (already opened, or built in memory) on free loopback ports.
    static func start(server: GatewayServer, headDeadline: TimeAmount? = nil) async -> InProcessGateway {
        let ports = AsyncStream<(Bool, Int)>.makeStream()
        let loopback = ListenAddress(host: "127.0.0.1", port: 0)
        let task = Task {
            let report: @Sendable (Bool, Int) async -> Void = { admin, port in ports.continuation.yield((admin, port)) }
            if let headDeadline {
                try await server.run(
                    interface: loopback, adminInterface: loopback, idleTimeout: .seconds(30),
                    headDeadline: headDeadline, onListening: report)
            } else {
                try await server.run(interface: loopback, adminInterface: loopback, onListening: report)
            }
        }
        var publicPort = 0
        var adminPort = 0
        for await (admin, port) in ports.stream {
            if admin { adminPort = port } else { publicPort = port }
            if publicPort != 0 && adminPort != 0 { break }
        }
        return InProcessGateway(publicPort: publicPort, adminPort: adminPort, task: task)
    }

    func stop() async {
        task.cancel()
        _ = await task.result
    }

    struct Reply {
        var status: Int
        var body: JSON
        /// The body as received (a continuous feed's lines).
        var bytes: [UInt8] = []
        /// The `Content-Length` header (nil for a streamed, chunked answer).
        var contentLength: String? = nil
    }

    /// One request; `admin` picks the admin port; `user` sends Basic credentials (password `pw`).
    /// `contentType`: the body's media type (JSON unless given).
    func request(
        _ method: String, _ path: String, body: String? = nil, admin: Bool = true, user: String? = nil,
        contentType: String = "application/json"
    ) async throws -> Reply {
        var req = URLRequest(url: URL(string: "http://127.0.0.1:\(admin ? adminPort : publicPort)\(path)")!)
        req.httpMethod = method
        if let body {
            req.httpBody = Data(body.utf8)
            req.setValue(contentType, forHTTPHeaderField: "Content-Type")
        }
        if let user {
            req.setValue(
                "Basic " + Data("\(user):alice-pw".utf8).base64EncodedString(), forHTTPHeaderField: "Authorization")
        }
        let (data, response) = try await URLSession.shared.data(for: req)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        return Reply(
            status: status, body: (try? JSON.parse(Array(data))) ?? .null, bytes: Array(data),
            contentLength: (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Content-Length"))
    }
}

@Suite(.serialized) struct ConfigAndResyncTests {
    static let config = """
        {"databases": {"db": {"server": "walrus:", "password": "bucket-secret",
          "users": {"alice": {"password": "alice-pw", "admin_channels": ["red"]}},
          "sync": `function(doc) { channel(doc.channels); }`}}}
        """

    /// Document rows of a `_changes` reply: id -> whether the row is a `removed` one.
    static func ids(_ reply: InProcessGateway.Reply) -> [String: Bool] {
        var out: [String: Bool] = [:]
        for row in reply.body["results"]?.arrayValue ?? [] {
            guard let id = row["id"]?.stringValue, !id.hasPrefix("_user/") else { continue }
            out[id] = row["removed"] != nil
        }
        return out
    }

    @Test func configGetPutAndResync() async throws {
        // Proves `GET /db/_config` shows the entry (sync included, passwords redacted), `PUT /db/_config`
        // replaces the sync function (later writes only) and refuses a server change with 400, `_resync` is
        // 503 while online and, offline, reruns the new function over every document (`{"changes": N}`),
        // after which alice sees the document newly in her channel and a `removed` row for the one that left.
        let gw = try await InProcessGateway.start(config: Self.config)
        let put1 = try await gw.request("PUT", "/db/d1", body: #"{"channels":["red"],"color":"blue"}"#)
        let put2 = try await gw.request("PUT", "/db/d2", body: #"{"channels":["green"],"color":"red"}"#)
        #expect(put1.status == 201 && put2.status == 201)
        let before = Self.ids(try await gw.request("GET", "/db/_changes?since=0", admin: false, user: "alice"))
        #expect(before == ["d1": false], "\(before)")

        let shown = try await gw.request("GET", "/db/_config")
        #expect(shown.status == 200)
        #expect(shown.body["sync"]?.stringValue?.contains("channel(doc.channels)") == true)
        #expect(shown.body["password"]?.stringValue == "xxxxx")
        #expect(shown.body["users"]?["alice"]?["password"]?.stringValue == "xxxxx")

        var entry = shown.body
        entry.set("sync", .string("function(doc) { channel(doc.color); }"))
        let bad = try await gw.request("PUT", "/db/_config", body: #"{"server": "walrus:/tmp/elsewhere"}"#)
        #expect(bad.status == 400 && bad.body["reason"]?.stringValue?.contains("server") == true, "\(bad.body)")
        let badSync = try await gw.request("PUT", "/db/_config", body: #"{"sync": "function(doc) {"}"#)
        #expect(badSync.status == 400, "\(badSync.body)")
        let replaced = try await gw.request(
            "PUT", "/db/_config", body: String(decoding: entry.serialized(), as: UTF8.self))
        #expect(replaced.status == 201, "\(replaced.body)")
        let now = try await gw.request("GET", "/db/_config")
        #expect(now.body["sync"]?.stringValue == "function(doc) { channel(doc.color); }")
        // alice's password survived the redacted round trip.
        #expect(try await gw.request("GET", "/db/", admin: false, user: "alice").status == 200)

        // The new function applies to later writes only.
        let put3 = try await gw.request("PUT", "/db/d3", body: #"{"channels":["green"],"color":"red"}"#)
        #expect(put3.status == 201)
        let middle = Self.ids(try await gw.request("GET", "/db/_changes?since=0", admin: false, user: "alice"))
        #expect(middle == ["d1": false, "d3": false], "\(middle)")

        let online = try await gw.request("POST", "/db/_resync")
        #expect(online.status == 503, "\(online.body)")
        #expect(online.body["reason"]?.stringValue?.contains("_offline") == true)
        #expect(try await gw.request("POST", "/db/_offline").status == 200)
        let resync = try await gw.request("POST", "/db/_resync")
        #expect(resync.status == 200, "\(resync.body)")
        #expect(resync.body["changes"]?.intValue == 2, "\(resync.body)")
        #expect(try await gw.request("POST", "/db/_online").status == 200)

        let after = Self.ids(try await gw.request("GET", "/db/_changes?since=0", admin: false, user: "alice"))
        #expect(after == ["d1": true, "d2": false, "d3": false], "\(after)")
        #expect(try await gw.request("GET", "/db/d2", admin: false, user: "alice").status == 200)
        #expect(try await gw.request("GET", "/db/d1", admin: false, user: "alice").status == 403)
        await gw.stop()
    }
}
