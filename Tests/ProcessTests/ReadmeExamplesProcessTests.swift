import Foundation
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The README's example blocks, read from the README itself (a fenced block after `<!-- example: NAME ... -->`)
/// and run with bash against processes this test starts, only the fixed ports rewritten to the runtime ones. A
/// README edit that breaks an example breaks this test.
enum ReadmeExamples {
    /// The commands of example `name`: one per line, `\` continuations joined, comment-only lines dropped.
    static func commands(_ name: String) throws -> [String] {
        let text = try String(
            contentsOf: TestOutput.packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let lines = text.components(separatedBy: "\n")
        guard let marker = lines.firstIndex(where: { $0.hasPrefix("<!-- example: \(name) ") }),
            marker + 1 < lines.count, lines[marker + 1].hasPrefix("```")
        else { throw HarnessError("README has no example block \(name)") }
        var out: [String] = []
        var pending = ""
        for line in lines[(marker + 2)...] {
            if line.hasPrefix("```") { break }
            if line.hasSuffix("\\") {
                pending += String(line.dropLast()) + " "
                continue
            }
            let command = (pending + line).trimmingCharacters(in: .whitespaces)
            pending = ""
            if command.isEmpty || command.hasPrefix("#") { continue }
            out.append(command)
        }
        return out
    }

    /// `command` with every `from` replaced by its `to`.
    /// One pass over `command`: at each position the first pattern of `ports` found there is replaced and the scan
    /// goes on after it, so a replacement is never rewritten again. (Applied one after another, a runtime admin port
    /// such as 49845 became `127.0.0.1:4984` + `5` for the gateway's rewrite, and the README test's curl got the URL
    /// `127.0.0.1:441235`: a CI rehearsal failed on it.)
    static func rewrite(_ command: String, _ ports: [(String, String)]) -> String {
        var out = ""
        var rest = Substring(command)
        scan: while !rest.isEmpty {
            for (pattern, replacement) in ports where !pattern.isEmpty && rest.hasPrefix(pattern) {
                out += replacement
                rest = rest.dropFirst(pattern.count)
                continue scan
            }
            out.append(rest.removeFirst())
        }
        return out
    }

    /// Runs `command` with bash in the package root, the built executables first on PATH; status and output.
    static func run(_ command: String, timeout: TimeInterval = 60) throws -> (status: Int32, output: String) {
        let run = try ChildProcess.run(
            "/bin/bash", ["-c", command], environment: shellPath, directory: TestOutput.packageRoot, timeout: timeout)
        return (run.status, run.output)
    }

    /// PATH with the built executables first, as a reader who followed the README has it.
    static var shellPath: [String: String?] {
        let bin = URL(fileURLWithPath: ServerProcess.binary).deletingLastPathComponent().path
        return ["PATH": bin + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")]
    }
}

@Suite("README examples (real processes)", .serialized, .onTestThreads)
struct ReadmeExamplesProcessTests {
    /// The single-node block: initialise the admin, create `demo` without a password and with flush, then
    /// `memccapable -b` against the KV port passes every case but FLUSH and FLUSHQ (memccapable does not log in,
    /// and an anonymous connection may not flush).
    @Test func rewritesNeverRewriteAReplacement() {
        // Proves the port rewrite is one pass: an admin port that starts with the gateway's README port (49845 starts
        // with 4984) stays whole instead of being rewritten again as the gateway's.
        let rewrites = [("127.0.0.1:8091", "127.0.0.1:49845"), ("127.0.0.1:4984", "127.0.0.1:44123")]
        let line = "curl http://127.0.0.1:8091/pools && curl http://127.0.0.1:4984/demo"
        #expect(
            ReadmeExamples.rewrite(line, rewrites)
                == "curl http://127.0.0.1:49845/pools && curl http://127.0.0.1:44123/demo")
    }

    @Test func singleNodeBlock() throws {
        let server = try ServerProcess(name: "readme-single")
        defer { server.stopAndRemove() }
        try server.start()
        let commands = try ReadmeExamples.commands("single-node")
        #expect(commands.count == 3, "\(commands)")
        let ports = [("127.0.0.1:8091", "127.0.0.1:\(server.adminPort)"), ("-p 11210", "-p \(server.kvPort)")]
        for command in commands {
            let line = ReadmeExamples.rewrite(command, ports)
            #expect(line != command, "no fixed port to rewrite in: \(command)")
            let (status, output) = try ReadmeExamples.run(line)
            if command.hasPrefix("memccapable") {
                let failed = output.split(separator: "\n").filter { $0.hasSuffix("[FAIL]") }.compactMap {
                    $0.split(separator: " ").dropFirst().first.map(String.init)
                }
                #expect(Set(failed) == ["flush", "flushq"], "\(output)")
                #expect(output.contains("[pass]"))
            } else {
                #expect(status == 0, "\(line): \(output)")
            }
        }
        let bucket = try server.http("GET", "/pools/default/buckets/demo")
        #expect(bucket.status == 200)
        let json = ClusterHarness.json(bucket)
        #expect((json["controllers"] as? [String: Any])?["flush"] != nil)
    }

    /// The gateway block: seed 001's config served on the example's ports (rewritten to free ones), jane's PUT
    /// with its Content-Type answers 201, and joe's longpoll `_changes` never shows jane's private doc1.
    @Test func gatewaySeed001Block() throws {
        let commands = try ReadmeExamples.commands("gateway-seed001")
        #expect(commands.count == 3, "\(commands)")
        guard commands.count == 3, commands[0].hasPrefix("settee-gateway ") else { return }
        let port = try freePort()
        let adminPort = try freePort()
        let ports = [
            ("127.0.0.1:4994", "127.0.0.1:\(port)"), ("127.0.0.1:4995", "127.0.0.1:\(adminPort)"),
            ("localhost:4994", "localhost:\(port)"),
        ]
        // The first command serves until stopped: run it in the background, as a reader would in another shell.
        let gateway = try ChildProcess(
            "/bin/bash", ["-c", "exec " + ReadmeExamples.rewrite(commands[0], ports)],
            environment: ReadmeExamples.shellPath, directory: TestOutput.packageRoot,
            output: .log(TestOutput.directory.appendingPathComponent("readme-gateway-\(port).log")))
        defer { gateway.stop() }
        try gateway.waitUntilListening([port], timeout: 60)

        let put = try ReadmeExamples.run(ReadmeExamples.rewrite(commands[1], ports))
        #expect(
            put.status == 0 && put.output.contains(#""ok":true"#) && put.output.contains(#""id":"doc1""#),
            "\(put.output)")
        let changes = try ReadmeExamples.run(ReadmeExamples.rewrite(commands[2], ports))
        #expect(changes.status == 0 && changes.output.contains("\"results\""), "\(changes.output)")
        #expect(!changes.output.contains("doc1"), "\(changes.output)")
    }
}
