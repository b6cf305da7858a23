import Foundation
import SetteeCore
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Helpers for driving a cluster of real `settee-server` processes through the admin API.
enum ClusterHarness {
    static func json(_ r: ServerProcess.HTTPResult) -> [String: Any] {
        (try? r.json()) as? [String: Any] ?? [:]
    }

    static func nodeName(_ s: ServerProcess) -> String { "n_\(s.adminPort)@127.0.0.1" }

    static func addNode(_ via: ServerProcess, _ node: ServerProcess, password: String = "password")
        throws -> ServerProcess.HTTPResult
    {
        try via.http(
            "POST", "/controller/addNode",
            form: [("hostname", "127.0.0.1:\(node.adminPort)"), ("user", "Administrator"), ("password", password)])
    }

    /// How the harness speaks to a node's admin API: its plain port (`ServerProcess.http`, the default), or another
    /// way for a node without one (`--tls-only`: HTTPS pinned to its certificate). `send(node, method, path, form)`.
    struct Admin {
        var send: (ServerProcess, String, String, [(String, String)]?) throws -> ServerProcess.HTTPResult

        static var plain: Admin { Admin { node, method, path, form in try node.http(method, path, form: form) } }
    }

    /// Starts a rebalance over `known` and waits until `/pools/default/rebalanceProgress` says "none".
    /// Returns the final progress document.
    static func rebalance(
        _ via: ServerProcess, known: [ServerProcess], ejected: [ServerProcess] = [], timeout: TimeInterval = 300,
        admin: Admin = .plain
    ) throws -> [String: Any] {
        let r = try admin.send(
            via, "POST", "/controller/rebalance",
            [
                ("knownNodes", known.map(nodeName).joined(separator: ",")),
                ("ejectedNodes", ejected.map(nodeName).joined(separator: ",")),
            ])
        guard r.status == 200 else { throw HarnessError("rebalance refused: \(r.status) \(r.text)") }
        return try waitForRebalance(via, timeout: timeout, admin: admin)
    }

    /// `rebalance` on a thread of its own, for async tests whose tasks (writers, streams, in-process servers) must
    /// keep the cooperative pool while it polls: on a loaded 2-core run a blocked cooperative thread starved them.
    /// nil when the rebalance ended without an error, else its final progress document as text.
    static func rebalanceOffPool(
        _ via: ServerProcess, known: [ServerProcess], ejected: [ServerProcess] = [], timeout: TimeInterval = 300
    ) async throws -> String? {
        let nodes = Unchecked(value: (via, known, ejected))
        return try await offPool { () throws -> String? in
            let (via, known, ejected) = nodes.value
            let progress = try rebalance(via, known: known, ejected: ejected, timeout: timeout)
            return progress["errorMessage"] == nil ? nil : "\(progress)"
        }
    }

