import Foundation
import NIOHTTP1
import SetteeClient
import SetteeCore
import SetteeJSON
import SetteeProtocol
import SetteeTLS
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// TLS on a node's KV and admin ports (`settee-server --tls`) and on the gateway (`SSLCert`/`SSLKey`), with
/// the smart client and the admin HTTP client verifying by pin or CA file.
@Suite(.serialized, .onTestThreads) struct TLSProcessTests {
    /// A started node serving TLS with its self-signed certificate on runtime-chosen TLS ports, initialised
    /// with an open bucket `demo`.
    static func tlsNode(name: String, extra: [String] = []) throws -> (ServerProcess, kvTLS: Int, adminTLS: Int) {
        let server = try ServerProcess(name: name)
        let kvTLS = try freePort()
        let adminTLS = try freePort()
        server.extraArguments = ["--tls", "--kv-tls-port", "\(kvTLS)", "--admin-tls-port", "\(adminTLS)"] + extra
        try server.start()
        try waitUntilListening(kvTLS)
        try waitUntilListening(adminTLS)
        try server.initialize()
        return (server, kvTLS, adminTLS)
    }

    static func waitUntilListening(_ port: Int) throws { try Loopback.waitUntilListening([port]) }

    /// What `openssl s_client` negotiates with 127.0.0.1:`port` given `arguments` (`-tls1_2 -cipher …`): the line
    /// naming the protocol and cipher (`New, TLSv1.3, Cipher is …`), or nil when the handshake failed.
    static func negotiated(_ port: Int, _ arguments: [String]) throws -> String? {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        p.arguments = ["s_client", "-connect", "127.0.0.1:\(port)"] + arguments
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        p.standardInput = FileHandle.nullDevice
        try p.run()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        let line = text.split(separator: "\n").first { $0.hasPrefix("New, ") }.map(String.init)
        return line.flatMap { $0.contains("(NONE)") ? nil : $0 }
    }

    /// Proves the node's TLS port offers only forward-secret AEAD suites by default (issue 72 item 5, ADR 0144), as a
    /// stock OpenSSL client sees it: TLS 1.3 and TLS 1.2 ECDHE-ECDSA-AES-GCM are accepted, AES-CBC-SHA1 (the suites
    /// NIOSSL's default offered before) is refused; and `--tls-min-version tlsv1.3` refuses every TLS 1.2 client.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl")))
    func theNodeOffersOnlyECDHEAEADAndTLS13() throws {
        let (server, kvTLS, _) = try Self.tlsNode(name: "tls-policy")
        defer { server.stopAndRemove() }
        let tls13 = try Self.negotiated(kvTLS, ["-tls1_3"])
        #expect(tls13?.contains("TLSv1.3") == true, "\(tls13 ?? "failed")")
        let gcm = try Self.negotiated(kvTLS, ["-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"])
        #expect(gcm?.contains("ECDHE-ECDSA-AES128-GCM-SHA256") == true, "\(gcm ?? "failed")")
        for weak in ["ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA"] {
            let got = try Self.negotiated(kvTLS, ["-tls1_2", "-cipher", weak])
            #expect(got == nil, "\(weak) was accepted: \(got ?? "")")
        }

        let (only13, kv13, _) = try Self.tlsNode(name: "tls-policy13", extra: ["--tls-min-version", "tlsv1.3"])
        defer { only13.stopAndRemove() }
        #expect(try Self.negotiated(kv13, ["-tls1_2"]) == nil)
        #expect(try Self.negotiated(kv13, ["-tls1_3"])?.contains("TLSv1.3") == true)
    }

    static func clientOptions(_ server: ServerProcess, kvTLS: Int, trust: TLSTrust) -> ClientOptions {
        var options = ClientOptions(
            seeds: [.kv(NodeAddress(host: "127.0.0.1", port: kvTLS))], bucket: "demo", username: server.user,
            password: server.password, operationTimeoutMs: 15_000, connectTimeoutMs: 5_000, configPollIntervalMs: 0)
        options.tls = trust
        return options
    }

