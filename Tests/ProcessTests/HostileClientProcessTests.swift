import Foundation
import NIOCore
import NIOHTTP1
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

#if canImport(Glibc)
    import Glibc
#endif

/// Clients that try to exhaust a node's memory or descriptors, against real `settee-server` processes on
/// loopback. Serialized: each starts its own node, and the machine has two cores.
@Suite(.serialized, .onTestThreads) struct HostileClientProcessTests {
    /// Proves a KV client that pipelines GETs and never reads cannot make the node buffer its answers: 200,000
    /// GETs of a 100 KiB value (20 GB of answers) are offered to the socket, the node stops reading once its
    /// unsent output passes the high-water mark, its RSS stays within 200 MB of what it was before, and
    /// another client is still answered meanwhile.
    @Test func neverReadingPipelinerIsBounded() throws {
        let server = try ServerProcess.started(name: "pipeliner")
        defer { server.stopAndRemove() }
        try server.initialize()
        let pid = try #require(server.process?.processIdentifier)
        let setter = try TestKVClient(port: server.kvPort)
        let value = [UInt8](repeating: 0x61, count: 100 * 1024)
        let set = try setter.request(
            .set, key: "big", value: value, extras: TestKVClient.setExtras(flags: 0, expiry: 0))
        #expect(set.status == .success)
        let before = try #require(residentBytes(pid: pid))

        let pipeliner = try TestKVClient(port: server.kvPort)
        setSendTimeout(fd: pipeliner.fd, milliseconds: 200)
        let key = Array("big".utf8)
        var batch = ByteBuffer()
        for i in 0..<1000 {
            batch.writeRequest(
                opcode: .get, vbucket: VBucketHash.vbucket(forKey: key).rawValue, opaque: UInt32(i), key: key)
        }
        let bytes = Array(batch.readableBytesView)
        var sentRequests = 0
        var peak = before
        let deadline = Date().addingTimeInterval(6)
        // Offers up to 200,000 GETs; once the node stops reading, sends time out and only time passes.
        while sentRequests < 200_000 && Date() < deadline {
            let n = bytes.withUnsafeBytes { Glibc.send(pipeliner.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n > 0 { sentRequests += n / (bytes.count / 1000) }
            peak = max(peak, residentBytes(pid: pid) ?? 0)
            if peak - before > 2_000_000_000 { break }  // far past the bound: stop before the machine suffers
        }
        usleep(500_000)
        peak = max(peak, residentBytes(pid: pid) ?? 0)

        let growth = peak - before
        #expect(growth < 200_000_000, "RSS grew by \(growth / 1_000_000) MB with \(sentRequests) GETs offered")
        let other = try TestKVClient(port: server.kvPort, timeoutSeconds: 10)
        let get = try other.request(.get, key: "big")
        #expect(get.status == .success)
        #expect(get.valueBytes.count == value.count)
    }
}

/// Resident set size of a process in bytes, from `/proc/<pid>/status` (VmRSS, in kB).
func residentBytes(pid: Int32) -> Int? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
    for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        let kb = line.split(separator: " ").dropFirst().first.flatMap { Int($0) }
        return kb.map { $0 * 1024 }
    }
    return nil
}

/// Makes `send` on `fd` give up after `milliseconds` instead of blocking while the peer does not read.
func setSendTimeout(fd: Int32, milliseconds: Int) {
    var tv = timeval(tv_sec: milliseconds / 1000, tv_usec: Int((milliseconds % 1000) * 1000))
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
}

