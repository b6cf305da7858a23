import Foundation
import NIOCore
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import SetteeViews
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#endif

extension ServerProcess {
    /// A request to the views port (Basic auth as the admin).
    func views(_ method: String, _ path: String, body: [UInt8]? = nil) throws -> HTTPResult {
        var req = URLRequest(url: URL(string: "http://127.0.0.1:\(viewsPort)\(path)")!)
        req.httpMethod = method
        req.setValue(
            "Basic " + Data("\(user):\(password)".utf8).base64EncodedString(), forHTTPHeaderField: "Authorization")
        if let body {
            req.httpBody = Data(body)
            req.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        return try RawHTTP.send(port: viewsPort, request: req)
    }

    /// Waits until the views port answers `GET /`.
    func waitForViews(timeout: TimeInterval = 60) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let r = try? views("GET", "/"), r.status == 200 { return }
            usleep(50_000)
        }
        throw HarnessError("views port \(viewsPort) did not answer")
    }
}

/// A query string of percent-encoded parameters.
func queryEncode(_ params: [(String, String)]) -> String {
    params.map { "\($0.0)=\(PercentEncoding.encode($0.1))" }.joined(separator: "&")
}

extension ServerProcess {
    /// Asks `queries` random queries of `TestDesign`'s views through this node's views port and expects each answer
    /// to be byte for byte the brute-force answer over `docs`; stops at the first difference (reported with `seed`).
    func expectViewsMatchBruteForce(
        _ phase: String, docs: [String: String], seed: UInt64, queries: Int, rng: inout SplitMix64
    ) throws {
        let ids = docs.keys.sorted()
        for _ in 0..<queries {
            let v = Int.random(in: 0..<TestDesign.views.count, using: &rng)
            let (q, text) = try TestDesign.randomQuery(view: v, docIDs: ids, &rng)
            let params: [(String, String)] = text.split(separator: "&").map {
                let parts = $0.split(separator: "=", maxSplits: 1)
                return (String(parts[0]), parts.count > 1 ? String(parts[1]) : "")
            }
            let def = TestDesign.views[v]
            let r = try views("GET", "/demo/_design/test/_view/\(def.name)?" + queryEncode(params))
            let want = try BruteForce.answer(try BruteForce.rows(map: def.map, docs: docs), q, reduce: def.reduce)
            let same = r.status == 200 && [UInt8](r.body) == want
            #expect(
                same,
                "\(phase) seed \(seed) \(def.name)?\(text)\n got  \(r.status) \(r.text.prefix(600))\n want \(String(decoding: want.prefix(600), as: UTF8.self))"
            )
            if !same { return }
        }
    }
}

