import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

#if canImport(Glibc)
    import Glibc
#endif

/// A real `settee-gateway` process on 127.0.0.1 with free public and admin ports, its config written to
/// a temporary directory. Killed when the test ends if the test did not stop it.
final class GatewayProcess {
    let port: Int
    let adminPort: Int
    let directory: URL
    let configURL: URL
    let logURL: URL
    private var child: ChildProcess?
    /// The running process (nil before `start` and after `stop`).
    var process: Process? { child?.process }

    static var binary: String { BuiltExecutable.path("settee-gateway") }

    /// The seeds' config files (Tests/GatewayFixtures).
    static func fixture(_ name: String) throws -> String {
        let url = TestOutput.packageRoot.appendingPathComponent("Tests/GatewayFixtures/\(name)")
        return try String(contentsOf: url, encoding: .utf8)
    }

    init(name: String, config: String) throws {
        port = try freePort()
        adminPort = try freePort()
        directory = TestOutput.scratch("gw-\(name)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        configURL = directory.appendingPathComponent("sync-gateway-config.json")
        try Data(config.utf8).write(to: configURL)
        logURL = TestOutput.directory.appendingPathComponent("gateway-\(name)-\(port).log")
    }

    /// More `settee-gateway` flags, appended to the defaults.
    var extraArguments: [String] = []

    var arguments: [String] {
        [
            configURL.path, "--interface", "127.0.0.1:\(port)", "--admin-interface", "127.0.0.1:\(adminPort)",
        ] + extraArguments
    }

    /// Starts the gateway (its output appended to `logURL`) and waits until both listeners accept connections
    /// and `ready` holds.
    func start(timeout: TimeInterval = 120, until ready: () throws -> Bool = { true }) throws {
        let child = try ChildProcess(Self.binary, arguments, output: .log(logURL))
        self.child = child
        let ports = [port, adminPort]
        try child.waitUntilReady(timeout: timeout) { try ports.allSatisfy { Loopback.canConnect(port: $0) } && ready() }
    }

    /// `start` for readiness checks that suspend (HTTP through AsyncHTTPClient).
    func start(timeout: TimeInterval = 120, until ready: () async -> Bool) async throws {
        let child = try ChildProcess(Self.binary, arguments, output: .log(logURL))
        self.child = child
        try await child.waitUntilReady(timeout: timeout, ready)
    }

    /// Runs the gateway to completion (for configs that must be refused): exit status and output.
    func runToExit(timeout: TimeInterval = 60) throws -> (status: Int32, output: String) {
        let run = try ChildProcess.run(Self.binary, arguments, timeout: timeout)
        return (run.status, run.output)
    }

    static func canConnect(host: String, port: Int) -> Bool { Loopback.canConnect(host: host, port: port) }

    @discardableResult
    func stop() -> Int32 {
        guard let child else { return 0 }
        self.child = nil
        return child.stop()
    }

    /// SIGKILLs the gateway (no shutdown at all) and reaps it; `start()` runs it again on the same ports.
    func crash() {
        child?.stop(signal: SIGKILL)
        child = nil
    }

    deinit {
        child?.stop(signal: SIGKILL)
        try? FileManager.default.removeItem(at: directory)
    }
}

/// A small HTTP client for gateway tests (AsyncHTTPClient; bodies collected whole unless streamed).
struct GatewayHTTP {
    struct Reply {
        var status: Int
        var headers: HTTPHeaders
        var body: [UInt8]
        var text: String { String(decoding: body, as: UTF8.self) }
        func header(_ name: String) -> String? { headers.first(name: name) }
    }

    static let client = HTTPClient(eventLoopGroupProvider: .singleton)

    static func basic(_ user: String, _ password: String) -> (String, String) {
        ("Authorization", "Basic " + Data("\(user):\(password)".utf8).base64EncodedString())
    }

    static func request(
        _ method: HTTPMethod, _ url: String, body: [UInt8]? = nil, headers: [(String, String)] = [],
        timeout: TimeAmount = .seconds(60)
    ) async throws -> Reply {
        var req = HTTPClientRequest(url: url)
        req.method = method
        for (k, v) in headers { req.headers.add(name: k, value: v) }
        if let body {
            if !headers.contains(where: { $0.0.lowercased() == "content-type" }) {
                req.headers.add(name: "Content-Type", value: "application/json")
            }
            req.body = .bytes(ByteBuffer(bytes: body))
        }
        let response = try await client.execute(req, timeout: timeout)
        let collected = try await response.body.collect(upTo: 64 << 20)
        return Reply(
            status: Int(response.status.code), headers: response.headers, body: Array(collected.readableBytesView))
    }
}
