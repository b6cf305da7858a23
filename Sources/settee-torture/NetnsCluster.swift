import Foundation
import SetteeClient
import SetteeCore

#if canImport(Glibc)
    import Glibc
#endif

/// A cluster of `settee-server` processes, each in its own network namespace on a bridge this run creates
/// (addresses in a /24 that exists only inside this machine), so that partitions are real: a partition is a
/// pair of blackhole routes inside the two namespaces, a full isolation is one per peer. The harness itself
/// sits on the bridge and reaches every node, as clients do.
///
/// Everything created is named after the run (`st<id>…`) and removed by `teardown`, also after a failure.
final class NetnsCluster: @unchecked Sendable {
    struct Node {
        var index: Int
        var namespace: String
        var address: String
        var dataDir: String
        var logPath: String
        var process: Process?
        var name: String { "n\(index)@\(address)" }
    }

    let runID: String
    let subnet: String
    let bridge: String
    let serverBinary: String
    let workDir: String
    private(set) var nodes: [Node] = []
    private var blackholes: Set<[Int]> = []
    let user = "Administrator"
    let password = "password"
    let adminPort = 8091
    let kvPort = 11210

    /// When set, each node's data directory is a tmpfs of this many bytes (the disk-full fault fills it).
    let diskBytes: Int?
    private var mounted: [String] = []

    init(nodes count: Int, serverBinary: String, workDir: String, diskBytes: Int? = nil) {
        self.diskBytes = diskBytes
        let pid = Int(getpid())
        runID = String(pid % 100_000)
        // 10.213.x.0/24 with x from the pid: parallel runs on one machine do not collide.
        subnet = "10.213.\(pid % 200 + 20)"
        bridge = "st\(runID)br"
        self.serverBinary = serverBinary
        self.workDir = workDir
        for i in 0..<count {
            nodes.append(
                Node(
                    index: i, namespace: "st\(runID)n\(i)", address: "\(subnet).\(10 + i)",
                    dataDir: "\(workDir)/n\(i)", logPath: "\(workDir)/n\(i).log"))
        }
    }

    var hostAddress: String { "\(subnet).1" }

    func admin(_ i: Int) -> NodeAddress { NodeAddress(host: nodes[i].address, port: adminPort) }

    // MARK: namespaces

    func setUp() throws {
        try sh("ip", "link", "add", bridge, "type", "bridge")
        try sh("ip", "addr", "add", "\(hostAddress)/24", "dev", bridge)
        try sh("ip", "link", "set", bridge, "up")
        for n in nodes {
            let host = "st\(runID)h\(n.index)"
            let peer = "st\(runID)p\(n.index)"
            try sh("ip", "netns", "add", n.namespace)
            try sh("ip", "link", "add", host, "type", "veth", "peer", "name", peer)
            try sh("ip", "link", "set", peer, "netns", n.namespace)
            try sh("ip", "link", "set", host, "master", bridge)
            try sh("ip", "link", "set", host, "up")
            try sh("ip", "netns", "exec", n.namespace, "ip", "link", "set", "lo", "up")
            try sh("ip", "netns", "exec", n.namespace, "ip", "addr", "add", "\(n.address)/24", "dev", peer)
            try sh("ip", "netns", "exec", n.namespace, "ip", "link", "set", peer, "up")
            try FileManager.default.createDirectory(atPath: n.dataDir, withIntermediateDirectories: true)
            if let diskBytes {
                try sh("mount", "-t", "tmpfs", "-o", "size=\(diskBytes),mode=0700", "tmpfs", n.dataDir)
                mounted.append(n.dataDir)
            }
        }
    }

    // MARK: disks

    private func fillerPath(_ i: Int) -> String { "\(nodes[i].dataDir)/torture-filler" }

