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
    private(set) var process: Process?

    static var binary: String {
        if let env = ProcessInfo.processInfo.environment["SETTEE_GATEWAY_BIN"] { return env }
        let bundleDir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        for candidate in [bundleDir, bundleDir.deletingLastPathComponent()] {
            let path = candidate.appendingPathComponent("settee-gateway").path
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return TestOutput.packageRoot.appendingPathComponent(".build/debug/settee-gateway").path
    }

    /// The seeds' config files (Tests/GatewayFixtures).
    static func fixture(_ name: String) throws -> String {
        let url = TestOutput.packageRoot.appendingPathComponent("Tests/GatewayFixtures/\(name)")
        return try String(contentsOf: url, encoding: .utf8)
    }

    init(name: String, config: String) throws {
        port = try freePort()
        adminPort = try freePort()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "settee-gw-\(name)-\(UUID().uuidString.prefix(8))")
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

    /// Starts the gateway and waits until both listeners accept connections.
    func start(timeout: TimeInterval = 120) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Self.binary)
        p.arguments = arguments
        _ = FileManager.default.createFile(atPath: logURL.path, contents: nil)
        let log = try FileHandle(forWritingTo: logURL)
        p.standardOutput = log
        p.standardError = log
        try p.run()
        process = p
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if !p.isRunning {
                throw HarnessError("settee-gateway exited early with \(p.terminationStatus); log: \(logURL.path)")
            }
            if Self.canConnect(host: "127.0.0.1", port: port) && Self.canConnect(host: "127.0.0.1", port: adminPort) {
                return
            }
            usleep(50_000)
        }
        throw HarnessError("settee-gateway did not start within \(timeout)s; log: \(logURL.path)")
    }

    /// Runs the gateway to completion (for configs that must be refused): exit status and output.
    func runToExit(timeout: TimeInterval = 60) throws -> (status: Int32, output: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Self.binary)
        p.arguments = arguments
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = pipe
        try p.run()
        let deadline = Date().addingTimeInterval(timeout)
        while p.isRunning && Date() < deadline { usleep(20_000) }
        if p.isRunning {
            kill(p.processIdentifier, SIGKILL)
            p.waitUntilExit()
            throw HarnessError("settee-gateway kept running with a config it should refuse")
        }
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        return (p.terminationStatus, output)
    }

    static func canConnect(host: String, port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        addr.sin_addr.s_addr = inet_addr(host)
        return withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        } == 0
    }

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
