import Foundation
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The README's example blocks, read from the README itself (a fenced block after `<!-- example: NAME ... -->`)
/// and run with bash against processes this test starts, only the fixed ports and paths rewritten to the runtime
/// ones. A README edit that breaks an example breaks this test.
enum ReadmeExamples {
    /// Every example block in the README's order: its name and its commands, one per line, `\` continuations
    /// joined, comment-only lines dropped (a command keeps its trailing comment: bash ignores it).
    static func blocks() throws -> [(name: String, commands: [String])] {
        let text = try String(
            contentsOf: TestOutput.packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let lines = text.components(separatedBy: "\n")
        var blocks: [(name: String, commands: [String])] = []
        for (marker, line) in lines.enumerated() where line.hasPrefix("<!-- example: ") {
            let name = String(line.dropFirst("<!-- example: ".count).prefix { $0 != " " })
            guard marker + 1 < lines.count, lines[marker + 1].hasPrefix("```") else {
                throw HarnessError("README example \(name) is not followed by a fenced block")
            }
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
            blocks.append((name, out))
        }
        return blocks
    }

    /// The commands of example `name` (see `blocks()`).
    static func commands(_ name: String) throws -> [String] {
        guard let block = try blocks().first(where: { $0.name == name }) else {
            throw HarnessError("README has no example block \(name)")
        }
        return block.commands
    }

    /// Whether the README marks `command` as one that serves until stopped (its comment says `another shell`):
    /// a reader starts it in a new terminal and goes on, so the test starts it in the background.
    static func servesUntilStopped(_ command: String) -> Bool {
        guard let comment = command.range(of: " # ") else { return false }
        return command[comment.upperBound...].contains("another shell")
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
    /// Only a command whose own comment says `another shell` is started in the background; the words elsewhere in
    /// the command (an argument) or a comment without them leave it a command run to its end.
    @Test func onlyCommandsMarkedAnotherShellServeUntilStopped() {
        #expect(ReadmeExamples.servesUntilStopped("settee-lite --db ./phone list --live   # another shell: ... images"))
        #expect(!ReadmeExamples.servesUntilStopped("settee-lite --db ./console start --once URL   # one shot"))
        #expect(!ReadmeExamples.servesUntilStopped("echo 'another shell'"))
    }

    @Test func rewritesNeverRewriteAReplacement() {
        // Proves the port rewrite is one pass: an admin port that starts with the gateway's README port (49845 starts
        // with 4984) stays whole instead of being rewritten again as the gateway's.
        let rewrites = [("127.0.0.1:8091", "127.0.0.1:49845"), ("127.0.0.1:4984", "127.0.0.1:44123")]
        let line = "curl http://127.0.0.1:8091/pools && curl http://127.0.0.1:4984/demo"
        #expect(
            ReadmeExamples.rewrite(line, rewrites)
                == "curl http://127.0.0.1:49845/pools && curl http://127.0.0.1:44123/demo")
    }
}
