import Foundation
import SetteeCore
import SetteeJSON
import SetteeTestSupport
import Testing

@testable import SetteeGateway

/// What reaches the gateway before authentication, and its admin port (which checks no password): an anonymous
/// log-in may make it buffer only a small body, a web page in a browser on the gateway's host cannot reach the admin
/// port, and the admin API's principals obey the sync function's name and list bounds.
@Suite(.serialized) struct AnonymousAndAdminPortTests {
    static let config = """
        {"databases": {"db": {"server": "walrus:",
          "users": {"alice": {"password": "alice-pw", "admin_channels": ["*"]}}}}}
        """

    /// The status of one raw HTTP/1.1 request (the `Host` header is ours to set, which URLSession's is not).
    static func status(
        port: Int, _ method: String, _ path: String, host: String, headers: [String: String] = [:], body: [UInt8] = []
    ) async throws -> Int {
        try await offPool {
            // A raw byte client: the test's KV one writes any bytes and reads until a condition.
            let client = try TestKVClient(port: port)
            var head = "\(method) \(path) HTTP/1.1\r\nHost: \(host)\r\nConnection: close\r\n"
            for (k, v) in headers { head += "\(k): \(v)\r\n" }
            head += "Content-Length: \(body.count)\r\n\r\n"
            try client.send(bytes: Array(head.utf8) + body)
            let (answer, _) = client.read(until: { $0.count >= 12 })
            guard answer.count >= 12 else { return 0 }
            return Int(String(decoding: answer[9..<12], as: UTF8.self)) ?? 0
        }
    }

    /// Proves an anonymous `POST /db/_session` may not make the gateway buffer or inflate more than
    /// `GatewayHTTPLimits.maxAnonymousBody`: a few KiB of gzip inflating to 2 MiB of `[0,0,…]` and a plain body past
    /// the bound are 413, a log-in still works, and an authenticated write may still send a large body. Before, a log-in
    /// was read, inflated and parsed up to 64 MiB (64 KiB of such gzip: over a gigabyte of parsed values).
    @Test func anAnonymousLogInMayNotSendALargeBody() async throws {
        let gw = try await InProcessGateway.start(config: Self.config)
        let host = "127.0.0.1:\(gw.publicPort)"
        var zeros = [UInt8](repeating: UInt8(ascii: "0"), count: 2 * 1024 * 1024)
        for i in stride(from: 1, to: zeros.count, by: 2) { zeros[i] = UInt8(ascii: ",") }
        zeros[0] = UInt8(ascii: "[")
        zeros[zeros.count - 1] = UInt8(ascii: "]")
        let bomb = try #require(GzipCodec.gzip(zeros))
        #expect(bomb.count < GatewayHTTPLimits.maxAnonymousBody)
        let json = ["Content-Type": "application/json"]
        let gzipped = json.merging(["Content-Encoding": "gzip"]) { a, _ in a }
        #expect(
            try await Self.status(port: gw.publicPort, "POST", "/db/_session", host: host, headers: gzipped, body: bomb)
                == 413)
        let big =
            Array(#"{"name":"alice","password":""#.utf8)
            + [UInt8](repeating: UInt8(ascii: "x"), count: GatewayHTTPLimits.maxAnonymousBody) + Array(#""}"#.utf8)
        #expect(
            try await Self.status(port: gw.publicPort, "POST", "/db/_session", host: host, headers: json, body: big)
                == 413)
        let login = Array(#"{"name":"alice","password":"alice-pw"}"#.utf8)
        #expect(
            try await Self.status(port: gw.publicPort, "POST", "/db/_session", host: host, headers: json, body: login)
                == 200)
        let basic = ["Authorization": "Basic " + Data("alice:alice-pw".utf8).base64EncodedString()]
        let doc = Array(#"{"pad":""#.utf8) + [UInt8](repeating: UInt8(ascii: "y"), count: 1 << 20) + Array(#""}"#.utf8)
        #expect(
            try await Self.status(
                port: gw.publicPort, "PUT", "/db/big", host: host, headers: json.merging(basic) { a, _ in a }, body: doc
            )
                == 201)
        await gw.stop()
    }