/// Logins that cost the node a password check.
@Suite(.serialized, .onTestThreads) struct LoginFloodProcessTests {
    /// Proves one connection cannot queue more than one password check: while a connection has 2,000
    /// wrong-password PLAIN logins pipelined, another client's login is answered within 3 s. The node used to
    /// queue all 2,000 checks (a PBKDF2 run each) on its 2-thread blocking pool ahead of it.
    @Test func pipelinedBadLoginsDoNotQueuePasswordChecks() throws {
        let server = try ServerProcess.started(name: "loginflood")
        defer { server.stopAndRemove() }
        try server.initialize()
        let attacker = try TestKVClient(port: server.kvPort)
        setSendTimeout(fd: attacker.fd, milliseconds: 2000)
        var burst = ByteBuffer()
        for i in 0..<2000 {
            burst.writeRequest(
                opcode: .saslAuth, vbucket: 0, opaque: UInt32(i), key: Array("PLAIN".utf8),
                value: [0] + Array(server.user.utf8) + [0] + Array("wrong-password".utf8))
        }
        try attacker.send(burst)
        usleep(200_000)
        let started = Date()
        let good = try TestKVClient(port: server.kvPort, timeoutSeconds: 30)
        #expect(try good.authenticate(user: server.user, password: server.password) == .success)
        let elapsed = Date().timeIntervalSince(started)
        #expect(elapsed < 3, "a good login waited \(elapsed) s behind another connection's bad ones")
        let first = try attacker.receive()
        #expect(first.status == .authError && first.opaque == 0)
    }
}

/// Password guesses and a reader's writes on the views port.
@Suite(.serialized, .onTestThreads) struct ViewsPortLoginProcessTests {
    static func views(
        _ server: ServerProcess, _ method: String, _ path: String, user: String, password: String, body: String? = nil
    ) throws -> ServerProcess.HTTPResult {
        var req = URLRequest(url: URL(string: "http://127.0.0.1:\(server.viewsPort)\(path)")!)
        req.httpMethod = method
        req.setValue(
            "Basic " + Data("\(user):\(password)".utf8).base64EncodedString(), forHTTPHeaderField: "Authorization")
        if let body {
            req.httpBody = Data(body.utf8)
            req.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        return try RawHTTP.send(port: server.viewsPort, request: req)
    }

    /// Proves the views port checks passwords through the login guard as the admin and KV ports do: after
    /// `Limits.loginFailuresBeforeThrottle` wrong passwords for the administrator even the right one answers 429
    /// there and, counted against the same address, on the admin port (before, the views port checked every guess,
    /// unthrottled and uncounted); and that
    /// a `data_reader` cannot write a design document by giving its path a `/_view/` (`PUT /demo/_design/_view/`,
    /// which Hummingbird routes to the design-document PUT of `_view`), while its view queries still run.
    @Test func viewsPortGuessesAreThrottledAndReadersCannotWriteDesigns() throws {
        let server = try ServerProcess.started(name: "views-login")
        defer { server.stopAndRemove() }
        try server.initialize()
        try server.waitForViews()
        let user = try server.http(
            "PUT", "/settings/rbac/users/local/reader",
            form: [("password", "reader-pw"), ("roles", "data_reader[demo]")])
        #expect(user.status == 200, "\(user.text)")
        let design = #"{"views":{"v":{"map":"function(doc){emit(doc.k,null);}"}}}"#
        let sneaky = try Self.views(
            server, "PUT", "/demo/_design/_view/", user: "reader", password: "reader-pw", body: design)
        #expect(sneaky.status == 401, "a reader wrote a design document: \(sneaky.status) \(sneaky.text)")
        let real = try Self.views(
            server, "PUT", "/demo/_design/d", user: server.user, password: server.password, body: design)
        #expect(real.status == 201, "\(real.text)")
        var queried = 0
        for _ in 0..<100 where queried == 0 {
            let q = try Self.views(
                server, "GET", "/demo/_design/d/_view/v?stale=ok", user: "reader", password: "reader-pw")
            if q.status == 200 { queried = 1 } else { usleep(100_000) }
        }
        #expect(queried == 1, "the reader's view query never answered 200")

        for _ in 0..<Limits.loginFailuresBeforeThrottle {
            let wrong = try Self.views(server, "GET", "/demo/_design/d", user: server.user, password: "guess")
            #expect(wrong.status == 401)
        }
        let right = try Self.views(server, "GET", "/demo/_design/d", user: server.user, password: server.password)
        #expect(right.status == 429, "the views port let a right password through after the failures: \(right.status)")
        // The failures came from this address, which the views port now counts as the admin port does: the admin
        // port throttles it too.
        #expect(try server.http("GET", "/pools/default").status == 429)
    }
}

/// Idle, half-sent and malformed connections on every port.
@Suite(.serialized, .onTestThreads) struct IdleConnectionProcessTests {
    /// Proves KV connections that never authenticate nor use a bucket are closed after the handshake deadline
    /// (1 s here), so they cannot hold the node's descriptors, while the port keeps serving: 200 idle strangers
    /// are all closed, and a client that used the open bucket meanwhile is still served after the deadline.
    @Test func kvStrangersAreClosedAndThePortServes() throws {
        let server = try ServerProcess(name: "kvidle")
        server.extraArguments = ["--kv-handshake-timeout", "1"]
        try server.start()
        defer { server.stopAndRemove() }
        try server.initialize()
        let idle = try (0..<200).map { _ in try TestKVClient(port: server.kvPort, timeoutSeconds: 8) }
        let worker = try TestKVClient(port: server.kvPort, timeoutSeconds: 10)
        let set = try worker.request(
            .set, key: "k", value: Array("v".utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 0))
        #expect(set.status == .success)
        let started = Date()
        let closed = idle.filter { $0.isClosedByServer() }.count
        #expect(closed == idle.count, "\(closed) of \(idle.count) idle connections closed")
        #expect(Date().timeIntervalSince(started) < 6)
        let get = try worker.request(.get, key: "k")
        #expect(get.status == .success && get.valueBytes == Array("v".utf8))
    }

