import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// README commands run as a reader runs them in a shell, beyond `ReadmeExamples.run`: with the variables a
/// reader would have exported, in a working directory of the test's own, and in the background for the
/// commands that serve until stopped (a reader's second shell).
extension ReadmeExamples {
    /// The directory of the built executables: first on PATH for every README command.
    static var binDirectory: String { URL(fileURLWithPath: ServerProcess.binary).deletingLastPathComponent().path }

    /// `shellPath` (the built executables first on PATH) with `extra` laid over it.
    static func environment(_ extra: [String: String]) -> [String: String?] {
        shellPath.merging(extra.mapValues { Optional($0) }) { _, new in new }
    }

    /// Runs `command` with bash to its end, in `directory` (default: the package root); `output` is its standard
    /// output alone (curl's progress meter and other notes go to `standardError`).
    static func shell(
        _ command: String, _ extra: [String: String] = [:], in directory: URL? = nil, timeout: TimeInterval = 60
    ) throws -> ChildProcess.Finished {
        try ChildProcess.run(
            "/bin/bash", ["-c", command], environment: environment(extra),
            directory: directory ?? TestOutput.packageRoot, output: .collectedApart, timeout: timeout)
    }

    /// Starts `command` with bash in the background; its output goes to `test-output/readme-NAME-….log`.
    static func background(
        _ command: String, name: String, _ extra: [String: String] = [:], in directory: URL? = nil
    ) throws -> ChildProcess {
        let log = TestOutput.directory.appendingPathComponent("readme-\(name)-\(UUID().uuidString.prefix(6)).log")
        return try ChildProcess(
            "/bin/bash", ["-c", "exec " + command], environment: environment(extra),
            directory: directory ?? TestOutput.packageRoot, output: .log(log))
    }

    /// Polls `check` every 100 ms until it holds or `seconds` pass; whether it held.
    static func eventually(_ seconds: TimeInterval, _ check: () throws -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        repeat {
            if (try? check()) == true { return true }
            usleep(100_000)
        } while Date() < deadline
        return false
    }

    /// Base ports for `cluster/up`, which gives node i the base + 10 * i: admin, KV and views bases whose first
    /// `nodes` rungs are all free now and distinct from each other.
    static func clusterBasePorts(nodes: Int) throws -> (admin: Int, kv: Int, views: Int) {
        var bases: [Int] = []
        var taken: Set<Int> = []
        for _ in 0..<200 where bases.count < 3 {
            let base = try freePort()
            let rungs = (0..<nodes).map { base + 10 * $0 }
            let free = rungs.allSatisfy { port in
                guard port < 65_536, !taken.contains(port) else { return false }
                if port == base { return true }
                guard let fd = try? boundLoopbackSocket(port: port) else { return false }
                close(fd)
                return true
            }
            if free {
                bases.append(base)
                taken.formUnion(rungs)
            }
        }
        guard bases.count == 3 else { throw HarnessError("no free port ladders for \(nodes) nodes") }
        return (bases[0], bases[1], bases[2])
    }
}

