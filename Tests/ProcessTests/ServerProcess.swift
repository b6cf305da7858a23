import Foundation
import NIOCore
import SetteeTestSupport
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#endif

/// Errors of the test harness itself (not of the server under test).
struct HarnessError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

/// Where process tests put logs and artefacts: `test-output/` at the package root (git-ignored).
enum TestOutput {
    static let packageRoot: URL = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url
    }()
    static let directory: URL = {
        let dir = packageRoot.appendingPathComponent("test-output")
        try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir
    }()
}

/// Picks a free TCP port on 127.0.0.1 by binding port 0 and closing the socket.
/// Ports this test process has handed out: the kernel may return a just-closed port again, so without this
/// two `freePort()` calls (one node's admin and KV ports, say) can collide and the second bind fails.
private let handedOutPorts = Mutex<Set<Int>>([])

/// A free TCP port on 127.0.0.1 never handed out before in this process.
func freePort() throws -> Int {
    for _ in 0..<100 {
        let port = try kernelFreePort()
        if handedOutPorts.withLock({ $0.insert(port).inserted }) { return port }
    }
    throw HarnessError("no fresh free port after 100 tries")
}

/// A TCP socket bound to 127.0.0.1:`port` (0: a port the kernel picks); the caller closes it.
func boundLoopbackSocket(port: Int) throws -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw HarnessError("socket() failed") }
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = in_port_t(UInt16(port).bigEndian)
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    let bound = withUnsafePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard bound == 0 else {
        close(fd)
        throw HarnessError("bind() to 127.0.0.1:\(port) failed")
    }
    return fd
}

private func kernelFreePort() throws -> Int {
    let fd = try boundLoopbackSocket(port: 0)
    defer { close(fd) }
    var addr = sockaddr_in()
    var len = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
    }
    return Int(UInt16(bigEndian: addr.sin_port))
}

/// A real `settee-server` process on loopback with ports chosen at runtime. Stopped (SIGTERM, then
/// SIGKILL) when the test ends, if the test did not stop it itself.
final class ServerProcess {
    let dataDir: String
    let adminPort: Int
    let kvPort: Int
    let viewsPort: Int
    let logURL: URL
    private(set) var process: Process?
    /// More `settee-server` flags, appended to the defaults.
    var extraArguments: [String] = []
    let user = "Administrator"
    let password = "password"

    static var binary: String {
        if let env = ProcessInfo.processInfo.environment["SETTEE_SERVER_BIN"] { return env }
        // The test bundle sits in the build directory beside the executables.
        let bundleDir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        for candidate in [bundleDir, bundleDir.deletingLastPathComponent()] {
            let path = candidate.appendingPathComponent("settee-server").path
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return TestOutput.packageRoot.appendingPathComponent(".build/debug/settee-server").path
    }

    init(name: String, dataDir: String? = nil) throws {
        self.dataDir =
            dataDir
            ?? FileManager.default.temporaryDirectory
            .appendingPathComponent("settee-\(name)-\(UUID().uuidString.prefix(8))").path
        adminPort = try freePort()
        kvPort = try freePort()
        viewsPort = try freePort()
        logURL = TestOutput.directory.appendingPathComponent("\(name)-\(adminPort).log")
    }

    /// Starts the process and waits until both the admin API and the KV port accept connections.
    func start(timeout: TimeInterval = 120) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Self.binary)
        p.arguments =
            [
                "--data-dir", dataDir, "--host", "127.0.0.1", "--admin-port", String(adminPort), "--kv-port",
                String(kvPort), "--views-port", String(viewsPort), "--kv-threads", "1",
            ] + extraArguments
        if !FileManager.default.fileExists(atPath: logURL.path) {
            _ = FileManager.default.createFile(atPath: logURL.path, contents: nil)
        }
        let log = try FileHandle(forWritingTo: logURL)
        log.seekToEndOfFile()
        p.standardOutput = log
        p.standardError = log
        try p.run()
        process = p
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if !p.isRunning {
                throw HarnessError("settee-server exited early with \(p.terminationStatus); log: \(logURL.path)")
            }
            if canConnect(port: adminPort) && canConnect(port: kvPort) { return }
            usleep(50_000)
        }
        throw HarnessError("settee-server did not start within \(timeout)s; log: \(logURL.path)")
    }

    private func canConnect(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        } == 0
    }

    /// SIGKILL: no flush, no goodbye.
    func kill9() {
        guard let p = process, p.isRunning else { return }
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
        process = nil
    }

    /// SIGTERM and wait; returns the exit status.
    @discardableResult
    func stop() -> Int32 {
        guard let p = process else { return 0 }
        if p.isRunning { kill(p.processIdentifier, SIGTERM) }
        p.waitUntilExit()
        process = nil
        return p.terminationStatus
    }

    deinit {
        if let p = process, p.isRunning {
            kill(p.processIdentifier, SIGKILL)
            p.waitUntilExit()
        }
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
        var path = url.path.isEmpty ? "/" : url.path
        if let q = url.query { path += "?" + q }
        var head = "\(request.httpMethod ?? "GET") \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
        for (k, v) in request.allHTTPHeaderFields ?? [:] { head += "\(k): \(v)\r\n" }
        let body = request.httpBody ?? Data()
        head += "Content-Length: \(body.count)\r\n\r\n"
        try client.send(bytes: Array(head.utf8) + Array(body))
        var raw: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(client.fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            raw += chunk[0..<n]
        }
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