    /// Proves a stranger cannot make the node buffer a large frame while no open bucket exists: a SET declaring
    /// a 1 MiB body before authentication closes the connection at once (no bucket, so nothing to store), where
    /// the node used to wait for and buffer the whole body; an authenticated client may still send it.
    @Test func kvStrangerLargeFrameClosesConnection() throws {
        let server = try ServerProcess.started(name: "kvbigframe")
        defer { server.stopAndRemove() }
        let r = try server.http(
            "POST", "/settings/web", form: [("username", server.user), ("password", server.password), ("port", "SAME")])
        #expect(r.status == 200)
        let stranger = try TestKVClient(port: server.kvPort, timeoutSeconds: 5)
        var frame = ByteBuffer()
        frame.writeRequest(
            opcode: .set, vbucket: 0, opaque: 1, extras: TestKVClient.setExtras(flags: 0, expiry: 0),
            key: Array("k".utf8), value: [UInt8](repeating: 0, count: 1024 * 1024))
        try stranger.send(ByteBuffer(bytes: Array(frame.readableBytesView.prefix(64 * 1024))))
        #expect(stranger.isClosedByServer())

        let admin = try TestKVClient(port: server.kvPort, timeoutSeconds: 10)
        #expect(try admin.authenticate(user: server.user, password: server.password) == .success)
        try admin.send(frame)
        let answer = try admin.receive()
        #expect(answer.status == .noBucket)
    }

    /// Proves the admin and views ports close a connection that dribbles a request head (slowloris) or sends
    /// nothing, after the idle timeout (1 s here), and still serve a normal request.
    @Test func httpSlowlorisIsClosedOnAdminAndViews() throws {
        let server = try ServerProcess(name: "slowloris")
        server.extraArguments = ["--http-idle-timeout", "1"]
        try server.start()
        defer { server.stopAndRemove() }
        for port in [server.adminPort, server.viewsPort] {
            let silent = try TestKVClient(port: port, timeoutSeconds: 6)
            let dribbler = try TestKVClient(port: port, timeoutSeconds: 6)
            try dribbler.send(bytes: Array("GET /pools HTTP/1.1\r\nHost: x\r\nX-A: ".utf8))
            #expect(silent.isClosedByServer(), "port \(port): silent connection left open")
            #expect(dribbler.isClosedByServer(), "port \(port): half-sent head left open")
        }
        #expect(try server.http("GET", "/pools").status == 200)
    }