    static func waitForRebalance(
        _ via: ServerProcess, timeout: TimeInterval = 300, admin: Admin = .plain
    ) throws -> [String: Any] {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let p = json(try admin.send(via, "GET", "/pools/default/rebalanceProgress", nil))
            // A poll may meet a forward that fails (an orchestrator changing): only a task answered with the wrong
            // shape fails it; the end's check must pass.
            do { _ = try rebalanceTask(via, admin: admin) } catch let e as HarnessError
                where e.description.hasPrefix("a running")
            { throw e } catch {}
            if p["status"] as? String == "none" {
                // `/pools/default/tasks` agrees once the rebalance is over (the orchestrator answers both).
                let after = try rebalanceTask(via, admin: admin)
                guard after["status"] as? String == "notRunning",
                    (after["errorMessage"] == nil) == (p["errorMessage"] == nil)
                else { throw HarnessError("tasks \(after) after rebalanceProgress \(p)") }
                return p
            }
            usleep(100_000)
        }
        throw HarnessError("rebalance did not finish in \(timeout)s")
    }

    /// The rebalance task of `GET /pools/default/tasks` (always its first element), checked for Couchbase's shape: a
    /// 32-hex `statusId`, `type` rebalance, and while running a `progress` percentage in 0...100 with `perNode`.
    static func rebalanceTask(_ via: ServerProcess, admin: Admin = .plain) throws -> [String: Any] {
        let r = try admin.send(via, "GET", "/pools/default/tasks", nil)
        let tasks = (try? JSONSerialization.jsonObject(with: Data(r.text.utf8))) as? [[String: Any]] ?? []
        guard r.status == 200, let task = tasks.first, task["type"] as? String == "rebalance",
            let id = task["statusId"] as? String, id.count == 32, id.allSatisfy(\.isHexDigit)
        else { throw HarnessError("GET /pools/default/tasks: \(r.status) \(r.text)") }
        if task["status"] as? String == "running" {
            guard let progress = task["progress"] as? Double, (0...100).contains(progress),
                task["perNode"] is [String: Any]
            else { throw HarnessError("a running rebalance task without its progress: \(r.text)") }
        }
        return task
    }

    /// The bucket's map as one node serves it: rev, epoch, server list, chains.
    struct Map {
        var rev: Int
        var epoch: Int
        var servers: [String]
        var chains: [[Int]]
    }

    static func map(_ node: ServerProcess, bucket: String = "demo", admin: Admin = .plain) throws -> Map {
        let d = json(try admin.send(node, "GET", "/pools/default/b/\(bucket)", nil))
        let m = d["vBucketServerMap"] as? [String: Any] ?? [:]
        return Map(
            rev: d["rev"] as? Int ?? -1, epoch: d["revEpoch"] as? Int ?? -1,
            servers: m["serverList"] as? [String] ?? [], chains: m["vBucketMap"] as? [[Int]] ?? [])
    }

    /// Polls until `check` holds for `node`'s view (configs spread by push and a 1 s heartbeat).
    static func eventually(
        _ timeout: TimeInterval = 20, _ check: () throws -> Bool
    ) throws -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if (try? check()) == true { return true }
            usleep(100_000)
        }
        return try check()
    }

    /// Whether `chains` is balanced over `nodes` servers as the issue defines it: each node's active count
    /// within 1 of 1024/N, no replica on its active's node, every replica slot filled.
    static func isBalanced(_ chains: [[Int]], nodes: Int, replicas: Int) -> Bool {
        guard chains.count == 1024 else { return false }
        var actives = [Int](repeating: 0, count: nodes)
        for chain in chains {
            guard chain.count == replicas + 1, let a = chain.first, a >= 0, a < nodes else { return false }
            actives[a] += 1
            let copies = chain.prefix(min(replicas, nodes - 1) + 1)
            if copies.contains(-1) || Set(copies).count != copies.count { return false }
        }
        let ideal = 1024.0 / Double(nodes)
        return actives.allSatisfy { abs(Double($0) - ideal) < 1.0 + 1e-9 }
    }

    /// Keys `prefix` + N whose vBucket's chain in `map` is exactly `chain` (server indexes), `count` of them (fewer
    /// when a million names do not find them).
    static func keys(for chain: [Int], in map: Map, count: Int, prefix: String) -> [String] {
        var out: [String] = []
        var i = 0
        while out.count < count && i < 1_000_000 {
            let key = "\(prefix)\(i)"
            let vb = VBucketHash.vbucket(forKey: Array(key.utf8)).index
            if vb < map.chains.count && map.chains[vb] == chain { out.append(key) }
            i += 1
        }
        return out
    }

    /// A short description of a map for failure messages (never the whole map).
    static func summary(_ m: Map) -> String {
        var actives: [Int: Int] = [:]
        var empty = 0
        for chain in m.chains {
            actives[chain.first ?? -2, default: 0] += 1
            empty += chain.dropFirst().filter { $0 == -1 }.count
        }
        return "rev \(m.rev) epoch \(m.epoch) servers \(m.servers) actives \(actives) empty replica slots \(empty)"
    }

    /// How `formCluster` adds a node: the `hostname` its orchestrator calls (plain `127.0.0.1:ADMIN` by default, or
    /// an `https://` admin TLS address) and the `tlsFingerprint` to pin it with, if any.
    struct Join {
        var hostname: String
        var fingerprint: String?

        static func plain(_ node: ServerProcess) -> Join { Join(hostname: "127.0.0.1:\(node.adminPort)") }
    }

    /// The one way tests form a cluster of real processes: initialises the first of `nodes` with the admin
    /// credentials, adds the others through it (`join`: plain by default; TLS callers give each node's `https://`
    /// address and pin), rebalances them in (within `rebalanceTimeout` seconds), then creates bucket `demo` and
    /// `moreBuckets` (each `ramQuotaMB`, `replicaNumber` replicas, `authType`) and waits until every member serves each
    /// bucket's map (within `servedTimeout` seconds). Every request goes through `admin` (plain by default). Throws if
    /// any step is refused or does not finish. Blocks: async tests call it through `offPool`.
    static func formCluster(
        _ nodes: [ServerProcess], authType: String = "none", ramQuotaMB: Int = 256, replicaNumber: Int = 1,
        moreBuckets: [String] = [], join: (ServerProcess) throws -> Join = Join.plain, admin: Admin = .plain,
        rebalanceTimeout: TimeInterval = 300, servedTimeout: TimeInterval = 20
    ) throws {
        let a = nodes[0]
        let web = try admin.send(
            a, "POST", "/settings/web", [("username", a.user), ("password", a.password), ("port", "SAME")])
        guard web.status == 200 else { throw HarnessError("settings/web: \(web.status) \(web.text)") }
        for node in nodes.dropFirst() {
            let to = try join(node)
            var form = [("hostname", to.hostname), ("user", a.user), ("password", a.password)]
            if let pin = to.fingerprint { form.append(("tlsFingerprint", pin)) }
            let r = try admin.send(a, "POST", "/controller/addNode", form)
            guard r.status == 200 else { throw HarnessError("addNode: \(r.status) \(r.text)") }
        }
        _ = try rebalance(a, known: nodes, timeout: rebalanceTimeout, admin: admin)
        for bucket in ["demo"] + moreBuckets {
            let create = try admin.send(
                a, "POST", "/pools/default/buckets",
                [
                    ("name", bucket), ("ramQuotaMB", String(ramQuotaMB)), ("replicaNumber", String(replicaNumber)),
                    ("authType", authType),
                ])
            guard create.status == 202 else {
                throw HarnessError("create bucket \(bucket): \(create.status) \(create.text)")
            }
            // Every node must have opened the bucket before a client routes to it.
            let served = try eventually(servedTimeout) {
                try nodes.allSatisfy { node in try map(node, bucket: bucket, admin: admin).chains.count == 1024 }
            }
            guard served else { throw HarnessError("not every node serves bucket \(bucket)'s map") }
        }
    }

    static func members(_ node: ServerProcess) throws -> [String: String] {
        let nodes = json(try node.http("GET", "/pools/default"))["nodes"] as? [[String: Any]] ?? []
        var out: [String: String] = [:]
        for n in nodes {
            if let name = n["otpNode"] as? String { out[name] = n["clusterMembership"] as? String ?? "?" }
        }
        return out
    }
}

