import Foundation
import NIOHTTP1
import SetteeClient
import SetteeJSON
import SetteeTestSupport
import Testing

/// Real `settee-gateway` processes with `"server": "http://..."` on a bucket of real `settee-server` nodes.
@Suite("settee-gateway on a cluster bucket (real processes)", .serialized, .onTestThreads)
struct GatewayClusterHTTPProcessTests {
    static func config(_ node: ServerProcess, password: String = "password") -> String {
        """
        {"interface": ":4984", "adminInterface": "127.0.0.1:4985", "log": ["HTTP+"],
         "databases": {"demo": {"server": "http://127.0.0.1:\(node.adminPort)", "bucket": "demo",
           "username": "Administrator", "password": "\(password)", "import_docs": "continuous",
           "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]}},
           "sync": `function(doc) {channel(doc.channels);}`}}}
        """
    }

    static func json(_ reply: GatewayHTTP.Reply) throws -> JSON { try JSON.parse(reply.body) }

    /// `_changes?since=0` of `base` as doc id -> (seq, first rev).
    static func changes(_ base: String, query: String = "") async throws -> [String: (Double, String)] {
        let r = try await GatewayHTTP.request(.GET, "\(base)/_changes?since=0\(query)")
        var out: [String: (Double, String)] = [:]
        for row in try json(r)["results"]?.arrayValue ?? [] {
            guard let id = row["id"]?.stringValue else { continue }
            let seq: Double
            switch row["seq"] {
            case .integer(let i)?: seq = Double(i)
            case .number(let d)?: seq = d
            default: seq = -1
            }
            out[id] = (seq, row["changes"]?.arrayValue?.first?["rev"]?.stringValue ?? "")
        }
        return out
    }