extension ReadmeExamplesProcessTests {
    /// Every example block of the README, top to bottom, as one sequence: what a new user runs in the first hour, in
    /// the package root, exactly as printed but for the fixed ports and paths, rewritten to runtime ones (cluster/up's
    /// SETTEE_BASE_*_PORT and gateway port variables, the data directory and the Lite databases in a scratch
    /// directory, the test build's executables on PATH in place of `.build/release`). A command whose comment says
    /// `another shell` starts in the background, as in a reader's second terminal, and the sequence goes on once it
    /// listens (or prints what the next command needs). Each command's output is checked, not only its status; an
    /// example command this test has no check for fails it. The per-command times are printed (the README's
    /// comments quote them).
    @Test func everyExampleInOrder() throws {
        let blocks = try ReadmeExamples.blocks()
        #expect(blocks.map(\.name) == ["cluster", "single-node", "gateway-seed001", "lite", "stop"])
        let data = TestOutput.scratch("readme")
        try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
        let ports = try ReadmeExamples.clusterBasePorts(nodes: 4)
        let gatewayPort = try freePort()
        let single = (admin: try freePort(), kv: try freePort(), views: try freePort(), router: try freePort())
        let seed = (port: try freePort(), admin: try freePort())
        let env = [
            "SETTEE_BASE_ADMIN_PORT": "\(ports.admin)", "SETTEE_BASE_KV_PORT": "\(ports.kv)",
            "SETTEE_BASE_VIEWS_PORT": "\(ports.views)", "SETTEE_SERVER_BIN": ServerProcess.binary,
            "SETTEE_CLUSTER_DATA": data.path, "SETTEE_GATEWAY_BIN": GatewayProcess.binary,
            "SETTEE_GATEWAY_PORT": "\(gatewayPort)", "SETTEE_GATEWAY_ADMIN_PORT": "\(try freePort())",
            "SETTEE_CLUSTER": "http://127.0.0.1:\(ports.admin)", "SETTEE_BIN": BuiltExecutable.path("settee"),
        ]
        var rewrites = [
            ("127.0.0.1:8091", "127.0.0.1:\(ports.admin)"), ("127.0.0.1:4984", "127.0.0.1:\(gatewayPort)"),
            ("cluster/data/", data.path + "/"), ("$PWD/.build/release", ReadmeExamples.binDirectory),
            ("127.0.0.1:9091", "127.0.0.1:\(single.admin)"), ("--admin-port 9091", "--admin-port \(single.admin)"),
            ("--kv-port 12210", "--kv-port \(single.kv)"), ("--views-port 9092", "--views-port \(single.views)"),
            ("127.0.0.1:11311", "127.0.0.1:\(single.router)"), ("-p 11311", "-p \(single.router)"),
            ("127.0.0.1:4994", "127.0.0.1:\(seed.port)"), ("127.0.0.1:4995", "127.0.0.1:\(seed.admin)"),
            ("localhost:4994", "localhost:\(seed.port)"),
        ]
        for db in ["console", "phone", "peerA", "peerB"] { rewrites.append(("./\(db)", data.path + "/\(db)")) }
        let photos = ["photo1.jpg", "photo2.jpg"].map {
            FileManager.default.contents(
                atPath: TestOutput.packageRoot.appendingPathComponent("docs/examples/\($0)").path)
        }
        var running: [ChildProcess] = []
        defer {
            for child in running { child.stop() }
            Self.tearDownCluster(data, env)
        }
        var statusCalls = 0
        var timings: [(seconds: Double, command: String)] = []
        var checked = 0
        let started = Date()
        for (_, commands) in blocks {
            for command in commands {
                let line = ReadmeExamples.rewrite(command, rewrites)
                let t0 = Date()
                defer { timings.append((Date().timeIntervalSince(t0), String(command.prefix(60)))) }
                if ReadmeExamples.servesUntilStopped(command) {
                    let name = String(command.prefix { $0 != " " })
                    let child = try ReadmeExamples.background(line, name: name, env)
                    running.append(child)
                    if command.hasPrefix("settee-server ") {
                        try child.waitUntilListening([single.admin, single.kv], timeout: 120)
                    } else if command.hasPrefix("settee-router ") {
                        try child.waitUntilListening([single.router], timeout: 60)
                    } else if command.hasPrefix("settee-gateway ") {
                        try child.waitUntilListening([seed.port], timeout: 60)
                    } else if command.contains(" start http") {
                        // The phone's continuous replication: its live list (next) shows what it pulled.
                        #expect(command.contains("./phone"))
                    } else if command.contains(" list --live") {
                        // Both images, newest first, with their sizes, once the phone pulled them.
                        var rows: [[String]] = []
                        let shown = ReadmeExamples.eventually(120) {
                            let last = child.output.components(separatedBy: "-- 2 image(s)").dropFirst().last ?? ""
                            rows = last.split(separator: "\n").map { $0.split(separator: "\t").map(String.init) }
                                .filter { $0.count == 5 }
                            return rows.count >= 2
                        }
                        #expect(shown, "list: \(child.output)\nphone: \(running.map(\.output).joined(separator: "\n"))")
                        #expect(rows.map { $0[2] } == ["photo2.jpg", "photo1.jpg"], "\(child.output)")
                        #expect(rows.map { Int($0[3]) } == [photos[1]?.count, photos[0]?.count], "\(child.output)")
                    } else if command.contains(" receive") {
                        // The reader waits for the URL, which `send` (next) reads from the file beside the QR code.
                        let file = data.appendingPathComponent("peerB/sync-url.txt").path
                        let ready = ReadmeExamples.eventually(60) {
                            child.output.contains("QR code saved as") && FileManager.default.fileExists(atPath: file)
                        }
                        let url = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
                        #expect(
                            ready && child.output.contains("sync URL: \(url.trimmingCharacters(in: .newlines))"),
                            "\(child.output)")
                    } else {
                        Issue.record("no check for README command: \(command)")
                        continue
                    }
                    checked += 1
                    continue
                }
                if command.hasPrefix("make cluster-down") { Self.printPeakMemory(data) }
                var run = try ReadmeExamples.shell(line, env, timeout: 240)
                let out = run.output
                let failure = "\(line): \(out) \(run.standardError)"
                #expect(run.status == 0, "\(failure)")
                if command.hasPrefix("cluster/up 3") {
                    #expect(out.contains("Settee is running (3 node(s))") && out.contains("gateway started"), "\(out)")
                    #expect(out.contains("export PATH=\(ReadmeExamples.binDirectory):$PATH"), "\(out)")
                } else if command.hasPrefix("export PATH=") {
                    #expect(line.contains(ReadmeExamples.binDirectory))
                } else if command.contains("/pools/default/buckets/demo") {
                    // curl's progress meter (standard error, not a terminal) comes around the body.
                    let body = out.firstIndex(of: "{").flatMap { start in
                        out.lastIndex(of: "}").map { out[start...$0] }
                    }
                    let bucket = (try? JSONSerialization.jsonObject(with: Data((body ?? "").utf8))) as? [String: Any]
                    let map = bucket?["vBucketServerMap"] as? [String: Any]
                    #expect((map?["serverList"] as? [Any])?.count == 3, "\(out.prefix(500))")
                    #expect(bucket?["replicaNumber"] as? Int == 1)
                } else if command.contains("/ui/") {
                    #expect(out.contains("<title>Settee Console</title>"), "\(failure)")
                } else if command.hasPrefix("settee kv set") {
                    #expect(out.contains("OK cas=") && out.contains(#""name":"jane""#), "\(out)")
                } else if command.hasPrefix("curl http://127.0.0.1:4984/demo/user::1") {
                    // The gateway imports from the bucket's change stream: a reader who sees 404 asks again.
                    _ = ReadmeExamples.eventually(20) {
                        run = try ReadmeExamples.shell(line, env)
                        return run.output.contains(#""_id":"user::1""#)
                    }
                    #expect(
                        run.output.contains(#""_id":"user::1""#) && run.output.contains(#""name":"jane""#),
                        "\(run.output)")
                } else if command.hasPrefix("cluster/add 1") {
                    #expect(out.components(separatedBy: "active healthy").count - 1 == 4, "\(out)")
                } else if command.hasPrefix("kill -9") {
                    #expect(line.contains(data.path + "/n1.pid"))
                } else if command.contains("/controller/failOver") {
                    let pool = try ReadmeExamples.shell(
                        "curl -s -u Administrator:password http://127.0.0.1:\(ports.admin)/pools/default", env)
                    #expect(
                        pool.output.contains(#""clusterMembership":"inactiveFailed""#) && out.isEmpty,
                        "\(out) \(pool.output.prefix(800))")
                } else if command.hasPrefix("settee kv get user::1") {
                    // The gateway imported the document (above) with shared bucket access, `cluster/up`'s layout:
                    // the body stays the application's, its metadata in the `_sync` XATTR.
                    #expect(out.contains(#""name":"jane""#) && !out.contains("_sync"), "after the failover: \(out)")
                } else if command.hasPrefix("cluster/status") {
                    statusCalls += 1
                    let rows = out.split(separator: "\n").filter { $0.hasPrefix("n") && $0.contains("@127.0.0.1") }
                    let n1 = rows.first { $0.hasPrefix("n1@") }.map(String.init) ?? ""
                    switch statusCalls {
                    case 1:
                        // Killed a moment ago: whatever the cluster's heartbeats say yet, the probe tells.
                        #expect(out.contains("4 node(s)") && n1.contains(" unreachable "), "\(out)")
                        #expect(rows.filter { $0.contains(" ok ") }.count == 3, "\(out)")
                    case 2:
                        #expect(n1.contains("inactiveFailed") && n1.contains(" unreachable "), "\(out)")
                    default:
                        // Rebalanced: n1 is gone and the three others are active, healthy and answering.
                        #expect(out.contains("3 node(s)") && n1.isEmpty, "\(out)")
                        #expect(
                            rows.count == 3
                                && rows.allSatisfy {
                                    $0.contains(" healthy ") && $0.contains(" ok ") && $0.contains(" active ")
                                }, "\(out)")
                    }
                } else if command.hasPrefix("settee rebalance") {
                    #expect(out.contains("rebalance complete"), "\(failure)")
                } else if command.contains("/settings/web") {
                    #expect(out.contains(#""newBaseUri""#), "\(failure)")
                } else if command.contains("/pools/default/buckets") && command.contains("name=demo") {
                    let bucket = try ReadmeExamples.shell(
                        "curl -s -u Administrator:password http://127.0.0.1:\(single.admin)/pools/default/buckets/demo",
                        env)
                    let json = (try? JSONSerialization.jsonObject(with: Data(bucket.output.utf8))) as? [String: Any]
                    #expect((json?["controllers"] as? [String: Any])?["flush"] != nil, "\(bucket.output.prefix(500))")
                } else if command.hasPrefix("memccapable") {
                    let failed = out.split(separator: "\n").filter { $0.hasSuffix("[FAIL]") }
                    #expect(failed.isEmpty && out.contains("All tests passed"), "\(failure)")
                    #expect(out.components(separatedBy: "[pass]").count - 1 == 27, "\(out)")
                } else if command.hasPrefix("curl -u jane:password -X PUT") {
                    #expect(out.contains(#""ok":true"#) && out.contains(#""id":"doc1""#), "\(failure)")
                } else if command.hasPrefix("curl -u joe:password") {
                    #expect(out.contains("\"results\"") && !out.contains("doc1"), "\(failure)")
                } else if command.contains(" attach ") {
                    let attached = out.split(separator: "\n").filter {
                        $0.hasSuffix("\tdocs/examples/photo1.jpg") || $0.hasSuffix("\tdocs/examples/photo2.jpg")
                    }
                    #expect(attached.count == 2, "\(failure)")
                } else if command.contains(" start --once ") {
                    // Pushed through cluster/up's gateway onto the rebalanced cluster: the checkpoint's durability
                    // barrier (`_ensure_full_commit`) needs every vBucket's copies back.
                    // A 503 there shows as the push going offline with the gateway's reason (" — ...").
                    // The two images (and whatever else the push counts) all completed, no error.
                    let push = out.split(separator: "\n").last { $0.hasPrefix("push [") } ?? ""
                    let counts = push.split(separator: " ").first { $0.contains("/") }?.split(separator: "/")
                    #expect(
                        push.hasSuffix(" stopped") && counts?.count == 2 && counts?.first == counts?.last
                            && (counts?.first).flatMap { Int($0) } ?? 0 >= 2, "\(failure)")
                } else if command.contains(" send ") {
                    #expect(out.contains("sent 1 document(s)"), "\(failure)")
                    let id = out.split(separator: "\n").first { $0.hasPrefix("sending ") }.map {
                        String($0.dropFirst("sending ".count).prefix { $0 != "\t" })
                    }
                    let receiver = running.last
                    #expect(
                        id != nil
                            && ReadmeExamples.eventually(20) {
                                receiver?.output.contains("received \(id ?? "?")") == true
                            }, "\(receiver?.output ?? "no receiver")")
                } else if command.hasPrefix("make cluster-down") {
                    #expect(out.contains("stopped n0") && out.contains("stopped gateway"), "\(out)")
                    let left = (try? FileManager.default.contentsOfDirectory(atPath: data.path))?.filter {
                        $0.hasSuffix(".pid")
                    }
                    #expect(left == [], "pid files left: \(left ?? [])")
                } else {
                    Issue.record("no check for README command: \(command)")
                    continue
                }
                checked += 1
            }
        }
        #expect(checked == blocks.map(\.commands.count).reduce(0, +))
        let total = String(format: "%.1f", Date().timeIntervalSince(started))
        print("README examples: \(checked) commands in \(total) s")
        for (seconds, command) in timings { print(String(format: "  %6.1f s  ", seconds) + command) }
    }

    /// Prints each process `data`'s pid files name with its peak resident memory (VmHWM), for the README's RAM line.
    static func printPeakMemory(_ data: URL) {
        let pidFiles = ((try? FileManager.default.contentsOfDirectory(atPath: data.path)) ?? []).filter {
            $0.hasSuffix(".pid")
        }
        for file in pidFiles.sorted() {
            guard
                let pid = (try? String(contentsOfFile: data.appendingPathComponent(file).path, encoding: .utf8))?
                    .trimmingCharacters(in: .whitespacesAndNewlines),
                let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
                let peak = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") })
            else { continue }
            print(
                "README examples: \(file) \(peak.split(separator: " ", omittingEmptySubsequences: true).dropFirst().joined(separator: " "))"
            )
        }
    }

    /// Whatever the sequence left running: `cluster/down`, then SIGKILL for any process its pid files named that
    /// outlived it (this test's own nodes and gateway only), then the data directory goes.
    static func tearDownCluster(_ data: URL, _ env: [String: String]) {
        let pidFiles = ((try? FileManager.default.contentsOfDirectory(atPath: data.path)) ?? []).filter {
            $0.hasSuffix(".pid")
        }
        let pids = pidFiles.compactMap {
            (try? String(contentsOfFile: data.appendingPathComponent($0).path, encoding: .utf8)).flatMap {
                Int32($0.trimmingCharacters(in: .whitespacesAndNewlines))
            }
        }
        _ = try? ReadmeExamples.shell("cluster/down", env, timeout: 120)
        for pid in pids where kill(pid, 0) == 0 { kill(pid, SIGKILL) }
        try? FileManager.default.removeItem(at: data)
    }
}
