import Foundation
import NIOCore
import SetteeTestSupport

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#endif

/// A real `settee-server` process on loopback with ports chosen at runtime. Stopped (SIGKILL) when
/// dropped, if the test did not stop it itself.
final class ServerProcess {
    let dataDir: String
    let adminPort: Int
    let kvPort: Int
    let viewsPort: Int
    /// The views TLS port (`--views-tls-port`, always passed: a `--tls` node would otherwise take 18092, which
    /// another test's node may hold).
    let viewsTLSPort: Int
    let logURL: URL
    private var child: ChildProcess?
    /// The running process (nil before `start` and after `stop`/`kill9`).
    var process: Process? { child?.process }
    /// More `settee-server` flags, appended to the defaults.
    var extraArguments: [String] = []
    /// Ports `start` waits for; nil: the admin and KV ports (a `--tls-only` node listens on its TLS ports only).
    var readinessPorts: [Int]?
    let user = "Administrator"
    let password = "password"

    static var binary: String { BuiltExecutable.path("settee-server") }

    init(name: String, dataDir: String? = nil) throws {
        self.dataDir = dataDir ?? TestOutput.scratch(name).path
        adminPort = try freePort()
        kvPort = try freePort()
        viewsPort = try freePort()
        viewsTLSPort = try freePort()
        logURL = TestOutput.directory.appendingPathComponent("\(name)-\(adminPort).log")
    }

    /// Starts the process (its output appended to `logURL`) and waits until both the admin API and the KV
    /// port accept connections.
    func start(timeout: TimeInterval = 120) throws {
        let arguments =
            [
                "--data-dir", dataDir, "--host", "127.0.0.1", "--admin-port", String(adminPort), "--kv-port",
                String(kvPort), "--views-port", String(viewsPort), "--views-tls-port", String(viewsTLSPort),
                "--kv-threads", "1",
            ] + extraArguments
        let child = try ChildProcess(Self.binary, arguments, output: .log(logURL))
        self.child = child
        try child.waitUntilListening(readinessPorts ?? [adminPort, kvPort], timeout: timeout)
    }

    /// SIGKILL: no flush, no goodbye.
    func kill9() {
        child?.stop(signal: SIGKILL)
        child = nil
    }

    /// SIGTERM and wait; returns the exit status.
    @discardableResult
    func stop() -> Int32 {
        guard let child else { return 0 }
        self.child = nil
        return child.stop()
    }

    func removeData() { try? FileManager.default.removeItem(atPath: dataDir) }

    /// A started node with a fresh data dir; pair with `stopAndRemove()` in a `defer`.
    static func started(name: String) throws -> ServerProcess {
        let server = try ServerProcess(name: name)
        try server.start()
        return server
    }

    func stopAndRemove() {
        stop()
        removeData()
    }

    // MARK: admin HTTP

    struct HTTPResult {
        var status: Int
        var body: Data
        var text: String { String(decoding: body, as: UTF8.self) }
        func json() throws -> Any { try JSONSerialization.jsonObject(with: body, options: [.fragmentsAllowed]) }
    }

    /// Turns the cluster's audit log on (`POST /settings/audit`, ADR 0148).
    func enableAudit() throws {
        let r = try http("POST", "/settings/audit", form: [("auditdEnabled", "true")])
        guard r.status == 200 else { throw HarnessError("audit: \(r.status) \(r.text)") }
    }

