import Foundation
import SetteeClient
import SetteeCore
import SetteeJSON
import SetteeTLS
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Certificate reload without a restart on the gateway (`POST /_reload_certificate`, SIGHUP) and on Lite's P2P
/// listener (`settee-lite receive --tls-cert/--tls-key`, SIGHUP): ADR 0040.
@Suite(.serialized, .onTestThreads) struct TLSReloadProcessTests {
    /// A fresh self-signed pair written to `directory`/cert.pem and key.pem.
    @discardableResult
    static func writeIdentity(_ directory: URL, name: String) throws -> SelfSignedIdentity {
        let identity = try SelfSignedIdentity(
            commonName: "\(name) \(UUID().uuidString.prefix(8))", hosts: ["127.0.0.1"], validFor: 3600)
        try identity.certificatePEM.write(
            to: directory.appendingPathComponent("cert.pem"), atomically: true, encoding: .utf8)
        try identity.privateKeyPEM.write(
            to: directory.appendingPathComponent("key.pem"), atomically: true, encoding: .utf8)
        return identity
    }

    /// A key file that does not belong to the certificate in `directory`.
    static func writeStrangerKey(_ directory: URL) throws {
        let stranger = try SelfSignedIdentity(commonName: "stranger")
        try stranger.privateKeyPEM.write(
            to: directory.appendingPathComponent("key.pem"), atomically: true, encoding: .utf8)
    }

