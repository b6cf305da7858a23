import Foundation
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The short fault scenario of `make test`: `settee-torture` on 3 nodes with 1 replica, each in its own network
/// namespace, `kill -9` of one node under a durable workload, failed over by hand, restarted and recovered.
/// It proves the harness runs end to end and that this scenario loses no acknowledged durable write, keeps
/// counters and registers consistent and ends with one map everywhere. The full matrix is `make torture`.
/// Network namespaces need root, which CI and our machines have.
@Suite(.serialized, .enabled(if: geteuid() == 0, "settee-torture needs root for network namespaces"), .onTestThreads)
struct TortureProcessTests {
    static var binary: String { BuiltExecutable.path("settee-torture") }

    @Test(.timeLimit(.minutes(4))) func killOneOfThreeLosesNothing() throws {
        let out = TestOutput.directory.appendingPathComponent("torture-kill-\(getpid())").path
        try? FileManager.default.removeItem(atPath: out)
        let run = try ChildProcess.run(
            Self.binary,
            [
                "--nodes", "3", "--replicas", "1", "--scenario", "kill", "--rounds", "1", "--settle-ms", "3000",
                "--fault-ms", "9000", "--processes", "4", "--out", out, "--server-binary", ServerProcess.binary,
            ], timeout: 230)
        #expect(run.status == 0, "settee-torture failed:\n\(run.output)")
        let report = (try? String(contentsOfFile: "\(out)/report.md", encoding: .utf8)) ?? ""
        #expect(report.contains("Verdict: **PASS**"), "report:\n\(report)")
        // The run did real work: thousands of acknowledged inserts were checked, not zero.
        let acknowledged = report.split(separator: "\n").first { $0.contains("acknowledged durable inserts lost") }
        let total = acknowledged.flatMap { line in
            line.split(separator: " ").compactMap { Int($0) }.dropFirst().first
        }
        #expect((total ?? 0) > 100, "too few acknowledged inserts: \(acknowledged ?? "none")")
    }
}