    /// Proves the gateway answers input its HTTP parser rejects with 400 and closes the connection, on both
    /// ports: a raw non-ASCII byte in the path, garbage, and a header block over the limit; and that it closes
    /// connections that dribble a head or send nothing after the idle timeout (1 s here).
    @Test func gatewayRejectsMalformedAndSlowRequests() throws {
        let gw = try GatewayProcess(
            name: "gw-hostile",
            config: #"{"databases":{"db":{"server":"walrus:","users":{"GUEST":{"disabled":true}}}}}"#)
        gw.extraArguments = ["--idle-timeout", "1"]
        try gw.start()
        defer { gw.stop() }
        let bigHeader =
            "GET /db/ HTTP/1.1\r\nHost: x\r\nX-Big: " + String(repeating: "a", count: 100 * 1024) + "\r\n\r\n"
        let malformed: [[UInt8]] = [
            Array("GET /db/".utf8) + [0xC3, 0xA9] + Array(" HTTP/1.1\r\nHost: x\r\n\r\n".utf8),
            [0x00, 0x01, 0x02] + Array("garbage\r\n\r\n".utf8),
            Array(bigHeader.utf8),
        ]
        for port in [gw.port, gw.adminPort] {
            for (i, bytes) in malformed.enumerated() {
                let c = try TestKVClient(port: port, timeoutSeconds: 5)
                try? c.send(bytes: bytes)
                let reply = c.readUntilClosed()
                #expect(
                    String(decoding: reply.bytes.prefix(12), as: UTF8.self) == "HTTP/1.1 400",
                    "port \(port) input \(i): \(String(decoding: reply.bytes.prefix(40), as: UTF8.self))")
                #expect(reply.closed, "port \(port) input \(i): connection left open")
            }
            let silent = try TestKVClient(port: port, timeoutSeconds: 6)
            let dribbler = try TestKVClient(port: port, timeoutSeconds: 6)
            try dribbler.send(bytes: Array("GET /db/ HTTP/1.1\r\nHost: x\r\nX-A: ".utf8))
            #expect(silent.isClosedByServer(), "port \(port): silent connection left open")
            #expect(dribbler.isClosedByServer(), "port \(port): half-sent head left open")
        }
    }

    /// Proves a websocket upgrade head whose query holds an empty pair (`?=`, `?&=&`, …) cannot stop the gateway:
    /// the upgrade decision parsed the query by hand before authentication and trapped on `=` alone, so one
    /// anonymous request ended every database. Each head, on both ports, is answered (or refused) and the process
    /// goes on serving; a well-formed websocket `_changes` on the admin port still upgrades.
    @Test func websocketUpgradeWithEmptyQueryPairsDoesNotStopTheGateway() throws {
        let gw = try GatewayProcess(
            name: "gw-ws-query",
            config:
                #"{"databases":{"db":{"server":"walrus:","users":{"GUEST":{"disabled":false,"admin_channels":["*"]}}}}}"#
        )
        try gw.start()
        defer { gw.stop() }
        let upgrade =
            "Host: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            + "Sec-WebSocket-Version: 13\r\n\r\n"
        let targets = [
            "/x?=", "/db/_changes?=", "/db/_changes?feed=websocket&=", "/db/_changes?&=&feed=websocket", "/?=x&=",
        ]
        for port in [gw.port, gw.adminPort] {
            for target in targets {
                let c = try TestKVClient(port: port, timeoutSeconds: 5)
                try c.send(bytes: Array("GET \(target) HTTP/1.1\r\n\(upgrade)".utf8))
                let reply = c.read { $0.count >= 12 }.bytes
                #expect(
                    String(decoding: reply.prefix(9), as: UTF8.self) == "HTTP/1.1 ",
                    "port \(port) \(target): no answer (\(reply.count) bytes)")
                #expect(gw.process?.isRunning == true, "the gateway stopped after \(target) on port \(port)")
            }
        }
        let ok = try TestKVClient(port: gw.adminPort, timeoutSeconds: 5)
        try ok.send(bytes: Array("GET /db/_changes?feed=websocket HTTP/1.1\r\n\(upgrade)".utf8))
        let switched = ok.read { $0.count >= 12 }.bytes
        #expect(String(decoding: switched.prefix(12), as: UTF8.self) == "HTTP/1.1 101")
        let plain = try TestKVClient(port: gw.adminPort, timeoutSeconds: 5)
        try plain.send(bytes: Array("GET /db/ HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8))
        #expect(String(decoding: plain.read { $0.count >= 12 }.bytes.prefix(12), as: UTF8.self) == "HTTP/1.1 200")
    }
}

/// What one gateway request may cost before and after authentication.
@Suite(.serialized, .onTestThreads) struct GatewayRequestCostProcessTests {
    static let config = #"{"databases":{"db":{"server":"walrus:","users":{"GUEST":{"disabled":true}}}}}"#