    /// Proves the node's TLS set-up end to end: `--tls` keeps a self-signed certificate 0600 in the data dir
    /// (the same one after a restart), the smart client pinned to it does set/get over the KV TLS port and
    /// routes by the `kvSSL` ports the config advertises (never the plain ones), a client taking the
    /// certificate file as its CA works too, and a client with a wrong pin gets nothing.
    @Test func smartClientOverTLSWithPinAndCA() async throws {
        let (server, kvTLS, _) = try Self.tlsNode(name: "tls-kv")
        defer { server.stopAndRemove() }
        let certPath = server.dataDir + "/tls/cert.pem"
        let keyPath = server.dataDir + "/tls/key.pem"
        for path in [certPath, keyPath] {
            let attributes = try FileManager.default.attributesOfItem(atPath: path)
            #expect((attributes[.posixPermissions] as? Int) == 0o600, "\(path)")
        }
        let identity = try TLSIdentity.load(certificatePath: certPath, keyPath: keyPath)

        let client = try await BucketClient.connect(
            Self.clientOptions(server, kvTLS: kvTLS, trust: .pinned(fingerprint: identity.fingerprint)))
        let written = try await client.upsert("tls::1", Array(#"{"over":"tls"}"#.utf8))
        #expect(written.cas != .zero)
        #expect(try await client.get("tls::1").value == Array(#"{"over":"tls"}"#.utf8))
        let routed = client.currentConfig?.nodes.compactMap(\.kv) ?? []
        #expect(routed == [NodeAddress(host: "127.0.0.1", port: kvTLS)])
        await client.close()

        let viaCA = try await BucketClient.connect(
            Self.clientOptions(server, kvTLS: kvTLS, trust: .authority(path: certPath)))
        #expect(try await viaCA.get("tls::1").value == Array(#"{"over":"tls"}"#.utf8))
        await viaCA.close()

        let wrong = try TLSTrust.pin(String(repeating: "ab", count: 32))
        await #expect(throws: (any Error).self) {
            let c = try await BucketClient.connect(Self.clientOptions(server, kvTLS: kvTLS, trust: wrong))
            await c.close()
        }

        // A restart keeps the certificate, so pins survive it.
        server.stop()
        try server.start()
        try Self.waitUntilListening(kvTLS)
        let reloaded = try TLSIdentity.load(certificatePath: certPath, keyPath: keyPath)
        #expect(reloaded.fingerprint == identity.fingerprint)
        let afterRestart = try await BucketClient.connect(
            Self.clientOptions(server, kvTLS: kvTLS, trust: .pinned(fingerprint: identity.fingerprint)))
        #expect(try await afterRestart.get("tls::1").value == Array(#"{"over":"tls"}"#.utf8))
        await afterRestart.close()
    }

    /// Proves the admin HTTPS port: it serves the same API as the plain port (a pinned client reads
    /// `/pools/default/b/demo` and finds `kvSSL`/`mgmtSSL` in `nodesExt`), a client with a wrong pin
    /// gets no answer, and plain HTTP sent to the HTTPS port gets no API answer.
    @Test func adminOverHTTPS() async throws {
        let (server, kvTLS, adminTLS) = try Self.tlsNode(name: "tls-admin")
        defer { server.stopAndRemove() }
        let identity = try TLSIdentity.load(
            certificatePath: server.dataDir + "/tls/cert.pem", keyPath: server.dataDir + "/tls/key.pem")
        let context = try TLSTrust.pinned(fingerprint: identity.fingerprint).makeClientContext()
        let address = NodeAddress(host: "127.0.0.1", port: adminTLS)
        let r = try await AdminHTTP.request(
            .GET, "/pools/default/b/demo", at: address, username: server.user, password: server.password,
            tls: context)
        #expect(r.status == 200)
        let json = try JSON.parse(r.body)
        let services = json["nodesExt"]?.arrayValue?.first?["services"]
        #expect(services?["kvSSL"]?.intValue == kvTLS)
        #expect(services?["mgmtSSL"]?.intValue == adminTLS)
        #expect(services?["kv"]?.intValue == server.kvPort)

        let wrong = try TLSTrust.pin(String(repeating: "cd", count: 32)).makeClientContext()
        await #expect(throws: (any Error).self) {
            _ = try await AdminHTTP.request(
                .GET, "/pools", at: address, username: server.user, password: server.password, timeoutMs: 3_000,
                tls: wrong)
        }
        let plain = try? await AdminHTTP.request(
            .GET, "/pools", at: address, username: server.user, password: server.password, timeoutMs: 3_000)
        #expect(plain?.status != 200)
    }

