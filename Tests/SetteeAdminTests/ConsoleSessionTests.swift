import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import SetteeCore
import SetteeRegistry
import SetteeStorage
import SetteeTestSupport
import Testing

@testable import SetteeAdmin

/// The console's session cookie over the real router (in-process): log-in, what the cookie unlocks, expiry,
/// log-out.
@Suite struct ConsoleSessionTests {
    static func withConsole(
        idle: Duration = .seconds(60), _ body: @Sendable (any TestClientProtocol, ConsoleSessions) async throws -> Void
    ) async throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try makeRegistry(dir)
        defer { registry.shutdown() }
        try registry.initialize(username: "Administrator", password: "password")
        let sessions = ConsoleSessions(adminPort: 9000, idleTimeout: idle)
        let app = Application(
            router: AdminServer.makeRouter(
                registry: registry, logger: testLogger, console: ConsoleOptions(sessions: sessions)))
        try await app.test(.router) { client in try await body(client, sessions) }
    }

    static func login(_ client: some TestClientProtocol, password: String) async throws -> (
        HTTPResponse.Status, String?
    ) {
        let r = try await client.execute(
            uri: "/uilogin", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"],
            body: ByteBuffer(string: "user=Administrator&password=\(password)"))
        return (r.status, r.headers[.setCookie])
    }

    static func get(_ client: some TestClientProtocol, _ uri: String, cookie: String?, console: Bool = true)
        async throws -> HTTPResponse.Status
    {
        var headers: HTTPFields = [:]
        if let cookie { headers[.cookie] = cookie }
        if console { headers[HTTPField.Name("ns-server-ui")!] = "yes" }
        return try await client.execute(uri: uri, method: .get, headers: headers).status
    }

    /// Proves a right password sets an HttpOnly SameSite=Strict `ui-auth-PORT` cookie that then authorises API
    /// calls made with the console header (and not without it); a wrong password gets 400 and no cookie;
    /// a forged cookie gets 401 without a Basic challenge; log-out ends the session.
    @Test func loginCookieLogout() async throws {
        try await Self.withConsole { client, sessions in
            let (badStatus, badCookie) = try await Self.login(client, password: "wrong")
            #expect(badStatus == .badRequest && badCookie == nil)

            let (status, setCookie) = try await Self.login(client, password: "password")
            #expect(status == .ok)
            let header = try #require(setCookie)
            #expect(
                header.hasPrefix("ui-auth-9000=") && header.contains("HttpOnly") && header.contains("SameSite=Strict"))
            let cookie = String(header.split(separator: ";")[0])
            #expect(cookie.count == "ui-auth-9000=".count + 64)

            #expect(try await Self.get(client, "/pools/default/buckets", cookie: cookie) == .ok)
            #expect(
                try await Self.get(client, "/settings/rbac/users", cookie: cookie, console: false) == .unauthorized)
            let forged = try await client.execute(
                uri: "/pools/default/buckets", method: .get,
                headers: [
                    .cookie: "ui-auth-9000=\(String(repeating: "0", count: 64))",
                    HTTPField.Name("ns-server-ui")!: "yes",
                ])
            #expect(forged.status == .unauthorized && forged.headers[.wwwAuthenticate] == nil)

            let out = try await client.execute(uri: "/uilogout", method: .post, headers: [.cookie: cookie])
            #expect(out.status == .ok && out.headers[.setCookie]?.contains("Max-Age=0") == true)
            #expect(try await Self.get(client, "/pools/default/buckets", cookie: cookie) == .unauthorized)
            #expect(sessions.cookieName == "ui-auth-9000")
        }
    }

    /// Proves the console's log-in goes through the login guard as Basic credentials do: after
    /// `Limits.loginFailuresBeforeThrottle` wrong passwords even the right one answers 429 with Retry-After and no
    /// cookie, and the failures count against the same user for the Basic API too. Before, `/uilogin` checked every
    /// guess (a PBKDF2 run each, unthrottled, without credentials).
    @Test func wrongConsolePasswordsAreThrottled() async throws {
        try await Self.withConsole { client, _ in
            for _ in 0..<Limits.loginFailuresBeforeThrottle {
                #expect(try await Self.login(client, password: "guess").0 == .badRequest)
            }
            let r = try await client.execute(
                uri: "/uilogin", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"],
                body: ByteBuffer(string: "user=Administrator&password=password"))
            #expect(r.status == .tooManyRequests && r.headers[.retryAfter] != nil && r.headers[.setCookie] == nil)
            let basic = try await client.execute(
                uri: "/pools/default", method: .get,
                headers: [.authorization: "Basic " + Data("Administrator:password".utf8).base64EncodedString()])
            #expect(basic.status == .tooManyRequests)
        }
    }

    /// Proves the idle rule on the store with explicit instants: use within the timeout keeps a session alive (each
    /// use restarts the clock), a gap of the timeout kills it for good, and unknown tokens never validate.
    @Test func idleRule() {
        let sessions = ConsoleSessions(adminPort: 1, idleTimeout: .seconds(10))
        let t0 = ContinuousClock.now
        let token = sessions.create(now: t0)
        #expect(sessions.validate(token, now: t0 + .seconds(9)))
        #expect(sessions.validate(token, now: t0 + .seconds(18)))
        #expect(!sessions.validate(token, now: t0 + .seconds(28)))
        #expect(!sessions.validate(token, now: t0 + .seconds(19)))
        #expect(!sessions.validate(String(repeating: "0", count: 64), now: t0))
    }

    /// Proves an expired session gets 401 through the router.
    @Test func expiredSessionRefused() async throws {
        try await Self.withConsole(idle: .seconds(1)) { client, _ in
            let (_, setCookie) = try await Self.login(client, password: "password")
            let cookie = String(try #require(setCookie).split(separator: ";")[0])
            try await Task.sleep(for: .milliseconds(1500))
            #expect(try await Self.get(client, "/pools/default/buckets", cookie: cookie) == .unauthorized)
        }
    }

    /// Proves `/` redirects to `/ui/`, and the console's pages are served without credentials from the resources.
    @Test func pagesAndRedirect() async throws {
        try await Self.withConsole { client, _ in
            let root = try await client.execute(uri: "/", method: .get)
            #expect(root.status == .found && root.headers[.location] == "/ui/")
            let index = try await client.execute(uri: "/ui/", method: .get)
            #expect(index.status == .ok && String(buffer: index.body).contains("id=\"login-form\""))
            let js = try await client.execute(uri: "/ui/app.js", method: .get)
            #expect(js.status == .ok && js.headers[.contentType]?.hasPrefix("text/javascript") == true)
            #expect(try await client.execute(uri: "/ui/nope.js", method: .get).status == .notFound)
        }
    }
}