    static func tempDirectory(_ name: String) throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "settee-\(name)-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    /// Whether fresh handshakes on `port` see `fingerprint`, within `seconds` (a signal is handled asynchronously).
    static func eventuallyPresents(_ port: Int, _ fingerprint: String, within seconds: Double = 10) async -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if await CertificateReloadProcessTests.presents(port, fingerprint) { return true }
            try? await Task.sleep(for: .milliseconds(100))
        }
        return false
    }

    /// Proves the gateway's `SSLCert`/`SSLKey` reload on both interfaces: `POST /_reload_certificate` on the admin
    /// interface (404 on the public one) answers the new fingerprint and fresh handshakes on both ports see the new
    /// certificate, not the old; a key that does not match is 400 with the reason and the certificate in use stays;
    /// SIGHUP rereads the files too (a third certificate appears on both ports); the database still answers over the
    /// reloaded identity.
    @Test func gatewayReloadsItsCertificateByAdminCallAndSIGHUP() async throws {
        let directory = try Self.tempDirectory("gw-reload")
        defer { try? FileManager.default.removeItem(at: directory) }
        let first = try Self.writeIdentity(directory, name: "gateway first")
        let config = """
            {"SSLCert": "\(directory.appendingPathComponent("cert.pem").path)",
             "SSLKey": "\(directory.appendingPathComponent("key.pem").path)",
             "databases": {"db": {"server": "walrus:", "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]}}}}}
            """
        let gw = try GatewayProcess(name: "tls-reload", config: config)
        try gw.start()
        defer { gw.stop() }
        let ports = [gw.port, gw.adminPort]
        for port in ports { #expect(await CertificateReloadProcessTests.presents(port, first.fingerprint)) }

        let second = try Self.writeIdentity(directory, name: "gateway second")
        let admin = NodeAddress(host: "127.0.0.1", port: gw.adminPort)
        let publicPort = NodeAddress(host: "127.0.0.1", port: gw.port)
        let onPublic = try await AdminHTTP.request(
            .POST, "/_reload_certificate", at: publicPort, username: nil, password: nil,
            tls: try TLSTrust.pinned(fingerprint: first.fingerprint).makeClientContext())
        #expect(onPublic.status == 404)
        #expect(await CertificateReloadProcessTests.presents(gw.port, first.fingerprint))
        let reloaded = try await AdminHTTP.request(
            .POST, "/_reload_certificate", at: admin, username: nil, password: nil,
            tls: try TLSTrust.pinned(fingerprint: first.fingerprint).makeClientContext())
        #expect(reloaded.status == 200, "\(String(decoding: reloaded.body, as: UTF8.self))")
        #expect(try JSON.parse(reloaded.body)["fingerprint"]?.stringValue == second.fingerprint)
        for port in ports {
            #expect(await CertificateReloadProcessTests.presents(port, second.fingerprint), "port \(port)")
            #expect(!(await CertificateReloadProcessTests.presents(port, first.fingerprint)), "port \(port)")
        }
        let secondContext = try TLSTrust.pinned(fingerprint: second.fingerprint).makeClientContext()
        let db = try await AdminHTTP.request(
            .GET, "/db/", at: publicPort, username: nil, password: nil, tls: secondContext)
        #expect(db.status == 200)

        try Self.writeStrangerKey(directory)
        let refused = try await AdminHTTP.request(
            .POST, "/_reload_certificate", at: admin, username: nil, password: nil, tls: secondContext)
        let refusal = String(decoding: refused.body, as: UTF8.self)
        #expect(refused.status == 400 && refusal.contains("does not match"), "\(refusal)")
        for port in ports { #expect(await CertificateReloadProcessTests.presents(port, second.fingerprint)) }

        let third = try Self.writeIdentity(directory, name: "gateway third")
        let pid = try #require(gw.process?.processIdentifier)
        #expect(kill(pid, SIGHUP) == 0)
        for port in ports {
            #expect(await Self.eventuallyPresents(port, third.fingerprint), "SIGHUP did not reload port \(port)")
        }
        #expect(gw.process?.isRunning == true)
    }

    /// Proves Lite's P2P listener serves the application's certificate files (`settee-lite receive --tls-cert
    /// --tls-key`; its sync URL pins them) and rereads them on SIGHUP: the new sync URL pins the new certificate and
    /// fresh handshakes see it, not the old; a key that does not match is refused, the listener says so and keeps
    /// serving the certificate in use.
    @Test func liteListenerReloadsItsCertificateOnSIGHUP() async throws {
        let directory = try Self.tempDirectory("lite-reload")
        defer { try? FileManager.default.removeItem(at: directory) }
        let first = try Self.writeIdentity(directory, name: "lite first")
        let receiver = try LiteProcess([
            "receive", "--db", directory.appendingPathComponent("db").path,
            "--tls-cert", directory.appendingPathComponent("cert.pem").path,
            "--tls-key", directory.appendingPathComponent("key.pem").path,
        ])
        defer { receiver.stop() }
        #expect(await receiver.waitFor(30) { $0.contains("QR code saved as") }, "\(receiver.text)")
        let url = try #require(
            receiver.text.split(separator: "\n").first { $0.hasPrefix("sync URL: ") }.map { String($0.dropFirst(10)) })
        #expect(url.hasPrefix("https://") && url.hasSuffix("?cert=\(first.fingerprint)"), "\(url)")
        let port = try #require(URLComponents(string: url)?.port)
        #expect(await CertificateReloadProcessTests.presents(port, first.fingerprint))

        let second = try Self.writeIdentity(directory, name: "lite second")
        #expect(kill(receiver.pid, SIGHUP) == 0)
        #expect(
            await receiver.waitFor(10) {
                $0.contains("certificate reloaded: \(second.fingerprint)") && $0.contains("?cert=\(second.fingerprint)")
            }, "\(receiver.text)")
        #expect(await CertificateReloadProcessTests.presents(port, second.fingerprint))
        #expect(!(await CertificateReloadProcessTests.presents(port, first.fingerprint)))

        try Self.writeStrangerKey(directory)
        #expect(kill(receiver.pid, SIGHUP) == 0)
        #expect(
            await receiver.waitFor(10) { $0.contains("certificate not reloaded") && $0.contains("does not match") },
            "\(receiver.text)")
        #expect(await CertificateReloadProcessTests.presents(port, second.fingerprint))
        #expect(receiver.isRunning)
    }
}