    /// Proves the public port authenticates before it reads a body: an anonymous PUT declaring a 64 MiB body
    /// gets 401 after sending only its head and 1 KiB, where the gateway used to wait for (and buffer) the body.
    @Test func unauthenticatedBodyIsNotRead() throws {
        let gw = try GatewayProcess(name: "gw-authfirst", config: Self.config)
        try gw.start()
        defer { gw.stop() }
        let c = try TestKVClient(port: gw.port, timeoutSeconds: 5)
        let head =
            "PUT /db/doc HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: \(64 * 1024 * 1024)\r\n\r\n"
        try c.send(bytes: Array(head.utf8) + [UInt8](repeating: 0x20, count: 1024))
        let reply = c.read { $0.count >= 12 }.bytes
        #expect(String(decoding: reply.prefix(12), as: UTF8.self) == "HTTP/1.1 401")
    }

    /// Proves `_bulk_get` and `_all_docs?keys=…&include_docs` bound what one request costs: 20,000 copies of
    /// one id are read once (one result row, where every copy used to be read and returned), and more distinct
    /// ids than the limit are refused with 413; so are `_revs_diff` naming more documents than `_bulk_get` may read, and
    /// `_changes` filtered by more doc_ids (or channels) than its bounds.
    @Test func bulkReadsAreDedupedAndCapped() async throws {
        let gw = try GatewayProcess(name: "gw-bulkcost", config: Self.config)
        try gw.start()
        defer { gw.stop() }
        let base = "http://127.0.0.1:\(gw.adminPort)/db"
        let put = try await GatewayHTTP.request(.PUT, base + "/doc", body: Array(#"{"v":1}"#.utf8))
        #expect(put.status == 201)
        let same = "[" + Array(repeating: #"{"id":"doc"}"#, count: 20_000).joined(separator: ",") + "]"
        let bulk = try await GatewayHTTP.request(.POST, base + "/_bulk_get", body: Array(#"{"docs":\#(same)}"#.utf8))
        #expect(bulk.status == 200)
        let results = (try JSONSerialization.jsonObject(with: Data(bulk.body)) as? [String: Any])?["results"] as? [Any]
        #expect(results?.count == 1)
        let keys = Array(repeating: #""doc""#, count: 20_000).joined(separator: ",")
        let all = try await GatewayHTTP.request(
            .POST, base + "/_all_docs?include_docs=true", body: Array(#"{"keys":[\#(keys)]}"#.utf8))
        #expect(all.status == 200)
        let rows = (try JSONSerialization.jsonObject(with: Data(all.body)) as? [String: Any])?["rows"] as? [Any]
        #expect(rows?.count == 1)

        let limit = GatewayHTTPLimits.maxBulkReadDocs
        let distinct = "[" + (0...limit).map { #"{"id":"d\#($0)"}"# }.joined(separator: ",") + "]"
        let tooMany = try await GatewayHTTP.request(
            .POST, base + "/_bulk_get", body: Array(#"{"docs":\#(distinct)}"#.utf8))
        #expect(tooMany.status == 413)
        let manyKeys = (0...limit).map { #""d\#($0)""# }.joined(separator: ",")
        let tooManyKeys = try await GatewayHTTP.request(
            .POST, base + "/_all_docs?include_docs=true", body: Array(#"{"keys":[\#(manyKeys)]}"#.utf8))
        #expect(tooManyKeys.status == 413)

        // `_revs_diff` reads each document it names, and `_changes` may read each of its doc_ids: the same bounds.
        let diffDocs = (0...limit).map { #""d\#($0)":["1-a"]"# }.joined(separator: ",")
        let diff = try await GatewayHTTP.request(.POST, base + "/_revs_diff", body: Array("{\(diffDocs)}".utf8))
        #expect(diff.status == 413)
        let oneDiff = try await GatewayHTTP.request(.POST, base + "/_revs_diff", body: Array(#"{"doc":["1-a"]}"#.utf8))
        #expect(oneDiff.status == 200)
        let manyIDs = (0...limit).map { #""d\#($0)""# }.joined(separator: ",")
        let byIDs = try await GatewayHTTP.request(
            .POST, base + "/_changes", body: Array(#"{"filter":"_doc_ids","doc_ids":[\#(manyIDs)]}"#.utf8))
        #expect(byIDs.status == 413)
        let channels = (0...GatewayHTTPLimits.maxBulkItems).map { #""c\#($0)""# }.joined(separator: ",")
        let byChannels = try await GatewayHTTP.request(
            .POST, base + "/_changes",
            body: Array(#"{"filter":"sync_gateway/bychannel","channels":[\#(channels)]}"#.utf8))
        #expect(byChannels.status == 413)
        let fewIDs = try await GatewayHTTP.request(
            .POST, base + "/_changes", body: Array(#"{"filter":"_doc_ids","doc_ids":["doc"]}"#.utf8))
        #expect(fewIDs.status == 200)
    }

    /// Proves `_bulk_get` stops gathering once its answer would pass `maxBulkReadBytes` and refuses with 413: one
    /// 16 MiB document asked for by distinct items (an extra field makes each item its own, so deduplication does
    /// not fold them) past the bound; the same gateway then answers a request under the bound with both copies.
    @Test func bulkGetRefusesAnAnswerPastItsByteBound() async throws {
        let gw = try GatewayProcess(name: "gw-bulkbytes", config: Self.config)
        try gw.start()
        defer { gw.stop() }
        let base = "http://127.0.0.1:\(gw.adminPort)/db"
        let pad = 16 * 1024 * 1024
        let body = Array(#"{"pad":""#.utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: pad) + Array(#""}"#.utf8)
        let put = try await GatewayHTTP.request(.PUT, base + "/big", body: body)
        #expect(put.status == 201, "\(put.text.prefix(200))")
        let copies = GatewayHTTPLimits.maxBulkReadBytes / pad + 1
        let items = (0..<copies).map { #"{"id":"big","n":\#($0)}"# }.joined(separator: ",")
        let over = try await GatewayHTTP.request(.POST, base + "/_bulk_get", body: Array(#"{"docs":[\#(items)]}"#.utf8))
        #expect(over.status == 413, "\(copies) copies of 16 MiB answered \(over.status)")
        #expect(over.text.contains("\(GatewayHTTPLimits.maxBulkReadBytes) bytes"), "\(over.text.prefix(200))")

        let two = try await GatewayHTTP.request(
            .POST, base + "/_bulk_get", body: Array(#"{"docs":[{"id":"big","n":0},{"id":"big","n":1}]}"#.utf8))
        #expect(two.status == 200)
        let results = (try JSONSerialization.jsonObject(with: Data(two.body)) as? [String: Any])?["results"] as? [Any]
        #expect(results?.count == 2)
        #expect(two.body.count > 2 * pad)
    }
}
