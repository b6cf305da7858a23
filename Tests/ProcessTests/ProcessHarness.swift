import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

// The one harness under every process test: where built executables are, free loopback ports, a child
// process with its output captured, one readiness wait that fails fast when the child exits, and teardown.
// `ServerProcess`, `GatewayProcess`, `RouterProcess`, `LiteProcess`, `runCLI` and the run-to-exit helpers
// are thin shapes over `ChildProcess`; a new launcher should be one too.

/// Errors of the test harness itself (not of the process under test).
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

    /// A fresh path under the system's temporary directory, `settee-<name>-<8 random hex>` (not created).
    static func scratch(_ name: String) -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("settee-\(name)-\(UUID().uuidString.prefix(8))")
    }
}

/// Where a built executable of this package is: `$SETTEE_<NAME>_BIN` when set (`settee-gateway`:
/// `SETTEE_GATEWAY_BIN`, `settee`: `SETTEE_BIN`), else beside `$SETTEE_SERVER_BIN`, else beside the test bundle
/// (where SwiftPM builds the executables), else `.build/debug`.
enum BuiltExecutable {
    static func path(_ name: String) -> String {
        let environment = ProcessInfo.processInfo.environment
        if let path = environment[name.uppercased().replacingOccurrences(of: "-", with: "_") + "_BIN"] {
            return path
        }
        var directories: [URL] = []
        if let server = environment["SETTEE_SERVER_BIN"] {
            directories.append(URL(fileURLWithPath: server).deletingLastPathComponent())
        }
        let bundleDir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        directories += [bundleDir, bundleDir.deletingLastPathComponent()]
        for directory in directories {
            let path = directory.appendingPathComponent(name).path
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return TestOutput.packageRoot.appendingPathComponent(".build/debug/\(name)").path
    }
}

/// Ports this test process has handed out: the kernel may return a just-closed port again, so without this
/// two `freePort()` calls (one node's admin and KV ports, say) can collide and the second bind fails.
private let handedOutPorts = Mutex<Set<Int>>([])

/// A free TCP port on 127.0.0.1 never handed out before in this process.
func freePort() throws -> Int {
    for _ in 0..<100 {
        let port = try Loopback.kernelFreePort()
        if handedOutPorts.withLock({ $0.insert(port).inserted }) { return port }
    }
    throw HarnessError("no fresh free port after 100 tries")
}

/// A TCP socket bound to 127.0.0.1:`port` (0: a port the kernel picks); the caller closes it.
func boundLoopbackSocket(port: Int) throws -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw HarnessError("socket() failed") }
    var addr = Loopback.address(host: "127.0.0.1", port: port)
    let bound = withUnsafePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard bound == 0 else {
        close(fd)
        throw HarnessError("bind() to 127.0.0.1:\(port) failed")
    }
    return fd
}

/// TCP on loopback: the readiness probe every launcher uses.
enum Loopback {
    static func address(host: String, port: Int) -> sockaddr_in {
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(truncatingIfNeeded: port).bigEndian)
        addr.sin_addr.s_addr = inet_addr(host)
        return addr
    }

    /// Whether something accepts a TCP connection on `host:port` now.
    static func canConnect(host: String = "127.0.0.1", port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var addr = address(host: host, port: port)
        return withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        } == 0
    }

    /// Waits until every port accepts connections (for listeners no `ChildProcess` of ours owns).
    static func waitUntilListening(_ ports: [Int], timeout: TimeInterval = 10) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if ports.allSatisfy({ canConnect(port: $0) }) { return }
            usleep(25_000)
        }
        throw HarnessError("nothing listens on \(ports.filter { !canConnect(port: $0) }) after \(timeout) s")
    }

    /// The port a bound socket has (the one the kernel picked for port 0).
    static func localPort(of fd: Int32) -> Int {
        var addr = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        return Int(UInt16(bigEndian: addr.sin_port))
    }

    fileprivate static func kernelFreePort() throws -> Int {
        let fd = try boundLoopbackSocket(port: 0)
        defer { close(fd) }
        return localPort(of: fd)
    }
}

