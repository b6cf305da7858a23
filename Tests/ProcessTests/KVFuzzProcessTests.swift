import Foundation
import NIOCore
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The KV port's request handling under fuzzed frames (`docs/internals/fuzzing.md`, target `kv-wire`):
/// a real `settee-server` on loopback, one anonymous connection per input (SELECT_BUCKET of an
/// open bucket, then the input's bytes, then a half-close), and the process must still run after each.
@Suite(.onTestThreads) struct KVFuzzProcessTests {
    @Test func kvPortSurvivesFuzzedFrames() async throws {
        // Proves every fuzzed byte sequence on a selected-bucket connection gets answers or a closed
        // connection, never a dead node: decoding, shape checks and every data/DCP/stats opcode's
        // handling run in the server, and a crash would show as the process gone.
        guard Fuzz.selected("kv-wire") else { return }
        let server = try ServerProcess(name: "kvfuzz")
        try server.start()
        defer { server.stopAndRemove() }
        try server.initialize(bucket: "demo", authType: "none")
        let port = server.kvPort
        let pid = server.process?.processIdentifier ?? 0
        // Alive: /proc has the process and it is not a zombie (state after the ") " of /proc/PID/stat).
        let alive: @Sendable () -> Bool = {
            guard pid > 0, let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return false }
            return stat[close...].dropFirst(2).first != "Z"
        }
        let target = FuzzTarget(
            name: "kv-wire", defaultIterations: 400,
            dictionary: [[0x80], [0x08], [0x00], [0x01], [0x05], [0x1f], [0x53], [0x89], [0x92], [0xa0], [0xff, 0xff]]
        ) { input in
            guard alive() else { throw FuzzFinding("settee-server is not running") }
            let c = try TestKVClient(port: port, timeoutSeconds: 3)
            guard try c.request(.selectBucket, key: "demo").status == .success else { return }
            try? c.send(bytes: input)
            shutdown(c.fd, Int32(SHUT_WR))
            _ = c.isClosedByServer()
            if !alive() { throw FuzzFinding("settee-server died") }
        }
        let report = await Fuzz.run(target)
        #expect(alive(), "settee-server died; log: \(server.logURL.path)")
        for f in report.findings.prefix(3) {
            let path = Fuzz.corpusRoot.appendingPathComponent("kv-wire/crash-\(report.seed)-\(f.input.count)")
            try? Data(f.input).write(to: path)
            Issue.record("kv-wire seed \(report.seed): \(f.reason); input saved to \(path.path)")
        }
        #expect(report.executions >= report.corpusFiles)
    }
}
