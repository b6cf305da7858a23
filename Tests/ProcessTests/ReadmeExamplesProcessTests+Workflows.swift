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
    /// The cluster block, every line in order, on runtime ports (cluster/up's SETTEE_BASE_*_PORT and gateway port
    /// variables, the data directory in a scratch directory, the debug executables): three nodes and cluster/up's
    /// gateway come up; the bucket map spans 3 nodes with one replica; `settee kv` sets and gets through the smart
    /// client (SETTEE_CLUSTER points it at the runtime port, as the default 8091 does for a reader); the gateway
    /// imported the document; `cluster/add 1` rebalances a fourth node in; n1 is killed and failed over and the
    /// document is still readable; cluster/status shows n1 failed; `make cluster-down` stops every process.
    @Test func clusterBlock() throws {
        let commands = try ReadmeExamples.commands("cluster")
        #expect(commands.count == 11, "\(commands)")
        let data = TestOutput.scratch("readme-cluster")
        let ports = try ReadmeExamples.clusterBasePorts(nodes: 4)
        let gatewayPort = try freePort()
        let env = [
            "SETTEE_BASE_ADMIN_PORT": "\(ports.admin)", "SETTEE_BASE_KV_PORT": "\(ports.kv)",
            "SETTEE_BASE_VIEWS_PORT": "\(ports.views)", "SETTEE_SERVER_BIN": ServerProcess.binary,
            "SETTEE_CLUSTER_DATA": data.path, "SETTEE_GATEWAY_BIN": GatewayProcess.binary,
            "SETTEE_GATEWAY_PORT": "\(gatewayPort)", "SETTEE_GATEWAY_ADMIN_PORT": "\(try freePort())",
            "SETTEE_CLUSTER": "http://127.0.0.1:\(ports.admin)", "SETTEE_BIN": BuiltExecutable.path("settee"),
        ]
        defer { Self.tearDownCluster(data, env) }
        let rewrites = [
            ("127.0.0.1:8091", "127.0.0.1:\(ports.admin)"), ("127.0.0.1:4984", "127.0.0.1:\(gatewayPort)"),
            ("cluster/data/", data.path + "/"), ("$PWD/.build/release", ReadmeExamples.binDirectory),
        ]
        let started = Date()
        var checked = 0
        for command in commands {
            let line = ReadmeExamples.rewrite(command, rewrites)
            var run = try ReadmeExamples.shell(line, env, timeout: 240)
            let out = run.output
            #expect(run.status == 0, "\(line): \(out) \(run.standardError)")
            if command.hasPrefix("cluster/up 3") {
                #expect(out.contains("Settee is running (3 node(s))") && out.contains("gateway started"), "\(out)")
                #expect(out.contains("export PATH=\(ReadmeExamples.binDirectory):$PATH"), "\(out)")
            } else if command.hasPrefix("export PATH=") {
                #expect(line.contains(ReadmeExamples.binDirectory))
            } else if command.contains("/pools/default/buckets/demo") {
                // curl's progress meter (standard error, not a terminal) comes around the body.
                let body = out.firstIndex(of: "{").flatMap { start in out.lastIndex(of: "}").map { out[start...$0] } }
                let bucket = (try? JSONSerialization.jsonObject(with: Data((body ?? "").utf8))) as? [String: Any]
                let map = bucket?["vBucketServerMap"] as? [String: Any]
                #expect((map?["serverList"] as? [Any])?.count == 3, "\(out.prefix(500))")
                #expect(bucket?["replicaNumber"] as? Int == 1)
            } else if command.hasPrefix("settee kv set") {
                #expect(out.contains("OK cas=") && out.contains(#""name":"jane""#), "\(out)")
            } else if command.hasPrefix("curl http://127.0.0.1:4984/demo/user::1") {
                // The gateway imports from the bucket's change stream: a reader who sees 404 asks again.
                _ = ReadmeExamples.eventually(20) {
                    run = try ReadmeExamples.shell(line, env)
                    return run.output.contains(#""_id":"user::1""#)
                }
                #expect(
                    run.output.contains(#""_id":"user::1""#) && run.output.contains(#""name":"jane""#), "\(run.output)")
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
                // The gateway imported the document (above) with shared bucket access, `cluster/up`'s layout: the
                // body stays the application's, its metadata in the `_sync` XATTR.
                #expect(out.contains(#""name":"jane""#) && !out.contains("_sync"), "after the failover: \(out)")
            } else if command.hasPrefix("cluster/status") {
                #expect(out.contains("4 node(s)") && out.contains("inactiveFailed"), "\(out)")
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
        #expect(checked == commands.count)
        print(
            "README cluster block: \(commands.count) commands in \(String(format: "%.1f", Date().timeIntervalSince(started))) s"
        )
    }

    /// Whatever the block left running: `cluster/down`, then SIGKILL for any process its pid files named that
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

    /// The Lite block, every line in order, in a scratch working directory holding photo1.jpg and photo2.jpg,
    /// against a gateway on seed 000's config (embedded bucket; its port in place of 4984): `attach` stores two
    /// documents; the console's and the phone's continuous `start`s and the phone's `list --live` run in the
    /// background and the live list shows both images, newest first, with their sizes; `receive` prints a sync
    /// URL, and `send` to that URL (in place of the placeholder) pushes photo1 only, which the receiver reports.
    @Test func liteBlock() throws {
        let commands = try ReadmeExamples.commands("lite")
        #expect(commands.count == 6, "\(commands)")
        guard commands.count == 6 else { return }
        let gateway = try GatewayProcess(name: "readme-lite", config: try GatewayProcessTests.seed000Config())
        try gateway.start()
        defer { gateway.stop() }
        let dir = TestOutput.scratch("readme-lite")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let files = try LiteAppsProcessTests.images(in: dir, count: 2)
        let rewrites = [("127.0.0.1:4984", "127.0.0.1:\(gateway.port)")]
        func line(_ i: Int) -> String { ReadmeExamples.rewrite(commands[i], rewrites) }
        var running: [ChildProcess] = []
        defer { for child in running { child.stop() } }

        let attach = try ReadmeExamples.shell(line(0), in: dir)
        #expect(attach.status == 0, "\(attach.output)")
        let attached = attach.output.split(separator: "\n").filter {
            $0.hasSuffix("\tphoto1.jpg") || $0.hasSuffix("\tphoto2.jpg")
        }
        #expect(attached.count == 2, "\(attach.output)")

        for (i, name) in [(1, "console-start"), (2, "phone-start"), (3, "phone-list")] {
            #expect(line(i).hasPrefix("settee-lite --db ./"), "\(line(i))")
            running.append(try ReadmeExamples.background(line(i), name: name, in: dir))
        }
        let list = running[2]
        // Alone the live list shows both in about a second; a loaded 2-core CI run once needed more than 60 s
        // (three processes start, the console pushes, the phone pulls), so it gets 180 s and the failure shows
        // what each replicator printed.
        // The listing prints its header, then a row per image: wait for both rows, not only the header.
        var rows: [[String]] = []
        #expect(
            ReadmeExamples.eventually(180) {
                let output = list.output
                guard output.contains("-- 2 image(s)") else { return false }
                let last = output.components(separatedBy: "-- 2 image(s)").last ?? ""
                rows = last.split(separator: "\n").map { $0.split(separator: "\t").map(String.init) }.filter {
                    $0.count == 5
                }
                return rows.count >= 2
            },
            "list: \(list.output)\nconsole: \(running[0].output)\nphone: \(running[1].output)")
        #expect(rows.map { $0[2] } == ["photo2.jpg", "photo1.jpg"], "\(list.output)")
        #expect(rows.map { Int($0[3]) } == [files[1].bytes.count, files[0].bytes.count], "\(list.output)")

        let receiver = try ReadmeExamples.background(line(4), name: "receive", in: dir)
        running.append(receiver)
        #expect(ReadmeExamples.eventually(60) { receiver.output.contains("QR code saved as") }, "\(receiver.output)")
        let urlLine = receiver.output.split(separator: "\n").first { $0.hasPrefix("sync URL: ") }
        let url = String(try #require(urlLine).dropFirst("sync URL: ".count))
        let placeholder = try #require(line(5).range(of: #"'http://peer-[^']*'"#, options: .regularExpression))
        let send = line(5).replacingCharacters(in: placeholder, with: "'\(url)'")
        let sent = try ReadmeExamples.shell(send, in: dir)
        #expect(sent.status == 0 && sent.output.contains("sent 1 document(s)"), "\(sent.output)")
        let id = sent.output.split(separator: "\n").first { $0.hasPrefix("sending ") }.map {
            String($0.dropFirst("sending ".count).prefix { $0 != "\t" })
        }
        let sentID = try #require(id)
        #expect(ReadmeExamples.eventually(20) { receiver.output.contains("received \(sentID)") }, "\(receiver.output)")
    }
}