@Suite("Cluster membership (real processes)", .serialized, .onTestThreads)
struct ClusterProcessTests {
    /// Proves the membership life cycle over three real nodes: join (with wrong credentials refused), Couchbase's
    /// answers to a stale or empty `knownNodes` and to a second topology change during a rebalance, a balanced
    /// map served identically by every node, hard failover of a SIGKILLed node through a non-orchestrator (at a
    /// new epoch), the dead node learning it was failed over when it returns, full recovery, cluster metadata
    /// surviving a restart, and ejection.
    @Test func joinRebalanceFailoverRecoverEject() throws {
        let a = try ServerProcess(name: "cluster-a")
        let b = try ServerProcess(name: "cluster-b")
        let c = try ServerProcess(name: "cluster-c")
        defer { [a, b, c].forEach { $0.stopAndRemove() } }
        for s in [a, b, c] { try s.start() }
        #expect(
            try a.http(
                "POST", "/settings/web",
                form: [("username", "Administrator"), ("password", "password"), ("port", "SAME")]
            )
            .status == 200)
        // c is provisioned with other credentials: adding it with the wrong ones is refused.
        #expect(
            try c.http(
                "POST", "/settings/web",
                form: [("username", "Administrator"), ("password", "other-secret"), ("port", "SAME")]
            )
            .status == 200)
        let wrong = try ClusterHarness.addNode(a, c, password: "password")
        #expect(wrong.status == 400)
        #expect(wrong.text.contains("Authentication failed"))

        #expect(try ClusterHarness.addNode(a, b).status == 200)
        let added = try ClusterHarness.addNode(a, c, password: "other-secret")
        #expect(added.status == 200)
        #expect(ClusterHarness.json(added)["otpNode"] as? String == ClusterHarness.nodeName(c))
        #expect(try ClusterHarness.addNode(a, b).text.contains("already part of cluster"))
        // c took the cluster's credentials.
        #expect(try c.http("GET", "/pools/default").status == 200)
        #expect(try ClusterHarness.eventually { try ClusterHarness.members(b) == ClusterHarness.members(a) })

        let stale = try a.http(
            "POST", "/controller/rebalance", form: [("knownNodes", ClusterHarness.nodeName(a)), ("ejectedNodes", "")])
        #expect(stale.status == 400 && stale.text.contains("mismatch"))
        let empty = try a.http("POST", "/controller/rebalance", form: [("knownNodes", ""), ("ejectedNodes", "")])
        #expect(empty.status == 400 && empty.text.contains("empty_known_nodes"))

        let create = try a.http(
            "POST", "/pools/default/buckets",
            form: [("name", "demo"), ("ramQuotaMB", "100"), ("replicaNumber", "1"), ("authType", "none")])
        #expect(create.status == 202)

        // Started through b (forwarded to the orchestrator); a second change meanwhile gets 503.
        let start = try b.http(
            "POST", "/controller/rebalance",
            form: [
                ("knownNodes", [a, b, c].map(ClusterHarness.nodeName).joined(separator: ",")), ("ejectedNodes", ""),
            ])
        #expect(start.status == 200)
        let during = try ClusterHarness.addNode(a, c)
        #expect(during.status == 503 || during.text.contains("already part of cluster"))
        _ = try ClusterHarness.waitForRebalance(a)

        #expect(
            try ClusterHarness.eventually {
                let maps = try [a, b, c].map { try ClusterHarness.map($0) }
                return maps.allSatisfy { $0.rev == maps[0].rev && $0.chains == maps[0].chains }
            })
        let maps = try [a, b, c].map { try ClusterHarness.map($0) }
        #expect(maps[0].servers.count == 3)
        let balanced = ClusterHarness.isBalanced(maps[0].chains, nodes: 3, replicas: 1)
        #expect(balanced, "\(ClusterHarness.summary(maps[0]))")
        #expect(try ClusterHarness.members(a).values.allSatisfy { $0 == "active" })

        // Hard failover of a SIGKILLed c, asked of b.
        c.kill9()
        let failover = try b.http("POST", "/controller/failOver", form: [("otpNode", ClusterHarness.nodeName(c))])
        #expect(failover.status == 200)
        let after = try ClusterHarness.map(a)
        #expect(after.epoch == maps[0].epoch + 1)
        let cIndex = maps[0].servers.firstIndex(of: "127.0.0.1:\(c.kvPort)") ?? -1
        let survivors = Set(
            [a, b].compactMap { s in after.servers.firstIndex(of: "127.0.0.1:\(s.kvPort)") })
        let promoted =
            after.chains.count == 1024 && after.chains.allSatisfy { survivors.contains($0[0]) }
            && (!after.servers.contains("127.0.0.1:\(c.kvPort)") || after.chains.allSatisfy { !$0.contains(cIndex) })
        #expect(promoted)
        #expect(try ClusterHarness.members(b)[ClusterHarness.nodeName(c)] == "inactiveFailed")

        // c comes back with its old config and learns from its peers that it was failed over.
        try c.start()
        #expect(
            try ClusterHarness.eventually {
                try ClusterHarness.members(c)[ClusterHarness.nodeName(c)] == "inactiveFailed"
            })

        // Full recovery and a rebalance bring it back.
        let recovery = try a.http(
            "POST", "/controller/setRecoveryType",
            form: [("otpNode", ClusterHarness.nodeName(c)), ("recoveryType", "full")])
        #expect(recovery.status == 200)
        _ = try ClusterHarness.rebalance(a, known: [a, b, c])
        let recovered = try ClusterHarness.map(c)
        let recoveredBalanced = ClusterHarness.isBalanced(recovered.chains, nodes: 3, replicas: 1)
        #expect(recoveredBalanced)
        #expect(try ClusterHarness.members(a).values.allSatisfy { $0 == "active" })

        // Cluster metadata survives a restart of the orchestrator.
        let before = try ClusterHarness.map(a)
        #expect(a.stop() == 0)
        try a.start()
        let restarted = try ClusterHarness.map(a)
        let same = restarted.rev >= before.rev && restarted.chains == before.chains
        #expect(same)
        #expect(try ClusterHarness.members(a).count == 3)

        // Ejecting c leaves a balanced two-node map; c becomes an uninitialised node of its own.
        _ = try ClusterHarness.rebalance(b, known: [a, b, c], ejected: [c])
        let two = try ClusterHarness.map(b)
        #expect(two.servers.count == 2)
        let twoBalanced = ClusterHarness.isBalanced(two.chains, nodes: 2, replicas: 1)
        #expect(twoBalanced)
        #expect(try ClusterHarness.eventually { try c.http("GET", "/pools/default").status == 404 })
    }

    /// Proves auto-failover: off by default, a timeout under 5 s is refused with Couchbase's message, and once
    /// enabled the orchestrator fails over a SIGKILLed node after the timeout, publishing the promoted map.
    @Test func autoFailoverAfterTimeout() throws {
        let nodes = try (0..<3).map { try ServerProcess(name: "autofo-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for s in nodes { try s.start() }
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])
        #expect(
            try a.http(
                "POST", "/settings/web",
                form: [("username", "Administrator"), ("password", "password"), ("port", "SAME")]
            ).status == 200)
        #expect(try ClusterHarness.addNode(a, b).status == 200)
        #expect(try ClusterHarness.addNode(a, c).status == 200)
        _ = try ClusterHarness.rebalance(a, known: nodes)
        #expect(
            try a.http(
                "POST", "/pools/default/buckets",
                form: [("name", "demo"), ("ramQuotaMB", "100"), ("replicaNumber", "1")]
            )
            .status == 202)

        let defaults = ClusterHarness.json(try b.http("GET", "/settings/autoFailover"))
        #expect(defaults["enabled"] as? Bool == false)
        let tooShort = try b.http("POST", "/settings/autoFailover", form: [("enabled", "true"), ("timeout", "2")])
        #expect(tooShort.status == 400 && tooShort.text.contains("range from 5 to 3600"))
        #expect(
            try b.http("POST", "/settings/autoFailover", form: [("enabled", "true"), ("timeout", "5")]).status == 200)
        #expect(
            try ClusterHarness.eventually {
                ClusterHarness.json(try a.http("GET", "/settings/autoFailover"))["enabled"] as? Bool == true
            })

        c.kill9()
        let failed = try ClusterHarness.eventually(30) {
            try ClusterHarness.members(a)[ClusterHarness.nodeName(c)] == "inactiveFailed"
        }
        #expect(failed)
        let map = try ClusterHarness.map(b)
        let survivors = Set([a, b].compactMap { s in map.servers.firstIndex(of: "127.0.0.1:\(s.kvPort)") })
        let promoted = map.chains.count == 1024 && map.chains.allSatisfy { survivors.contains($0[0]) }
        #expect(promoted)
        #expect(
            try ClusterHarness.eventually {
                ClusterHarness.json(try a.http("GET", "/settings/autoFailover"))["count"] as? Int == 1
            })
    }
}