    /// The audit records of this node's live audit file (`<data-dir>/logs/audit.log`) with event id `id`, waiting up
    /// to `timeout` seconds for the first (the log's writer thread writes behind the request).
    func auditRecords(id: Int, timeout: TimeInterval = 20) throws -> [[String: Any]] {
        let path = dataDir + "/logs/audit.log"
        var found: [[String: Any]] = []
        _ = try ClusterHarness.eventually(timeout) {
            let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            found = text.split(separator: "\n").compactMap { line in
                (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
            }.filter { ($0["id"] as? Int) == id }
            return !found.isEmpty
        }
        return found
    }

    func http(
        _ method: String, _ path: String, form: [(String, String)]? = nil, body: Data? = nil,
        contentType: String? = nil, auth: (String, String)? = nil, useAuth: Bool = true
    ) throws -> HTTPResult {
        var req = URLRequest(url: URL(string: "http://127.0.0.1:\(adminPort)\(path)")!)
        req.httpMethod = method
        req.timeoutInterval = 60
        if useAuth {
            let (u, pw) = auth ?? (user, password)
            req.setValue("Basic " + Data("\(u):\(pw)".utf8).base64EncodedString(), forHTTPHeaderField: "Authorization")
        }
        if let form {
            var allowed = CharacterSet.alphanumerics
            allowed.insert(charactersIn: "-._~")
            let encoded = form.map {
                "\($0.0)=\($0.1.addingPercentEncoding(withAllowedCharacters: allowed) ?? $0.1)"
            }.joined(separator: "&")
            req.httpBody = Data(encoded.utf8)
            req.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        } else if let body {
            req.httpBody = body
            if let contentType { req.setValue(contentType, forHTTPHeaderField: "Content-Type") }
        }
        return try RawHTTP.send(port: adminPort, request: req)
    }

    /// Initialises the node's admin credentials and creates a bucket, as `make cluster` does.
    func initialize(bucket: String = "demo", ramQuotaMB: Int = 256, replicaNumber: Int = 0, authType: String = "none")
        throws
    {
        let r = try http("POST", "/settings/web", form: [("username", user), ("password", password), ("port", "SAME")])
        guard r.status == 200 else { throw HarnessError("settings/web: \(r.status) \(r.text)") }
        let c = try http(
            "POST", "/pools/default/buckets",
            form: [
                ("name", bucket), ("ramQuotaMB", String(ramQuotaMB)), ("authType", authType), ("flushEnabled", "1"),
                ("replicaNumber", String(replicaNumber)),
            ])
        guard c.status == 202 else { throw HarnessError("create bucket: \(c.status) \(c.text)") }
    }
}

/// A minimal HTTP/1.1 client over a plain socket (`Connection: close`, read to EOF). Tests use it
/// instead of URLSession, whose Linux implementation answers 401 challenges on its own.
enum RawHTTP {
    static func send(port: Int, request: URLRequest) throws -> ServerProcess.HTTPResult {
        let client = try TestKVClient(port: port)
        let url = request.url!
        // As written, not `url.path`, which Foundation percent-decodes: `/pools/default/buckets/p%2541q` went out as
        // `.../p%41q`, which the server rightly reads as bucket `pAq` (issue 69's `%` names).
        let written = URLComponents(url: url, resolvingAgainstBaseURL: false)?.percentEncodedPath ?? url.path
        var path = written.isEmpty ? "/" : written
        if let q = url.query { path += "?" + q }
        var head = "\(request.httpMethod ?? "GET") \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
        for (k, v) in request.allHTTPHeaderFields ?? [:] { head += "\(k): \(v)\r\n" }
        let body = request.httpBody ?? Data()
        head += "Content-Length: \(body.count)\r\n\r\n"
        try client.send(bytes: Array(head.utf8) + Array(body))
        let raw = client.readUntilClosed().bytes
        guard let sep = raw.firstRange(of: [13, 10, 13, 10]) else { throw HarnessError("bad HTTP response") }
        let header = String(decoding: raw[..<sep.lowerBound], as: UTF8.self)
        let statusLine = header.split(separator: "\r\n").first ?? ""
        let status = Int(statusLine.split(separator: " ").dropFirst().first ?? "") ?? 0
        var payload = Array(raw[sep.upperBound...])
        if header.lowercased().contains("transfer-encoding: chunked") {
            var decoded: [UInt8] = []
            var rest = payload[...]
            while let lineEnd = rest.firstRange(of: [13, 10]) {
                let size = Int(String(decoding: rest[..<lineEnd.lowerBound], as: UTF8.self), radix: 16) ?? 0
                if size == 0 { break }
                let start = lineEnd.upperBound
                decoded += rest[start..<min(start + size, rest.endIndex)]
                rest = rest[min(start + size + 2, rest.endIndex)...]
            }
            payload = decoded
        }
        return ServerProcess.HTTPResult(status: status, body: Data(payload))
    }
}