    /// Proves the admin port (no password, listening on 127.0.0.1) refuses what a web page in a browser on this host
    /// could send it: a cross-site form-like write (`text/plain`, another site's Origin) is 403 and creates no user,
    /// and a request naming another host (a page whose domain was re-pointed at 127.0.0.1) is 403 even for a read.
    /// curl-like requests naming 127.0.0.1 or localhost still work; the same holds for a websocket `_changes` feed.
    /// Before, both reached every admin endpoint, and any page could open the admin port's feed.
    @Test func theAdminPortRefusesForeignPagesAndHosts() async throws {
        let gw = try await InProcessGateway.start(config: Self.config)
        let port = gw.adminPort
        let user = Array(#"{"name":"mallory","password":"pw1pw1","admin_channels":["*"]}"#.utf8)
        let forged = ["Content-Type": "text/plain", "Origin": "http://evil.example"]
        #expect(
            try await Self.status(
                port: port, "POST", "/db/_user/", host: "127.0.0.1:\(port)", headers: forged, body: user) == 403)
        #expect(try await Self.status(port: port, "GET", "/db/_user/mallory", host: "127.0.0.1:\(port)") == 404)
        #expect(try await Self.status(port: port, "GET", "/db/_user/alice", host: "evil.example:\(port)") == 403)
        #expect(try await Self.status(port: port, "GET", "/db/_user/alice", host: "127.0.0.1.evil.example") == 403)
        let json = ["Content-Type": "application/json"]
        #expect(
            try await Self.status(port: port, "POST", "/db/_user/", host: "evil.example", headers: json, body: user)
                == 403)
        #expect(try await Self.status(port: port, "GET", "/db/_user/alice", host: "127.0.0.1:\(port)") == 200)
        #expect(try await Self.status(port: port, "GET", "/db/_user/alice", host: "localhost:\(port)") == 200)
        #expect(
            try await Self.status(port: port, "POST", "/db/_user/", host: "localhost", headers: json, body: user) == 201
        )
        // The websocket feed too (no preflight, so no CORS rule stops a page): another site's page, or a page
        // naming another host, gets no upgrade; a client naming loopback without an Origin does.
        let upgrade = [
            "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Version": "13",
        ]
        let feed = "/db/_changes?feed=websocket"
        #expect(try await Self.status(port: port, "GET", feed, host: "127.0.0.1:\(port)", headers: upgrade) == 101)
        let foreign = upgrade.merging(["Origin": "http://evil.example"]) { a, _ in a }
        #expect(try await Self.status(port: port, "GET", feed, host: "127.0.0.1:\(port)", headers: foreign) != 101)
        let rebound = upgrade.merging(["Origin": "http://evil.example:\(port)"]) { a, _ in a }
        #expect(try await Self.status(port: port, "GET", feed, host: "evil.example:\(port)", headers: rebound) != 101)
        await gw.stop()
    }

    /// Proves the admin API's `PUT /db/_user/` keeps the bounds the sync function's grants keep: a name past
    /// `Limits.maxPrincipalNameLength`, more than `maxChannelsPerGrant` channels, an empty or comma'd channel name,
    /// an invalid role name, a password past `maxPasswordLength` and an over-long email are 400. Before, only the
    /// name's characters were checked.
    @Test func adminPrincipalsAreBounded() async throws {
        let gw = try await InProcessGateway.start(config: Self.config)
        let port = gw.adminPort
        let host = "127.0.0.1:\(port)"
        let json = ["Content-Type": "application/json"]
        func put(_ name: String, _ body: String) async throws -> Int {
            try await Self.status(
                port: port, "PUT", "/db/_user/\(name)", host: host, headers: json, body: Array(body.utf8))
        }
        let long = String(repeating: "n", count: Limits.maxPrincipalNameLength + 1)
        #expect(try await put(long, #"{"password":"pw1pw1"}"#) == 400)
        let many = (0...Limits.maxChannelsPerGrant).map { "\"c\($0)\"" }.joined(separator: ",")
        #expect(try await put("u1", #"{"password":"pw1pw1","admin_channels":[\#(many)]}"#) == 400)
        #expect(try await put("u2", #"{"password":"pw1pw1","admin_channels":[""]}"#) == 400)
        #expect(try await put("u3", #"{"password":"pw1pw1","admin_channels":["a,b"]}"#) == 400)
        #expect(try await put("u4", #"{"password":"pw1pw1","admin_roles":["no such/role"]}"#) == 400)
        let pw = String(repeating: "p", count: Limits.maxPasswordLength + 1)
        #expect(try await put("u5", #"{"password":"\#(pw)"}"#) == 400)
        let email = String(repeating: "e", count: Limits.maxEmailLength) + "@example.com"
        #expect(try await put("u6", #"{"password":"pw1pw1","email":"\#(email)"}"#) == 400)
        #expect(
            try await put(
                "u7",
                #"{"password":"pw1pw1","admin_channels":["a","*"],"admin_roles":["role:r"],"email":"u@example.com"}"#)
                == 201)
        await gw.stop()
    }
}
