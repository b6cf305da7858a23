import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import SetteeRegistry
import SetteeStorage
import SetteeTestSupport
import Testing

@testable import SetteeAdmin

/// The console's session cookie is `Secure` when the admin API is served over HTTPS, and only then.
@Suite struct SecureCookiesTests {
    /// Proves the pure rule: `; Secure` is appended once, whatever the case of an existing `Secure` attribute,
    /// and a cookie value or attribute that merely contains the word is still marked.
    @Test func marksEachSetCookieOnce() {
        #expect(SecureCookie.marked("a=1; Path=/; HttpOnly") == "a=1; Path=/; HttpOnly; Secure")
        #expect(SecureCookie.marked("a=1; Path=/; secure") == "a=1; Path=/; secure")
        #expect(SecureCookie.marked("secure=1; Path=/insecure") == "secure=1; Path=/insecure; Secure")
        var headers: HTTPFields = [.contentType: "text/plain"]
        headers.append(HTTPField(name: .setCookie, value: "a=1"))
        headers.append(HTTPField(name: .setCookie, value: "b=2; Secure"))
        let marked = SecureCookie.marked(headers)
        #expect(marked[values: .setCookie] == ["a=1; Secure", "b=2; Secure"])
        #expect(marked[.contentType] == "text/plain")
    }

    /// Proves log-in and log-out through the router the HTTPS port serves (`SecureCookies` around the shared
    /// router) set `HttpOnly; SameSite=Strict; Secure`, while the plain port's router leaves `Secure` off (a
    /// browser would drop a Secure cookie set over plain HTTP). Before, the HTTPS port's cookie had no `Secure`,
    /// so a browser would also send the session token to the plain port in clear.
    @Test func httpsConsoleCookieIsSecure() async throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try makeRegistry(dir)
        defer { registry.shutdown() }
        try registry.initialize(username: "Administrator", password: "password")
        let router = AdminServer.makeRouter(
            registry: registry, logger: testLogger,
            console: ConsoleOptions(sessions: ConsoleSessions(adminPort: 9000, idleTimeout: .seconds(60))))

        func cookies(_ app: some ApplicationProtocol) async throws -> (login: String?, logout: String?) {
            try await app.test(.router) { client in
                let login = try await client.execute(
                    uri: "/uilogin", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"],
                    body: ByteBuffer(string: "user=Administrator&password=password"))
                #expect(login.status == .ok)
                let logout = try await client.execute(uri: "/uilogout", method: .post)
                return (login.headers[.setCookie], logout.headers[.setCookie])
            }
        }
        let https = try await cookies(Application(router: SecureCookies(router)))
        for header in [https.login, https.logout] {
            let value = try #require(header)
            #expect(
                value.contains("HttpOnly") && value.contains("SameSite=Strict") && value.hasSuffix("; Secure"),
                "\(value)")
        }
        let plain = try await cookies(Application(router: router))
        let plainLogin = try #require(plain.login)
        #expect(plainLogin.contains("HttpOnly") && !plainLogin.contains("Secure"), "\(plainLogin)")
    }
}
