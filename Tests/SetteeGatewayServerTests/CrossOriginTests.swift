import Foundation
import SetteeCore
import SetteeGateway
import SetteeJSON
import SetteeTestSupport
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#endif

/// Cross-origin rules of the public port: CORS never hands credentials to an origin it does not name, a page
/// of another site cannot make a browser change data with the user's credentials, the session cookie is
/// SameSite=Lax, and the websocket feed checks Origin.
@Suite(.serialized) struct CrossOriginTests {
    static let config = """
        {"CORS": {"Origin": ["http://app.example"], "LoginOrigin": ["http://app.example"], "Headers": ["X-Extra"]},
         "databases": {"db": {"server": "walrus:",
          "users": {"alice": {"password": "alice-pw", "admin_channels": ["*"]}}}}}
        """

    /// Proves `"*"` answers `*` (which browsers never combine with credentials) and a listed origin is echoed.
    /// Before, `"*"` echoed any caller's Origin and the responder added `Allow-Credentials: true`.
    @Test func starIsNotReflected() {
        #expect(CORSConfig.allowedOrigin("http://evil.example", in: ["*"]) == "*")
        #expect(
            CORSConfig.allowedOrigin("http://app.example", in: ["*", "http://app.example"]) == "http://app.example")
        #expect(CORSConfig.allowedOrigin("http://evil.example", in: ["http://app.example"]) == nil)
    }

    /// Proves the forgery rule case by case: only state changes from a foreign, unlisted origin with a content
    /// type a form can send are refused; curl-like requests (no Origin) and same-origin pages pass.
    @Test func crossSiteRule() {
        let cors = CORSConfig(origin: ["http://app.example"])
        func refused(_ method: String, _ origin: String?, _ type: String?, site: String? = nil) -> Bool {
            CORSConfig.refusesCrossSite(
                method: method, origin: origin, host: "gw.example:4984", secFetchSite: site, contentType: type,
                config: cors)
        }
        #expect(refused("POST", "http://evil.example", "text/plain"))
        #expect(refused("PUT", "http://evil.example", nil))
        #expect(refused("DELETE", "null", "application/x-www-form-urlencoded"))
        #expect(refused("POST", nil, "multipart/form-data; boundary=x", site: "cross-site"))
        #expect(!refused("POST", "http://evil.example", "application/json"))
        #expect(!refused("POST", "http://app.example", "text/plain"))
        #expect(!refused("POST", "http://gw.example:4984", "text/plain"))
        #expect(!refused("POST", nil, "text/plain"))
        #expect(!refused("GET", "http://evil.example", nil))
        #expect(!refused("OPTIONS", "http://evil.example", nil))
        #expect(CrossOrigin.isForeign(origin: "http://gw.example", host: "gw.example:80", secFetchSite: nil) == false)
        #expect(CrossOrigin.isForeign(origin: "https://gw.example", host: "gw.example:80", secFetchSite: nil))
        #expect(CrossOrigin.isForeign(origin: nil, host: "gw.example", secFetchSite: "same-origin") == false)
        #expect(CORSConfig.allowsWebSocket(origin: nil, host: "h", config: nil))
        #expect(!CORSConfig.allowsWebSocket(origin: "http://evil.example", host: "h", config: nil))
        #expect(!CORSConfig.allowsWebSocket(origin: "http://evil.example", host: "h", config: cors))
        #expect(CORSConfig.allowsWebSocket(origin: "http://app.example", host: "h", config: cors))
    }

    /// Proves which `Host` values name loopback (the admin port's DNS-rebinding check) and which listeners count as
    /// loopback-only: a rebinding page's own domain, a look-alike (`127.0.0.1.evil.example`) and an address outside
    /// 127/8 do not; an admin port on every interface (`":4985"`) or a routable address is not checked.
    @Test func loopbackHostsAndListeners() throws {
        for host in ["localhost", "localhost:4985", "LOCALHOST.", "127.0.0.1", "127.1.2.3:4985", "[::1]", "[::1]:4985"]
        {
            #expect(CrossOrigin.namesLoopback(host: host), "\(host)")
        }
        for host in [
            "evil.example", "evil.example:4985", "127.0.0.1.evil.example", "128.0.0.1", "127.0.0.256", "127.0.0",
            "127.+1.0.1", "[::2]", "[::1", "", "localhost.evil",
        ] {
            #expect(!CrossOrigin.namesLoopback(host: host), "\(host)")
        }
        for text in ["127.0.0.1:4985", "[::1]:4985", "localhost:4985"] {
            #expect(try ListenAddress.parse(text, path: "adminInterface").isLoopback, "\(text)")
        }
        for text in [":4985", "4985", "0.0.0.0:4985", "10.0.0.5:4985", "[::]:4985"] {
            #expect(try !ListenAddress.parse(text, path: "adminInterface").isLoopback, "\(text)")
        }
    }

    static func request(
        _ gw: InProcessGateway, _ method: String, _ path: String, body: String? = nil, contentType: String? = nil,
        headers: [String: String] = [:]
    ) async throws -> (status: Int, headers: [AnyHashable: Any]) {
        var req = URLRequest(url: URL(string: "http://127.0.0.1:\(gw.publicPort)\(path)")!)
        req.httpMethod = method
        if let body { req.httpBody = Data(body.utf8) }
        if let contentType { req.setValue(contentType, forHTTPHeaderField: "Content-Type") }
        req.setValue("Basic " + Data("alice:alice-pw".utf8).base64EncodedString(), forHTTPHeaderField: "Authorization")
        for (k, v) in headers { req.setValue(v, forHTTPHeaderField: k) }
        let (_, response) = try await URLSession.shared.data(for: req)
        let http = response as? HTTPURLResponse
        return (http?.statusCode ?? 0, http?.allHeaderFields ?? [:])
    }

    static func header(_ headers: [AnyHashable: Any], _ name: String) -> String? {
        headers.first { ($0.key as? String)?.lowercased() == name.lowercased() }?.value as? String
    }

    /// Proves over HTTP: a form-like PUT from another site with alice's Basic credentials is 403 and writes
    /// nothing; the same PUT without Origin (curl, SDKs) or from the listed origin succeeds, the latter with
    /// credentials allowed; the log-in cookie is SameSite=Lax. Before, the forged PUT was stored.
    @Test func forgedWritesAreRefused() async throws {
        let gw = try await InProcessGateway.start(config: Self.config)
        let forged = try await Self.request(
            gw, "PUT", "/db/forged", body: #"{"a":1}"#, contentType: "text/plain",
            headers: ["Origin": "http://evil.example"])
        #expect(forged.status == 403)
        #expect(try await Self.request(gw, "GET", "/db/forged").status == 404)
        let plain = try await Self.request(gw, "PUT", "/db/plain", body: #"{"a":1}"#, contentType: "application/json")
        #expect(plain.status == 201)
        let listed = try await Self.request(
            gw, "PUT", "/db/listed", body: #"{"a":1}"#, contentType: "text/plain",
            headers: ["Origin": "http://app.example"])
        #expect(listed.status == 201)
        #expect(Self.header(listed.headers, "Access-Control-Allow-Origin") == "http://app.example")
        #expect(Self.header(listed.headers, "Access-Control-Allow-Credentials") == "true")
        let read = try await Self.request(gw, "GET", "/db/plain", headers: ["Origin": "http://evil.example"])
        #expect(read.status == 200)
        #expect(Self.header(read.headers, "Access-Control-Allow-Origin") == nil)
        let login = try await Self.request(
            gw, "POST", "/db/_session", body: #"{"name":"alice","password":"alice-pw"}"#,
            contentType: "application/json")
        #expect(login.status == 200)
        #expect(Self.header(login.headers, "Set-Cookie")?.contains("SameSite=Lax") == true)
        let forgedLogin = try await Self.request(
            gw, "POST", "/db/_session", body: #"{"name":"alice","password":"alice-pw"}"#, contentType: "text/plain",
            headers: ["Origin": "http://evil.example"])
        #expect(forgedLogin.status == 403)
        await gw.stop()
    }

    /// The first line of the answer to a websocket upgrade of `_changes` sent with `origin`.
    static func upgradeStatus(port: Int, origin: String?) throws -> String {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let ok = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        try #require(ok == 0)
        var timeout = timeval(tv_sec: 60, tv_usec: 0)  // generous: a loaded run can keep the gateway waiting
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let basic = Data("alice:alice-pw".utf8).base64EncodedString()
        let head =
            "GET /db/_changes?feed=websocket HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nAuthorization: Basic \(basic)\r\n"
            + (origin.map { "Origin: \($0)\r\n" } ?? "")
            + "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            + "Sec-WebSocket-Version: 13\r\n\r\n"
        let bytes = Array(head.utf8)
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var chunk = [UInt8](repeating: 0, count: 4096)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard n > 0 else { return "" }
        let text = String(decoding: chunk[..<n], as: UTF8.self)
        return String(text.split(separator: "\r\n").first ?? "")
    }

    /// Proves the websocket feed upgrades for no Origin and the listed origin, and not for another site's
    /// page (which gets the plain-HTTP answer instead). Before, any Origin was upgraded. A `ws://` origin is
    /// what websocket client libraries send (swift-websocket's client sends `ws://host` without the port); no
    /// browser page has one, so it is upgraded.
    @Test func websocketChecksOrigin() async throws {
        let gw = try await InProcessGateway.start(config: Self.config)
        let port = gw.publicPort
        // Each blocking exchange runs on its own thread: the in-process gateway answers on the cooperative pool,
        // which a blocking read here would starve while other suites run (the test once waited out every read).
        func status(_ origin: String?) async throws -> String {
            try await offPool { try Self.upgradeStatus(port: port, origin: origin) }
        }
        #expect(try await status(nil).hasPrefix("HTTP/1.1 101"))
        #expect(try await status("ws://127.0.0.1").hasPrefix("HTTP/1.1 101"))
        #expect(try await status("http://app.example").hasPrefix("HTTP/1.1 101"))
        let foreign = try await status("http://evil.example")
        #expect(!foreign.hasPrefix("HTTP/1.1 101") && foreign.hasPrefix("HTTP/1.1"))
        await gw.stop()
    }
}