    /// Proves a hostile client cannot hurt the KV TLS port: garbage instead of a ClientHello and a plain
    /// memcached frame are closed at once, a connection that never starts its handshake is closed by the
    /// KV handshake deadline (on the admin HTTPS port by the HTTP idle timeout), and a well-behaved TLS client
    /// is served throughout.
    @Test func hostileHandshakesAreClosedOthersServed() async throws {
        let (server, kvTLS, adminTLS) = try Self.tlsNode(
            name: "tls-hostile", extra: ["--kv-handshake-timeout", "1", "--http-idle-timeout", "1"])
        defer { server.stopAndRemove() }
        let identity = try TLSIdentity.load(
            certificatePath: server.dataDir + "/tls/cert.pem", keyPath: server.dataDir + "/tls/key.pem")
        // The well-behaved client connects first, so its TLS handshakes and config fetch (slow on a loaded
        // machine) are not counted in the silent connections' time below.
        let client = try await BucketClient.connect(
            Self.clientOptions(server, kvTLS: kvTLS, trust: .pinned(fingerprint: identity.fingerprint)))
        let silent = try TestKVClient(port: kvTLS, timeoutSeconds: 8)
        let silentAdmin = try TestKVClient(port: adminTLS, timeoutSeconds: 8)
        let started = Date()

        let garbage = try TestKVClient(port: kvTLS, timeoutSeconds: 5)
        var noise = SystemRandomNumberGenerator()
        try garbage.send(bytes: (0..<4096).map { _ in UInt8.random(in: 0...255, using: &noise) })
        #expect(garbage.isClosedByServer())

        let plainKV = try TestKVClient(port: kvTLS, timeoutSeconds: 5)
        // A memcached HELLO header (magic 0x80, opcode 0x1f, no body) where a ClientHello belongs.
        try plainKV.send(bytes: [0x80, 0x1f] + [UInt8](repeating: 0, count: 22))
        #expect(plainKV.isClosedByServer())

        _ = try await client.upsert("still", [1])
        #expect(try await client.get("still").value == [1])

        // Closed by the 1 s deadlines given above, well before the defaults (10 s and 60 s, Limits) and the
        // 8 s receive timeout.
        #expect(silent.isClosedByServer())
        #expect(silentAdmin.isClosedByServer())
        #expect(Date().timeIntervalSince(started) < 7)
        #expect(try await client.get("still").value == [1])
        await client.close()
    }