    /// Two `settee-gateway` processes with seed 000's config pointed at one bucket of a 2-node cluster:
    /// documents written through either are listed by both `_changes` feeds with the same sequence and
    /// revision; a document written straight into the bucket with the smart client (as `settee kv set` does)
    /// is imported: it gets a `1-` revision, is routed by the sync function into channel `public`, and shows
    /// in `_changes` and in the `bychannel` feed of that channel. A wrong bucket password makes the gateway
    /// exit 1 naming the database's `server`.
    @Test func twoGatewayProcessesShareAClusterBucket() async throws {
        let a = try ServerProcess(name: "gwh-a")
        let b = try ServerProcess(name: "gwh-b")
        defer { [a, b].forEach { $0.stopAndRemove() } }
        try a.start()
        try b.start()
        try ClusterHarness.formCluster([a, b], authType: "sasl")

        let refused = try GatewayProcess(name: "gwh-bad", config: Self.config(a, password: "wrong"))
        let (status, output) = try refused.runToExit()
        #expect(status == 1 && output.contains("wrong username or password"), "\(status): \(output)")

        let gw1 = try GatewayProcess(name: "gwh-1", config: Self.config(a))
        let gw2 = try GatewayProcess(name: "gwh-2", config: Self.config(b))
        try gw1.start()
        try gw2.start()
        defer {
            gw1.stop()
            gw2.stop()
        }
        let base1 = "http://127.0.0.1:\(gw1.port)/demo"
        let base2 = "http://127.0.0.1:\(gw2.port)/demo"
        var ids: Set<String> = []
        for i in 0..<25 {
            for (base, prefix) in [(base1, "one"), (base2, "two")] {
                let r = try await GatewayHTTP.request(
                    .PUT, "\(base)/\(prefix)-\(i)", body: Array(#"{"n":\#(i),"channels":["c"]}"#.utf8))
                #expect(r.status == 201, "\(r.text)")
                ids.insert("\(prefix)-\(i)")
            }
        }
        let client = try await BucketClient.connect(ChangeStreamProcessTests.options(a), logger: quietClientLogger)
        _ = try await client.upsert(
            "kv-doc", Array(#"{"title":"from kv","channels":["public"]}"#.utf8), flags: 0x0200_0006, datatype: 1)
        await client.close()
        ids.insert("kv-doc")

        var f1: [String: (Double, String)] = [:]
        var f2: [String: (Double, String)] = [:]
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            f1 = try await Self.changes(base1)
            f2 = try await Self.changes(base2)
            if ids.isSubset(of: Set(f1.keys)) && ids.isSubset(of: Set(f2.keys)) { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        #expect(ids.isSubset(of: Set(f1.keys)), "gateway 1 lacks \(ids.subtracting(f1.keys).sorted().prefix(5))")
        #expect(ids.isSubset(of: Set(f2.keys)), "gateway 2 lacks \(ids.subtracting(f2.keys).sorted().prefix(5))")
        let differ = ids.filter { f1[$0]?.0 != f2[$0]?.0 || f1[$0]?.1 != f2[$0]?.1 }
        #expect(differ.isEmpty, "sequences or revisions differ for \(differ.sorted().prefix(5))")
        #expect(f1["kv-doc"]?.1.hasPrefix("1-") == true, "imported as \(f1["kv-doc"]?.1 ?? "nothing")")
        let channel = try await Self.changes(base2, query: "&filter=sync_gateway/bychannel&channels=public")
        // Besides the caller's own `_user/` row, as Sync Gateway lists it.
        let docsInChannel = Set(channel.keys.filter { !$0.hasPrefix("_user/") })
        #expect(docsInChannel == ["kv-doc"], "channel public lists \(channel.keys.sorted())")
        let doc = try await GatewayHTTP.request(.GET, "\(base1)/kv-doc")
        #expect(try Self.json(doc)["title"]?.stringValue == "from kv")
    }

    /// One gateway process on a one-node cluster keeps serving a replicator's pushes (`_bulk_docs` with
    /// `new_edits=false`) while a second node joins and half the vBuckets move; afterwards every pushed
    /// revision is pulled back (`_changes` lists each once, `GET ?rev=` returns it).
    @Test func pushesAndPullsThroughARebalance() async throws {
        let a = try ServerProcess(name: "gwh-reb-a")
        let b = try ServerProcess(name: "gwh-reb-b")
        defer { [a, b].forEach { $0.stopAndRemove() } }
        try a.start()
        try b.start()
        try a.initialize(replicaNumber: 1, authType: "sasl")
        let gw = try GatewayProcess(name: "gwh-reb", config: Self.config(a))
        try gw.start()
        defer { gw.stop() }
        let base = "http://127.0.0.1:\(gw.port)/demo"

        let pusher = Task { () -> (revs: [String: String], errors: [String]) in
            var revs: [String: String] = [:]
            var errors: [String] = []
            for batch in 0..<25 {
                var docs: [String] = []
                for j in 0..<20 {
                    let i = batch * 20 + j
                    let digest = String(format: "%032x", i + 1)
                    docs.append(
                        #"{"_id":"p-\#(i)","_rev":"1-\#(digest)","_revisions":{"start":1,"ids":["\#(digest)"]},"n":\#(i)}"#
                    )
                    revs["p-\(i)"] = "1-\(digest)"
                }
                let body = #"{"new_edits":false,"docs":["# + docs.joined(separator: ",") + "]}"
                do {
                    let r = try await GatewayHTTP.request(.POST, "\(base)/_bulk_docs", body: Array(body.utf8))
                    if r.status != 201 { errors.append("batch \(batch): \(r.status) \(r.text.prefix(200))") }
                    for row in try Self.json(r).arrayValue ?? [] where row["error"] != nil {
                        errors.append(row.text)
                    }
                } catch {
                    errors.append("batch \(batch): \(error)")
                }
                try? await Task.sleep(for: .milliseconds(50))
            }
            return (revs, errors)
        }
        try await Task.sleep(for: .milliseconds(300))
        #expect(try ClusterHarness.addNode(a, b).status == 200)
        let failure = try await ClusterHarness.rebalanceOffPool(a, known: [a, b])
        #expect(failure == nil, "\(failure ?? "")")
        let (revs, errors) = await pusher.value
        #expect(errors.isEmpty, "\(errors.count) push errors: \(errors.prefix(3))")

        let feed = try await Self.changes(base)
        let missing = revs.filter { feed[$0.key]?.1 != $0.value }
        #expect(missing.isEmpty, "\(missing.count) pushed revisions not in _changes")
        var unreadable: [String] = []
        for (id, rev) in revs.sorted(by: { $0.key < $1.key }).prefix(100) {
            let r = try await GatewayHTTP.request(.GET, "\(base)/\(id)?rev=\(rev)")
            if r.status != 200 { unreadable.append("\(id): \(r.status)") }
        }
        #expect(unreadable.isEmpty, "\(unreadable.prefix(3))")
    }
}