    /// Fills node `i`'s data filesystem until the kernel answers ENOSPC (which ends the write: expected).
    func fillDisk(_ i: Int) throws {
        guard diskBytes != nil else { throw TortureError("disk-full needs per-node tmpfs data directories") }
        try sh("sh", "-c", "dd if=/dev/zero of='\(fillerPath(i))' bs=64k 2>/dev/null; sync; true")
    }

    /// Frees what `fillDisk` took.
    func freeDisk(_ i: Int) {
        try? FileManager.default.removeItem(atPath: fillerPath(i))
    }

    func teardown() {
        for i in nodes.indices {
            if let p = nodes[i].process, p.isRunning {
                kill(p.processIdentifier, SIGCONT)
                kill(p.processIdentifier, SIGKILL)
                p.waitUntilExit()
            }
        }
        for n in nodes { _ = try? sh("ip", "netns", "del", n.namespace) }
        for dir in mounted { _ = try? sh("umount", "-l", dir) }
        mounted.removeAll()
        _ = try? sh("ip", "link", "del", bridge)
    }

    // MARK: processes

    func start(_ i: Int) throws {
        let n = nodes[i]
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/sbin/ip")
        p.arguments = [
            "netns", "exec", n.namespace, serverBinary, "--data-dir", n.dataDir, "--host", n.address,
            "--admin-port", String(adminPort), "--kv-port", String(kvPort), "--views-port", "8092", "--name", n.name,
            "--kv-threads", "1",
        ]
        if !FileManager.default.fileExists(atPath: n.logPath) {
            _ = FileManager.default.createFile(atPath: n.logPath, contents: nil)
        }
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: n.logPath))
        log.seekToEndOfFile()
        p.standardOutput = log
        p.standardError = log
        try p.run()
        nodes[i].process = p
    }

    func signal(_ i: Int, _ sig: Int32) {
        guard let p = nodes[i].process, p.isRunning else { return }
        kill(p.processIdentifier, sig)
        if sig == SIGKILL { p.waitUntilExit() }
    }

    func isRunning(_ i: Int) -> Bool { nodes[i].process?.isRunning ?? false }

    // MARK: partitions

    /// Drops every packet between nodes `a` and `b`, both ways.
    func cut(_ a: Int, _ b: Int) throws {
        let key = [min(a, b), max(a, b)]
        guard !blackholes.contains(key) else { return }
        try sh("ip", "netns", "exec", nodes[a].namespace, "ip", "route", "add", "blackhole", "\(nodes[b].address)/32")
        try sh("ip", "netns", "exec", nodes[b].namespace, "ip", "route", "add", "blackhole", "\(nodes[a].address)/32")
        blackholes.insert(key)
    }

    /// Restores the link between `a` and `b` only.
    func heal(_ a: Int, _ b: Int) {
        let key = [min(a, b), max(a, b)]
        guard blackholes.contains(key) else { return }
        _ = try? sh(
            "ip", "netns", "exec", nodes[a].namespace, "ip", "route", "del", "blackhole", "\(nodes[b].address)/32")
        _ = try? sh(
            "ip", "netns", "exec", nodes[b].namespace, "ip", "route", "del", "blackhole", "\(nodes[a].address)/32")
        blackholes.remove(key)
    }

    func healLinks() {
        for key in blackholes {
            let (a, b) = (key[0], key[1])
            _ = try? sh(
                "ip", "netns", "exec", nodes[a].namespace, "ip", "route", "del", "blackhole", "\(nodes[b].address)/32")
            _ = try? sh(
                "ip", "netns", "exec", nodes[b].namespace, "ip", "route", "del", "blackhole", "\(nodes[a].address)/32")
        }
        blackholes.removeAll()
    }

    // MARK: admin API

    func http(_ i: Int, _ method: HTTPVerb, _ path: String, form: [(String, String)]? = nil) async throws
        -> HTTPResponse
    {
        try await AdminHTTP.request(
            method, path, at: admin(i), username: user, password: password, form: form, timeoutMs: 5_000)
    }

    /// Waits until node `i` answers on its admin port.
    func waitUp(_ i: Int, seconds: Double = 60) async throws {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let r = try? await AdminHTTP.request(.GET, "/pools", at: admin(i), username: nil, password: nil),
                r.status < 500
            {
                return
            }
            try await Task.sleep(for: .milliseconds(200))
        }
        throw TortureError("n\(i) did not answer on its admin port in \(Int(seconds)) s (log: \(nodes[i].logPath))")
    }

    func waitRebalanceDone(via i: Int, seconds: Double = 180) async throws {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let r = try? await http(i, .GET, "/pools/default/rebalanceProgress"), r.text.contains("\"none\"") {
                return
            }
            try await Task.sleep(for: .milliseconds(250))
        }
        throw TortureError("rebalance did not finish in \(Int(seconds)) s")
    }

    /// Node 0 initialises the cluster, every other node joins, one rebalance, then the bucket.
    func form(bucket: String, replicas: Int, autoFailover: Bool, failoverSeconds: Int) async throws {
        for i in nodes.indices { try await waitUp(i) }
        let web = try await http(
            0, .POST, "/settings/web", form: [("username", user), ("password", password), ("port", "SAME")])
        guard web.status == 200 else { throw TortureError("settings/web: \(web.status) \(web.text)") }
        for i in nodes.indices.dropFirst() {
            let r = try await http(
                0, .POST, "/controller/addNode",
                form: [
                    ("hostname", "\(nodes[i].address):\(adminPort)"), ("user", user), ("password", password),
                    // The namespaces' bridge is a private, test-only network: plain HTTP is allowed on it (ADR 0030).
                    ("allowInsecure", "true"),
                ])
            guard r.status == 200 else { throw TortureError("addNode n\(i): \(r.status) \(r.text)") }
        }
        try await rebalance(via: 0, known: Array(nodes.indices))
        let b = try await http(
            0, .POST, "/pools/default/buckets",
            form: [
                ("name", bucket), ("ramQuotaMB", "256"), ("authType", "sasl"),
                ("replicaNumber", String(replicas)),
            ])
        guard b.status == 202 || b.status == 200 else { throw TortureError("create bucket: \(b.status) \(b.text)") }
        // The failover timeout is set either way: with auto-failover off it is when the harness, as an operator,
        // fails an unreachable node over, and when a node cut off from the majority fences itself.
        let r = try await http(
            0, .POST, "/settings/autoFailover",
            form: [("enabled", autoFailover ? "true" : "false"), ("timeout", "\(failoverSeconds)")])
        guard r.status == 200 else { throw TortureError("autoFailover: \(r.status) \(r.text)") }
    }

    /// Adds node `i` (uninitialised, or reset after it was rebalanced out) through node `via`.
    func addNode(_ i: Int, via: Int) async throws {
        let r = try await http(
            via, .POST, "/controller/addNode",
            form: [
                ("hostname", "\(nodes[i].address):\(adminPort)"), ("user", user), ("password", password),
                ("allowInsecure", "true"),
            ])
        guard r.status == 200 else { throw TortureError("addNode n\(i): \(r.status) \(r.text)") }
    }

    func rebalance(via i: Int, known: [Int], ejected: [Int] = []) async throws {
        let r = try await http(
            i, .POST, "/controller/rebalance",
            form: [
                ("knownNodes", known.map { nodes[$0].name }.joined(separator: ",")),
                ("ejectedNodes", ejected.map { nodes[$0].name }.joined(separator: ",")),
            ])
        guard r.status == 200 else { throw TortureError("rebalance: \(r.status) \(r.text)") }
        try await waitRebalanceDone(via: i)
    }

    // MARK: shell

    @discardableResult
    func sh(_ args: String...) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = args
        let out = Pipe()
        p.standardOutput = out
        p.standardError = out
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self)
        guard p.terminationStatus == 0 else {
            throw TortureError("\(args.joined(separator: " ")) exited \(p.terminationStatus): \(text)")
        }
        return text
    }
}

struct TortureError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}