@Suite(.serialized, .onTestThreads) struct ViewsProcessTests {
    /// Proves, against a real node over HTTP and memcached-binary, that view answers equal a brute-force
    /// map/reduce over all live documents, for random documents and random queries over every
    /// parameter, after inserts, updates, deletions, expiries and a restart; also the design-document
    /// round trip, error shapes, and that `stale=false` after one write returns it (latency reported).
    @Test func viewsMatchBruteForceOnRealNode() throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["SETTEE_SEED"] ?? "") ?? UInt64.random(in: 0...UInt64.max)
        print("ViewsProcessTests seed \(seed)")
        var rng = SplitMix64(seed: seed)
        let server = try ServerProcess.started(name: "views")
        defer { server.stopAndRemove() }
        try server.initialize()
        try server.waitForViews()

        // Design document round trip.
        let put = try server.views("PUT", "/demo/_design/test", body: TestDesign.body)
        #expect(put.status == 201, "\(put.text)")
        #expect(put.text == #"{"ok":true,"id":"_design/test"}"#)
        let got = try server.views("GET", "/demo/_design/test")
        #expect(got.status == 200 && [UInt8](got.body) == TestDesign.body)
        let missing = try server.views("GET", "/demo/_design/nope/_view/x")
        #expect(missing.status == 404 && missing.text == #"{"error":"not_found","reason":"missing"}"#)
        let badJS = try server.views(
            "PUT", "/demo/_design/bad", body: Array(#"{"views":{"v":{"map":"function(d){ emit("}}}"#.utf8))
        #expect(badJS.status == 400 && badJS.text.contains("invalid_design_document"))
        let noBucket = try server.views("GET", "/nobucket/_design/test/_view/by_k")
        #expect(noBucket.status == 404)

        let kv = try TestKVClient(port: server.kvPort)
        var docs: [String: String] = [:]
        func set(_ id: String, _ body: String, expiry: UInt32 = 0) throws {
            let r = try kv.request(
                .set, key: id, value: Array(body.utf8), extras: TestKVClient.setExtras(flags: 0, expiry: expiry),
                datatype: 1)
            #expect(r.status == .success)
        }
        func delete(_ id: String) throws {
            let r = try kv.request(.delete, key: id)
            #expect(r.status == .success)
        }
        func check(_ phase: String) throws {
            try server.expectViewsMatchBruteForce(phase, docs: docs, seed: seed, queries: 30, rng: &rng)
        }

        for i in 0..<1100 {
            let id = "doc\(i)"
            docs[id] = TestDesign.randomDoc(&rng)
            try set(id, docs[id]!)
        }
        try check("inserts")
        for _ in 0..<200 {
            let id = "doc\(Int.random(in: 0..<1200, using: &rng))"
            if Bool.random(using: &rng), docs[id] != nil {
                try delete(id)
                docs[id] = nil
            } else {
                docs[id] = TestDesign.randomDoc(&rng)
                try set(id, docs[id]!)
            }
        }
        try check("updates+deletions")
        for i in 0..<30 { try set("exp\(i)", TestDesign.randomDoc(&rng), expiry: 1) }
        sleep(3)
        try check("expiries")

        // stale=false after one write returns that write.
        var latencies: [Double] = []
        for i in 0..<20 {
            let id = "fresh\(i)"
            docs[id] = #"{"type":"a","k":"fresh\#(i)","n":1,"s":"zz"}"#
            let start = ContinuousClock.now
            try set(id, docs[id]!)
            let r = try server.views(
                "GET",
                "/demo/_design/test/_view/by_k?"
                    + queryEncode([("stale", "false"), ("reduce", "false"), ("key", #""fresh\#(i)""#)]))
            let elapsed = ContinuousClock.now - start
            latencies.append(Double(elapsed.components.attoseconds) / 1e15 + Double(elapsed.components.seconds) * 1e3)
            #expect(r.status == 200 && r.text.contains(#""id":"\#(id)""#), "\(r.text)")
        }
        latencies.sort()
        let note =
            "stale=false after one write: median \(latencies[latencies.count / 2]) ms, max \(latencies.last!) ms\n"
        print(note)
        try? note.write(
            to: TestOutput.directory.appendingPathComponent("views-stale-false.txt"), atomically: true, encoding: .utf8)

        // Restart: the index resumes from its stored seqnos; more writes after it.
        #expect(server.stop() == 0)
        try server.start()
        try server.waitForViews()
        try check("restart")
        let kv2 = try TestKVClient(port: server.kvPort)
        for i in 0..<50 {
            let id = "after\(i)"
            docs[id] = TestDesign.randomDoc(&rng)
            let r = try kv2.request(
                .set, key: id, value: Array(docs[id]!.utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 0),
                datatype: 1)
            #expect(r.status == .success)
        }
        try check("after restart")

        // Errors in CouchDB's shape.
        let e1 = try server.views("GET", "/demo/_design/test/_view/by_k?" + queryEncode([("count", "1")]))
        #expect(
            e1.status == 400
                && e1.text == #"{"error":"query_parse_error","reason":"Query parameter 'count' is now 'limit'."}"#)
        let e2 = try server.views("GET", "/demo/_design/test/_view/nope")
        #expect(e2.status == 404 && e2.text == #"{"error":"not_found","reason":"missing_named_view"}"#)
        // The bucket as couchApiBase names it (NAME+UUID, percent-encoded).
        let viaBase = try server.views(
            "GET", "/demo%2Bdeadbeef/_design/test/_view/by_k?stale=false&limit=1&reduce=false")
        #expect(viaBase.status == 200 && viaBase.text.hasPrefix(#"{"total_rows":"#))
        // POST keys.
        let post = try server.views(
            "POST", "/demo/_design/test/_view/by_k?stale=false&reduce=false", body: Array(#"{"keys":["fresh3"]}"#.utf8))
        #expect(post.status == 200 && post.text.contains(#""id":"fresh3""#))
        // DELETE.
        let del = try server.views("DELETE", "/demo/_design/test")
        #expect(del.status == 200 && del.text == #"{"ok":true,"id":"_design/test"}"#)
        #expect(try server.views("GET", "/demo/_design/test").status == 404)
    }
}

@Suite(.serialized, .onTestThreads) struct ViewsClusterProcessTests {
    /// Proves scatter/gather on a real two-node cluster: after a rebalance spreads the vBuckets over
    /// both nodes, documents written to each vBucket's active node are indexed where they live, and
    /// queries on either node's views port merge both nodes' answers into exactly the brute-force
    /// evaluation over all documents (random documents, random queries over every parameter); then a
    /// rebalance that ejects one node moves its vBuckets and documents to the other, whose index
    /// follows (still equal to brute force). A design document stored before the second node joined
    /// reaches it with the first query that needs it.
    @Test func scatterGatherOnTwoNodes() throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["SETTEE_SEED"] ?? "") ?? UInt64.random(in: 0...UInt64.max)
        print("ViewsClusterProcessTests seed \(seed)")
        var rng = SplitMix64(seed: seed)
        let a = try ServerProcess(name: "views-a")
        let b = try ServerProcess(name: "views-b")
        defer { [a, b].forEach { $0.stopAndRemove() } }
        for s in [a, b] { try s.start() }
        try a.initialize(replicaNumber: 0)
        try a.waitForViews()
        // Stored before b joins: b gets it from the first query that needs it.
        #expect(try a.views("PUT", "/demo/_design/test", body: TestDesign.body).status == 201)
        #expect(try ClusterHarness.addNode(a, b).status == 200)
        _ = try ClusterHarness.rebalance(a, known: [a, b])
        #expect(
            try ClusterHarness.eventually {
                let maps = try [a, b].map { try ClusterHarness.map($0) }
                return maps[0].servers.count == 2 && maps.allSatisfy { $0.chains == maps[0].chains }
            })
        try b.waitForViews()

        // Writes routed by the map (a smart client's job).
        let map = try ClusterHarness.map(a)
        var clients: [String: TestKVClient] = [:]
        for s in [a, b] { clients["127.0.0.1:\(s.kvPort)"] = try TestKVClient(port: s.kvPort) }
        var docs: [String: String] = [:]
        for i in 0..<600 {
            let id = "doc\(i)"
            docs[id] = TestDesign.randomDoc(&rng)
            let vb = Int(VBucketHash.vbucket(forKey: Array(id.utf8)).rawValue)
            let client = try #require(clients[map.servers[map.chains[vb][0]]])
            let r = try client.request(
                .set, key: id, value: Array(docs[id]!.utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 0),
                datatype: 1)
            #expect(r.status == .success)
        }
        func check(_ phase: String, via node: ServerProcess) throws {
            try node.expectViewsMatchBruteForce(phase, docs: docs, seed: seed, queries: 25, rng: &rng)
        }
        try check("via a", via: a)
        #expect(try b.views("GET", "/demo/_design/test").status == 200)
        try check("via b", via: b)
        // A local-only answer covers only that node's vBuckets.
        let localA = try a.views("GET", "/demo/_design/test/_view/plain?stale=false&_local=true")
        let all = try a.views("GET", "/demo/_design/test/_view/plain?stale=false")
        #expect(localA.status == 200 && all.status == 200 && localA.body.count < all.body.count)

        // Rebalance with data: eject b; its vBuckets (and documents) move to a, whose index picks up
        // the arriving vBuckets; answers still equal brute force.
        _ = try ClusterHarness.rebalance(a, known: [a, b], ejected: [b], timeout: 240)
        #expect(try ClusterHarness.eventually { try ClusterHarness.map(a).servers.count == 1 })
        try check("after ejecting b", via: a)
    }
}
