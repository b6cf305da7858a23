import Foundation
import Logging
import SetteeCore
import SetteeJSON
import SetteeSync
import SetteeTestSupport
import Testing

@testable import SetteeGateway

#if canImport(Glibc)
    import Glibc
#endif

@Suite(.serialized) struct GatewayLoginTests {
    static let config = """
        {"databases": {"db": {"server": "walrus:",
          "users": {"alice": {"password": "alice-pw", "admin_channels": ["*"]},
                    "bob": {"password": "bob-pw", "admin_channels": ["*"]}}}}}
        """

    /// An in-process gateway with `config` (quiet logger) and its database `db`.
    static func open() async throws -> (GatewayServer, GatewayDatabase) {
        var logger = Logger(label: "settee.gateway.test")
        logger.logLevel = .critical
        let server = try await GatewayServer.open(config: try GatewayConfig.parse(Array(config.utf8)), logger: logger)
        return (server, try #require(server.databases["db"]))
    }

    /// Proves an unknown user name costs a bcrypt run like a known one with a wrong password (so timing does
    /// not tell which users exist; before, unknown names were refused at once), and that a user name with
    /// `Limits.loginFailuresBeforeThrottle` failures gets 429 even with the right password while others log in.
    @Test func unknownUsersCostTheSameAndFailuresThrottle() async throws {
        let (server, db) = try await Self.open()
        func timed(_ user: String) async -> (Bool, Duration) {
            let start = ContinuousClock.now
            let ok = await db.authenticate(name: user, password: "wrong-pw") != nil
            return (ok, ContinuousClock.now - start)
        }
        _ = await timed("warm-up")
        var unknown: [Duration] = []
        var known: [Duration] = []
        for i in 0..<5 {
            let (ok1, d1) = await timed("nobody-\(i)")
            #expect(!ok1)
            unknown.append(d1)
            let (ok2, d2) = await timed("bob")
            #expect(!ok2)
            known.append(d2)
        }
        // The fastest of five each: a loaded run's pauses only lengthen samples, so the minimums compare the work
        // (medians of three once differed 6x in a loaded batch; alone they are within 10%).
        let u = unknown.min() ?? .zero
        let k = known.min() ?? .zero
        #expect(u * 3 >= k, "unknown \(unknown) vs known \(known)")

        for _ in 0..<Limits.loginFailuresBeforeThrottle {
            await #expect(throws: GatewayError.self) {
                _ = try await GatewayResponder.login(
                    name: "bob", password: "guess", source: nil, db: db, guard: server.loginGuard)
            }
        }
        do {
            _ = try await GatewayResponder.login(
                name: "bob", password: "bob-pw", source: nil, db: db, guard: server.loginGuard)
            Issue.record("bob should be throttled")
        } catch let e as GatewayError {
            #expect(e.status == 429)
        }
        let alice = try await GatewayResponder.login(
            name: "alice", password: "alice-pw", source: nil, db: db, guard: server.loginGuard)
        #expect(alice.name == "alice")
        await server.close()
    }

    /// Proves the public port counts failed logins per (user, source) pair (its request context carries the peer
    /// address, as the admin API's does; clients connect from distinct loopback addresses): after alice logged in
    /// from 127.0.0.2, `loginFailuresBeforeThrottle` failures in her name from 127.0.0.3 throttle her there, but
    /// not at 127.0.0.2 nor at 127.0.0.6, where she never logged in (ADR 0144; before, a source she had not used
    /// answered 429); wrong passwords for as many other names from 127.0.0.4 leave bob's right password from there
    /// answered 200 (before, the source was throttled for every name).
    @Test func failedLoginsAreCountedPerUserAndSource() async throws {
        let gw = try await InProcessGateway.start(config: Self.config)
        let port = gw.publicPort
        func status(_ user: String, _ password: String, from source: String) async throws -> Int {
            try await offPool {
                let c = try TestKVClient(port: port, timeoutSeconds: 30, source: source)
                let auth = BasicAuth.header(user: user, password: password)
                let head = "GET /db/ HTTP/1.1\r\nHost: x\r\nAuthorization: \(auth)\r\nConnection: close\r\n\r\n"
                try c.send(bytes: Array(head.utf8))
                let reply = c.readUntilClosed().bytes
                return Int(String(decoding: reply.dropFirst(9).prefix(3), as: UTF8.self)) ?? 0
            }
        }
        let n = Limits.loginFailuresBeforeThrottle
        #expect(try await status("alice", "alice-pw", from: "127.0.0.2") == 200)
        for _ in 0..<n { #expect(try await status("alice", "guess", from: "127.0.0.3") == 401) }
        #expect(try await status("alice", "alice-pw", from: "127.0.0.3") == 429)
        #expect(try await status("alice", "alice-pw", from: "127.0.0.2") == 200)
        #expect(try await status("alice", "alice-pw", from: "127.0.0.6") == 200)

        for i in 0..<n { #expect(try await status("nobody-\(i)", "guess", from: "127.0.0.4") == 401) }
        #expect(try await status("bob", "bob-pw", from: "127.0.0.4") == 200)
        #expect(try await status("bob", "bob-pw", from: "127.0.0.5") == 200)
        await gw.stop()
    }

    /// Proves a `walrus:` database's temporary bucket directory is 0700 under a permissive umask (it holds
    /// documents, password hashes and sessions); before, it followed the umask.
    @Test func temporaryBucketIsOwnerOnly() async throws {
        let old = umask(0o022)
        defer { umask(old) }
        var logger = Logger(label: "settee.gateway.test")
        logger.logLevel = .critical
        let path = NSTemporaryDirectory() + "settee-perm-\(UUID().uuidString)"
        let bucket = try EmbeddedBucket(directory: path, temporary: true, name: "perm", logger: logger)
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        #expect((attributes[.posixPermissions] as? Int ?? -1) & 0o777 == 0o700)
        await bucket.close()
    }

    /// Proves the gateway config's `log_redaction_level` (none/partial/full) is read and an unknown value refused.
    @Test func redactionLevelIsConfigured() throws {
        let full = try GatewayConfig.parse(Array(#"{"log_redaction_level": "full", "databases": {}}"#.utf8))
        #expect(full.logRedactionLevel == .full)
        #expect(try GatewayConfig.parse(Array(#"{"databases": {}}"#.utf8)).logRedactionLevel == .partial)
        #expect(throws: (any Error).self) {
            _ = try GatewayConfig.parse(Array(#"{"log_redaction_level": "some", "databases": {}}"#.utf8))
        }
    }
}