/// Where a child's standard output and error go.
enum ChildOutput: Sendable {
    /// Appended to this file (created if missing), so a restarted process keeps one log; read with `output`.
    case log(URL)
    /// Kept in memory, both streams interleaved as they arrive.
    case collected
    /// Kept in memory, each stream apart (`output` is standard output, `standardError` the other).
    case collectedApart
}

/// A child process a test started. It is SIGKILLed and reaped when dropped, so a failing test leaves
/// nothing running; `stop()` ends it politely first when the test wants the exit status.
final class ChildProcess: Sendable {
    /// The process itself, for the few tests that signal it by pid.
    let process: Process
    let logURL: URL?
    private let name: String
    private let stdout: Collector?
    private let stderr: Collector?

    /// Starts `executable` (a path) with `arguments`. `environment` is laid over this process's environment;
    /// a `nil` value removes the variable.
    init(
        _ executable: String, _ arguments: [String], environment: [String: String?] = [:],
        directory: URL? = nil, output: ChildOutput
    ) throws {
        name = URL(fileURLWithPath: executable).lastPathComponent + (arguments.first.map { " \($0)" } ?? "")
        process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if !environment.isEmpty {
            var merged = ProcessInfo.processInfo.environment
            for (key, value) in environment { merged[key] = value }
            process.environment = merged
        }
        if let directory { process.currentDirectoryURL = directory }
        switch output {
        case .log(let url):
            if !FileManager.default.fileExists(atPath: url.path) {
                _ = FileManager.default.createFile(atPath: url.path, contents: nil)
            }
            let handle = try FileHandle(forWritingTo: url)
            handle.seekToEndOfFile()
            process.standardOutput = handle
            process.standardError = handle
            logURL = url
            stdout = nil
            stderr = nil
        case .collected:
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = pipe
            logURL = nil
            stdout = Collector(pipe)
            stderr = nil
        case .collectedApart:
            let out = Pipe()
            let err = Pipe()
            process.standardOutput = out
            process.standardError = err
            logURL = nil
            stdout = Collector(out)
            stderr = Collector(err)
        }
        try process.run()
        stdout?.start()
        stderr?.start()
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    var isRunning: Bool { process.isRunning }
    /// The exit status (meaningful once the child has exited).
    var status: Int32 { process.terminationStatus }

    /// What the child wrote so far: the log file, or standard output (with standard error when interleaved).
    var output: String {
        if let logURL { return (try? String(contentsOf: logURL, encoding: .utf8)) ?? "" }
        return stdout?.text ?? ""
    }
    /// Standard error when collected apart, else "".
    var standardError: String { stderr?.text ?? "" }

    /// Where to look when something goes wrong: the log's path, or the end of the collected output.
    var evidence: String {
        if let logURL { return "log: \(logURL.path)" }
        return "output:\n\(output.suffix(2000))\(standardError.suffix(2000))"
    }

    /// Polls `ready` every 50 ms until it holds; throws when the child exits first (its status and log say
    /// why) or at `timeout`. A `ready` that throws counts as not ready yet.
    func waitUntilReady(timeout: TimeInterval, _ ready: () throws -> Bool) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            try checkRunning()
            if (try? ready()) == true { return }
            usleep(50_000)
        }
        throw HarnessError("\(name) was not ready within \(timeout) s; \(evidence)")
    }

    /// `waitUntilReady` for checks that suspend (HTTP through AsyncHTTPClient).
    func waitUntilReady(timeout: TimeInterval, _ ready: () async -> Bool) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            try checkRunning()
            if await ready() { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw HarnessError("\(name) was not ready within \(timeout) s; \(evidence)")
    }

    /// Waits until every one of `ports` on 127.0.0.1 accepts connections.
    func waitUntilListening(_ ports: [Int], timeout: TimeInterval) throws {
        try waitUntilReady(timeout: timeout) { ports.allSatisfy { Loopback.canConnect(port: $0) } }
    }

    private func checkRunning() throws {
        if !process.isRunning {
            throw HarnessError("\(name) exited early with status \(process.terminationStatus); \(evidence)")
        }
    }

    /// Waits up to `timeout` for the child to exit; whether it did.
    func waitForExit(timeout: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        return finish()
    }

    /// `waitForExit` without blocking a cooperative thread.
    func waitForExit(timeout: TimeInterval) async -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { try? await Task.sleep(for: .milliseconds(20)) }
        return finish()
    }

    /// Once exited: reaps the child and lets the output readers reach the end of the pipes.
    private func finish() -> Bool {
        if process.isRunning { return false }
        process.waitUntilExit()
        stdout?.waitForEnd()
        stderr?.waitForEnd()
        return true
    }

    /// Sends `signal` (SIGTERM: a graceful stop, SIGKILL: a crash) and reaps the child; its exit status.
    @discardableResult
    func stop(signal: Int32 = SIGTERM) -> Int32 {
        if process.isRunning { kill(process.processIdentifier, signal) }
        process.waitUntilExit()
        _ = finish()
        return process.terminationStatus
    }

    /// A child run to its end.
    struct Finished: Sendable {
        var status: Int32
        /// Standard output, with standard error interleaved unless collected apart (or the log's contents).
        var output: String
        var standardError: String
    }

    /// Runs `executable` to its end and returns its status and output; SIGKILLs it and throws past `timeout`.
    static func run(
        _ executable: String, _ arguments: [String], environment: [String: String?] = [:], directory: URL? = nil,
        output: ChildOutput = .collected, timeout: TimeInterval = 120
    ) throws -> Finished {
        let child = try ChildProcess(
            executable, arguments, environment: environment, directory: directory, output: output)
        guard child.waitForExit(timeout: timeout) else {
            child.stop(signal: SIGKILL)
            throw HarnessError("\(child.name) did not finish within \(timeout) s; \(child.evidence)")
        }
        return Finished(status: child.status, output: child.output, standardError: child.standardError)
    }

    /// `run` without blocking a cooperative thread.
    static func run(
        _ executable: String, _ arguments: [String], environment: [String: String?] = [:], directory: URL? = nil,
        output: ChildOutput = .collected, timeout: TimeInterval = 120
    ) async throws -> Finished {
        let child = try ChildProcess(
            executable, arguments, environment: environment, directory: directory, output: output)
        guard await child.waitForExit(timeout: timeout) else {
            child.stop(signal: SIGKILL)
            throw HarnessError("\(child.name) did not finish within \(timeout) s; \(child.evidence)")
        }
        return Finished(status: child.status, output: child.output, standardError: child.standardError)
    }

    /// Reads one pipe on its own thread as the child writes, so a chatty child never blocks on a full pipe
    /// and tests can watch output arrive (`LiteProcess.waitFor`).
    private final class Collector: Sendable {
        private let handle: FileHandle
        private let bytes = Mutex<[UInt8]>([])
        private let ended = DispatchSemaphore(value: 0)

        init(_ pipe: Pipe) { handle = pipe.fileHandleForReading }

        func start() {
            Thread.detachNewThread { [self] in
                var chunk = [UInt8](repeating: 0, count: 65536)
                while true {
                    let n = chunk.withUnsafeMutableBytes { read(handle.fileDescriptor, $0.baseAddress, $0.count) }
                    if n < 0 && errno == EINTR { continue }
                    if n <= 0 { break }
                    bytes.withLock { $0 += chunk[0..<n] }
                }
                ended.signal()
            }
        }

        var text: String { bytes.withLock { String(decoding: $0, as: UTF8.self) } }

        /// Waits (at most 5 s: a grandchild may hold the pipe open) for end of file; stays signalled.
        func waitForEnd() {
            if ended.wait(timeout: .now() + 5) == .success { ended.signal() }
        }
    }
}