    /// Proves `settee-router` reaches the cluster over TLS: with `couchbases://` and `--cert-pin` a plain
    /// memcached client's SET and GET through it land on the node (read back directly), and the same router
    /// without a pin, or with a wrong one, does not start.
    @Test func routerOverTLS() throws {
        let (server, kvTLS, _) = try Self.tlsNode(name: "tls-router")
        defer { server.stopAndRemove() }
        let identity = try TLSIdentity.load(
            certificatePath: server.dataDir + "/tls/cert.pem", keyPath: server.dataDir + "/tls/key.pem")
        let cluster = "couchbases://127.0.0.1:\(kvTLS)"
        let router = try RouterProcess(
            server: server, cluster: cluster, extraArguments: ["--cert-pin", identity.fingerprint])
        let c = try TestKVClient(port: router.port)
        let set = try c.request(
            .set, key: "via-router", value: Array("tls".utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 0))
        #expect(set.status == .success)
        #expect(try c.request(.get, key: "via-router").valueBytes == Array("tls".utf8))
        let direct = try TestKVClient(port: server.kvPort)
        #expect(try direct.request(.get, key: "via-router").valueBytes == Array("tls".utf8))

        #expect(throws: HarnessError.self) { _ = try RouterProcess(server: server, cluster: cluster) }
        #expect(throws: HarnessError.self) {
            _ = try RouterProcess(
                server: server, cluster: cluster,
                extraArguments: ["--cert-pin", "sha256:" + String(repeating: "0", count: 64)])
        }
    }

    /// Proves a two-node TLS cluster: each node's config lists both nodes' `kvSSL`, a smart client trusting both
    /// self-signed certificates (one CA file holding the two) writes with majority durability over TLS, which
    /// succeeds only once the replica's DCP consumer, connecting to the active's KV TLS port pinned to the
    /// fingerprint from the cluster document, has the writes.
    @Test func twoNodeClusterReplicatesOverTLS() async throws {
        let nodes = try (0..<2).map { try ServerProcess(name: "tls-cluster-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        var tlsPorts: [Int] = []
        for node in nodes {
            let kvTLS = try freePort()
            node.extraArguments = ["--tls", "--kv-tls-port", "\(kvTLS)", "--admin-tls-port", "\(try freePort())"]
            try node.start()
            try Self.waitUntilListening(kvTLS)
            tlsPorts.append(kvTLS)
        }
        try ClusterHarness.formCluster(nodes, authType: "none", replicaNumber: 1)
        for node in nodes {
            let config = try JSON.parse(try node.http("GET", "/pools/default/b/demo").body)
            let advertised = config["nodesExt"]?.arrayValue?.compactMap { $0["services"]?["kvSSL"]?.intValue } ?? []
            #expect(Set(advertised) == Set(tlsPorts))
        }
        let bundle = nodes[0].dataDir + "/both-certificates.pem"
        let pems = try nodes.map { try String(contentsOfFile: $0.dataDir + "/tls/cert.pem", encoding: .utf8) }
        // The kept certificate files end with a newline, so they concatenate into a valid bundle as they are.
        #expect(pems.allSatisfy { $0.hasSuffix("-----END CERTIFICATE-----\n") })
        try pems.joined().write(toFile: bundle, atomically: true, encoding: .utf8)
        var options = Self.clientOptions(nodes[0], kvTLS: tlsPorts[0], trust: .authority(path: bundle))
        options.operationTimeoutMs = 10_000
        let client = try await BucketClient.connect(options)
        #expect(Set(client.currentConfig?.nodes.compactMap(\.kv?.port) ?? []) == Set(tlsPorts))
        // Replica streams of a new bucket connect within about a second: retry each write until then.
        for i in 0..<32 {
            let deadline = Date().addingTimeInterval(30)
            while true {
                do {
                    _ = try await client.upsert("tls-durable::\(i)", [UInt8(i)], durability: .majority)
                    break
                } catch {
                    if Date() > deadline { throw error }
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
        }
        for i in 0..<32 { #expect(try await client.get("tls-durable::\(i)").value == [UInt8(i)]) }
        await client.close()
    }

    /// Proves the gateway reaches a cluster bucket over TLS: with `"server": "couchbases://…"` and the node's
    /// certificate as `cacertpath` it mounts the bucket (smart client and DCP change stream both over TLS), a
    /// document written through its REST API is on the node, and a document written on the node directly
    /// reaches the gateway's `_changes` through the TLS change stream. Without `cacertpath` the mount fails.
    @Test func gatewayMountsAClusterBucketOverTLS() async throws {
        let (server, kvTLS, _) = try Self.tlsNode(name: "tls-gw-cluster")
        defer { server.stopAndRemove() }
        let certPath = server.dataDir + "/tls/cert.pem"
        func config(_ extra: String) -> String {
            """
            {"databases": {"db": {"server": "couchbases://127.0.0.1:\(kvTLS)", "bucket": "demo", \(extra)
             "username": "Administrator", "password": "password", "import_docs": "continuous",
             "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]}}}}}
            """
        }
        let refused = try GatewayProcess(name: "tls-gw-nocert", config: config(""))
        let exit = try refused.runToExit()
        #expect(exit.status != 0 && exit.output.contains("cacertpath"))

        let gw = try GatewayProcess(name: "tls-gw", config: config("\"cacertpath\": \"\(certPath)\","))
        try gw.start()
        defer { gw.stop() }
        let base = "http://127.0.0.1:\(gw.port)/db"
        let put = try await GatewayHTTP.request(.PUT, base + "/from-gateway", body: Array(#"{"v":1}"#.utf8))
        #expect(put.status == 201)
        let direct = try TestKVClient(port: server.kvPort)
        #expect(try direct.request(.get, key: "from-gateway").status == .success)

        _ = try direct.request(
            .set, key: "from-node", value: Array(#"{"v":2}"#.utf8),
            extras: TestKVClient.setExtras(flags: 0x0200_0006, expiry: 0), datatype: 1)
        var seen = false
        for _ in 0..<100 where !seen {
            let changes = try await GatewayHTTP.request(.GET, base + "/_changes")
            seen = changes.text.contains("from-node")
            if !seen { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(seen)
    }

    /// Proves the gateway's Sync Gateway 1.x `SSLCert`/`SSLKey`: both its public and admin interfaces answer
    /// over TLS (a client pinned to the certificate gets the server and database info), plain HTTP to them gets
    /// no answer, and a connection that never starts its handshake is closed by the head deadline.
    @Test func gatewayServesHTTPSWithSSLCertAndKey() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "settee-gw-tls-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let identity = try SelfSignedIdentity(commonName: "gateway test")
        let certPath = directory.appendingPathComponent("cert.pem").path
        let keyPath = directory.appendingPathComponent("key.pem").path
        try Data(identity.certificatePEM.utf8).write(to: URL(fileURLWithPath: certPath))
        try Data(identity.privateKeyPEM.utf8).write(to: URL(fileURLWithPath: keyPath))
        let config = """
            {"SSLCert": "\(certPath)", "SSLKey": "\(keyPath)",
             "databases": {"db": {"server": "walrus:", "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]}}}}}
            """
        let gw = try GatewayProcess(name: "tls", config: config)
        // The head deadline is at most the idle timeout and runs from the connection's start, the TLS handshake
        // included: 3 s, not 1 s, so a loaded run's handshakes and requests fit in it (one once did not).
        gw.extraArguments = ["--idle-timeout", "3"]
        try gw.start()
        defer { gw.stop() }
        // Connections that never start their handshake are closed by the head deadline, on both interfaces.
        let silent = try [gw.port, gw.adminPort].map { try TestKVClient(port: $0, timeoutSeconds: 12) }
        let started = Date()
        let context = try TLSTrust.pinned(fingerprint: identity.fingerprint).makeClientContext()
        for port in [gw.port, gw.adminPort] {
            let address = NodeAddress(host: "127.0.0.1", port: port)
            let root = try await AdminHTTP.request(.GET, "/", at: address, username: nil, password: nil, tls: context)
            #expect(root.status == 200, "port \(port)")
            let db = try await AdminHTTP.request(.GET, "/db/", at: address, username: nil, password: nil, tls: context)
            #expect(db.status == 200, "port \(port)")
            #expect(try JSON.parse(db.body)["db_name"]?.stringValue == "db", "port \(port)")
            let plain = try? await AdminHTTP.request(
                .GET, "/", at: address, username: nil, password: nil, timeoutMs: 3_000)
            #expect(plain?.status != 200, "port \(port)")
        }
        for connection in silent { #expect(connection.isClosedByServer()) }
        #expect(Date().timeIntervalSince(started) < 11)
    }

    /// Proves the gateway's TLS offers only forward-secret suites by default (issue 72 item 5, ADR 0144), as a stock
    /// OpenSSL client sees it, with an RSA certificate (the key type that can negotiate static-RSA key exchange): TLS
    /// 1.3 and TLS 1.2 ECDHE-RSA-AES-GCM are accepted, static RSA (`AES128-GCM-SHA256`, `AES256-SHA`) and
    /// ECDHE-RSA-AES-CBC-SHA1 are refused, on both interfaces.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl")))
    func theGatewayOffersOnlyForwardSecretSuites() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "settee-gw-rsa-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let certPath = directory.appendingPathComponent("cert.pem").path
        let keyPath = directory.appendingPathComponent("key.pem").path
        let made = try ChildProcess.run(
            "/usr/bin/openssl",
            [
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", keyPath, "-out", certPath, "-days", "1",
                "-subj", "/CN=gateway-rsa",
            ])
        #expect(made.status == 0, "\(made.standardError)")
        let config = """
            {"SSLCert": "\(certPath)", "SSLKey": "\(keyPath)",
             "databases": {"db": {"server": "walrus:", "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]}}}}}
            """
        let gw = try GatewayProcess(name: "tls-rsa", config: config)
        try gw.start()
        defer { gw.stop() }
        for port in [gw.port, gw.adminPort] {
            let tls13 = try Self.negotiated(port, ["-tls1_3"])
            #expect(tls13?.contains("TLSv1.3") == true, "port \(port): \(tls13 ?? "failed")")
            let gcm = try Self.negotiated(port, ["-tls1_2", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256"])
            #expect(gcm?.contains("ECDHE-RSA-AES128-GCM-SHA256") == true, "port \(port): \(gcm ?? "failed")")
            for weak in ["AES128-GCM-SHA256", "AES256-SHA", "ECDHE-RSA-AES128-SHA"] {
                let got = try Self.negotiated(port, ["-tls1_2", "-cipher", weak])
                #expect(got == nil, "port \(port): \(weak) was accepted: \(got ?? "")")
            }
        }
    }

    /// Proves the client-side parsing TLS relies on: `couchbases://` and `https://` seeds default to the TLS
    /// ports and say so, pins parse in both spellings (and nothing else passes), and a config's TLS view
    /// takes a node's `kvSSL`/`mgmtSSL` or nothing, never its plain ports.
    @Test func seedsPinsAndTLSConfigView() throws {
        #expect(Seed("couchbases://10.0.0.1") == .kv(NodeAddress(host: "10.0.0.1", port: 11207)))
        #expect(Seed("https://10.0.0.1") == .http(NodeAddress(host: "10.0.0.1", port: 18091)))
        #expect(Seed("couchbase://10.0.0.1") == .kv(NodeAddress(host: "10.0.0.1", port: 11210)))
        #expect(Seed.isTLS("couchbases://h:1") && Seed.isTLS("https://h") && !Seed.isTLS("couchbase://h"))
        let hex = String(repeating: "0a", count: 32)
        #expect(try TLSTrust.pin("sha256:" + hex.uppercased()) == .pinned(fingerprint: "sha256:" + hex))
        let colons = stride(from: 0, to: 64, by: 2).map { i -> String in
            let start = hex.index(hex.startIndex, offsetBy: i)
            return String(hex[start..<hex.index(start, offsetBy: 2)])
        }.joined(separator: ":")
        #expect(try TLSTrust.pin(colons) == .pinned(fingerprint: "sha256:" + hex))
        #expect(throws: TLSSetupError.self) { try TLSTrust.pin("sha256:1234") }
        #expect(throws: TLSSetupError.self) { try TLSTrust.pin(String(repeating: "zz", count: 32)) }

        let config = """
            {"rev":1,"name":"demo","nodesExt":[
              {"hostname":"10.0.0.1","services":{"kv":11210,"mgmt":8091,"kvSSL":11207,"mgmtSSL":18091}},
              {"hostname":"10.0.0.2","services":{"kv":11210,"mgmt":8091}}],
             "vBucketServerMap":{"numReplicas":0,"vBucketMap":[[0],[1]]}}
            """
        let parsed = try BucketConfig.parse(Array(config.utf8), sourceHost: "10.0.0.1").usingTLSPorts()
        #expect(parsed.nodes[0].kv == NodeAddress(host: "10.0.0.1", port: 11207))
        #expect(parsed.nodes[0].mgmt == NodeAddress(host: "10.0.0.1", port: 18091))
        #expect(parsed.nodes[1].kv == nil && parsed.nodes[1].mgmt == nil)
        #expect(parsed.route(key: Array("k".utf8)).1 != NodeAddress(host: "10.0.0.2", port: 11210))
    }
}