/// The `settee` CLI's cluster commands against real nodes.
@Suite("Cluster CLI (real processes)", .serialized, .onTestThreads)
struct ClusterCLIProcessTests {
    /// Proves `settee node add`, `settee rebalance` (runs to completion, drawing progress), `settee cluster
    /// status` (both nodes active and healthy, vBuckets split between them) and `settee failover` (the failed
    /// node shown inactiveFailed, every vBucket active on the survivor) on two real nodes.
    @Test func nodeAddRebalanceStatusFailover() throws {
        let a = try ServerProcess(name: "cli-cluster-a")
        let b = try ServerProcess(name: "cli-cluster-b")
        defer { [a, b].forEach { $0.stopAndRemove() } }
        try a.start()
        try b.start()
        try a.initialize(replicaNumber: 1)
        let add = try runCLI(["node", "add", "127.0.0.1:\(b.adminPort)"], server: a)
        #expect(add.status == 0, "\(add.stdout) \(add.stderr)")
        let rebalance = try runCLI(["rebalance"], server: a)
        #expect(rebalance.status == 0, "\(rebalance.stdout) \(rebalance.stderr)")
        let map = try ClusterHarness.map(a)
        let balanced = ClusterHarness.isBalanced(map.chains, nodes: 2, replicas: 1)
        #expect(balanced, "\(ClusterHarness.summary(map))")
        let status = try runCLI(["cluster", "status"], server: a)
        #expect(status.status == 0, "\(status.stderr)")
        #expect(status.stdout.contains("2 node(s)"), "\(status.stdout)")
        #expect(status.stdout.contains("512/512"), "\(status.stdout)")

        b.kill9()
        let failover = try runCLI(["failover", ClusterHarness.nodeName(b)], server: a)
        #expect(failover.status == 0, "\(failover.stdout) \(failover.stderr)")
        let after = try runCLI(["cluster", "status"], server: a)
        #expect(after.stdout.contains("inactiveFailed"), "\(after.stdout)")
        #expect(after.stdout.contains("1024/0"), "\(after.stdout)")
        // The killed node, asked directly, does not answer: the probe column says so beside the cluster's view.
        let bLine = after.stdout.split(separator: "\n").first { $0.hasPrefix(ClusterHarness.nodeName(b)) } ?? ""
        #expect(bLine.contains(" unreachable "), "\(after.stdout)")
    }
}
