import Foundation
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The launcher every process test stands on, checked with `/bin/sh` children (no settee build needed).
@Suite(.onTestThreads) struct ProcessHarnessTests {
    /// Proves a run-to-exit returns the child's own status and output, keeps the two streams apart when asked,
    /// lays `environment` over the inherited one (nil removes a variable) and runs in `directory`.
    @Test func runToExitCollectsStatusOutputAndEnvironment() throws {
        let merged = try ChildProcess.run("/bin/sh", ["-c", "echo out; echo err >&2; exit 3"])
        #expect(merged.status == 3)
        #expect(merged.output.contains("out") && merged.output.contains("err"), "\(merged.output)")
        let apart = try ChildProcess.run("/bin/sh", ["-c", "echo out; echo err >&2"], output: .collectedApart)
        #expect(apart.status == 0)
        #expect(apart.output == "out\n" && apart.standardError == "err\n", "\(apart)")
        let env = try ChildProcess.run(
            "/bin/sh", ["-c", "echo \"[$HARNESS_SET][${HOME-unset}]\"; pwd"],
            environment: ["HARNESS_SET": "yes", "HOME": nil], directory: URL(fileURLWithPath: "/tmp"))
        #expect(env.output == "[yes][unset]\n/tmp\n", "\(env.output)")
    }

    /// Proves a child that writes more than a pipe holds (64 KiB) before exiting is not blocked: output is read
    /// as it is written, and all of it arrives.
    @Test func largeOutputIsReadWhileTheChildRuns() throws {
        let run = try ChildProcess.run("/bin/sh", ["-c", "head -c 300000 /dev/zero | tr '\\0' x"], timeout: 30)
        #expect(run.status == 0)
        #expect(run.output.utf8.count == 300_000)
    }

    /// Proves a run past its timeout is killed and reported, not waited on forever. (`exec`: Foundation's
    /// `Process` sees a child's end only once every process holding its descriptors is gone, grandchildren too.)
    @Test func runPastItsTimeoutThrows() throws {
        let started = Date()
        #expect(throws: HarnessError.self) { try ChildProcess.run("/bin/sh", ["-c", "exec sleep 30"], timeout: 0.3) }
        #expect(Date().timeIntervalSince(started) < 10)
    }

    /// Proves the readiness wait fails fast, naming the exit status and the log, when the child exits before it
    /// is ready, and that a log is appended to across starts (a restarted node keeps one log).
    @Test func readinessFailsFastWhenTheChildExitsAndLogsAppend() throws {
        let log = TestOutput.directory.appendingPathComponent("harness-\(getpid())-\(UUID().uuidString.prefix(8)).log")
        defer { try? FileManager.default.removeItem(at: log) }
        let first = try ChildProcess("/bin/sh", ["-c", "echo first; exit 7"], output: .log(log))
        let started = Date()
        do {
            try first.waitUntilReady(timeout: 30) { false }
            Issue.record("readiness wait returned for a child that exited")
        } catch let error as HarnessError {
            #expect(error.description.contains("status 7") && error.description.contains(log.path), "\(error)")
        }
        #expect(Date().timeIntervalSince(started) < 10)
        let second = try ChildProcess("/bin/sh", ["-c", "echo second"], output: .log(log))
        #expect(second.waitForExit(timeout: 30))
        #expect(second.output == "first\nsecond\n", "\(second.output)")
    }

    /// Proves a readiness check on a port passes once the child listens, and `stop(signal:)` ends a running child
    /// and reaps it (SIGKILL: the test runner's ignored SIGTERM is inherited by children that do not handle it).
    @Test func waitsForAListenerAndStops() throws {
        let port = try freePort()
        let child = try ChildProcess(
            "/usr/bin/env",
            [
                "python3", "-c",
                "import socket,time; s=socket.socket(); s.bind(('127.0.0.1',\(port))); "
                    + "s.listen(1); time.sleep(60)",
            ], output: .collected)
        try child.waitUntilListening([port], timeout: 30)
        #expect(Loopback.canConnect(port: port))
        child.stop(signal: SIGKILL)
        #expect(!child.isRunning)
        #expect(child.process.terminationReason == .uncaughtSignal)
    }
}
