import Foundation
import NIOHTTP1
import SetteeClient
import SetteeCore
import SetteeJSON
import SetteeTestSupport
import Testing

/// Issue 67's items 2, 6 and 8 against real `settee-gateway` (and `settee-server`) processes: a document's depth is
/// bounded by `Limits.maxDocumentDepth` on the document itself at every entry point, with nothing dropped or
/// altered, and a reserved path segment written percent-encoded routes as its decoded form.
@Suite("settee-gateway document depth and encoded paths (real processes)", .serialized, .onTestThreads)
struct GatewayDocumentFidelityProcessTests {
    /// `{"channels":["c"],"id":ID,"d":[[…[1]…]]}` nesting `depth` levels in all (the object itself counts 1).
    static func deep(_ depth: Int, id: String) -> [UInt8] {
        Array(#"{"channels":["c"],"id":"\#(id)","d":"#.utf8) + Array(repeating: UInt8(ascii: "["), count: depth - 1)
            + [UInt8(ascii: "1")] + Array(repeating: UInt8(ascii: "]"), count: depth - 1) + [UInt8(ascii: "}")]
    }

    /// A document as a client reads it, without the gateway's `_id` and `_rev`.
    static func application(_ reply: GatewayHTTP.Reply) throws -> JSON {
        var doc = try JSON.parse(reply.body, maxDepth: Limits.maxJSONDepth)
        doc.set("_id", nil)
        doc.set("_rev", nil)
        return doc
    }

    static func config(server: String?, shared: Bool) -> String {
        let bucket =
            server.map {
                #""server": "\#($0)", "bucket": "demo", "username": "Administrator", "password": "password","#
            } ?? #""server": "walrus:","#
        return """
            {"interface": ":4984", "adminInterface": "127.0.0.1:4985",
             "databases": {"demo": {\(bucket) "import_docs": true, "enable_shared_bucket_access": \(shared),
               "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]}}}}}
            """
    }

    @Test(arguments: [false, true])
    func deepDocumentsWrittenOverKVAndRESTReadBackExactlyOrAreRefusedUnaltered(shared: Bool) async throws {
        // Proves (issue 67 item 2), in both bucket layouts: documents 129, 136, 137, 500 and `maxDocumentDepth` deep
        // written by a KV client are imported with every field (before, 129-136 deep became `{"_sync":…}` alone
        // without shared access, all with one revision, and deeper ones were silently not imported); deeper ones
        // (one past the bound, 5,000, 100,000) are refused with a log line naming them, counted as import errors,
        // and left byte for byte as written; the same depths through REST `PUT` are stored and read back exactly,
        // or answered 400.
        let node = try ServerProcess(name: "gw-depth-\(shared)")
        defer { node.stopAndRemove() }
        try node.start()
        try node.initialize(authType: "sasl")
        let gw = try GatewayProcess(
            name: "gw-depth-\(shared)",
            config: Self.config(server: "http://127.0.0.1:\(node.adminPort)", shared: shared))
        try gw.start()
        defer { gw.stop() }
        let base = "http://127.0.0.1:\(gw.port)/demo"
        let client = try await BucketClient.connect(ChangeStreamProcessTests.options(node), logger: quietClientLogger)
        defer { Task { await client.close() } }

        let bound = Limits.maxDocumentDepth
        let accepted = [129, 136, 137, 500, bound]
        let refused = [bound + 1, 5_000, 100_000]
        for depth in accepted + refused {
            _ = try await client.upsert(
                "kv-\(depth)", Self.deep(depth, id: "kv-\(depth)"), flags: 0x0200_0006, datatype: 1)
        }
        var revisions: Set<String> = []
        for depth in accepted {
            let written = try JSON.parse(Self.deep(depth, id: "kv-\(depth)"), maxDepth: bound)
            var read: JSON?
            let imported = await GatewaySharedBucketProcessTests.eventually {
                let reply = try await GatewayHTTP.request(.GET, "\(base)/kv-\(depth)")
                guard reply.status == 200 else { return false }
                read = try Self.application(reply)
                revisions.insert(try JSON.parse(reply.body, maxDepth: Limits.maxJSONDepth)["_rev"]?.stringValue ?? "")
                return true
            }
            #expect(imported, "kv-\(depth) was not imported")
            #expect(
                read == written, "kv-\(depth) reads back altered: \(read.map { String($0.text.prefix(200)) } ?? "")")
            // The application's item keeps its fields too (without shared access the gateway adds `_sync` beside them).
            var item = try JSON.parse(try await client.get("kv-\(depth)").value, maxDepth: Limits.maxJSONDepth)
            item.set("_sync", nil)
            #expect(item == written, "kv-\(depth)'s item lost fields")
        }
        #expect(revisions.count == accepted.count, "documents with different bodies share a revision: \(revisions)")
        for depth in refused {
            let logged = await GatewaySharedBucketProcessTests.eventually {
                let log = (try? String(contentsOf: gw.logURL, encoding: .utf8)) ?? ""
                return log.split(separator: "\n").contains {
                    $0.contains("nests deeper than the document bound") && $0.contains("kv-\(depth)")
                }
            }
            #expect(logged, "no log line for kv-\(depth)")
            #expect(try await client.get("kv-\(depth)").value == Self.deep(depth, id: "kv-\(depth)"))
            let reply = try await GatewayHTTP.request(.GET, "\(base)/kv-\(depth)")
            #expect(reply.status == 404, "kv-\(depth): \(reply.status) \(reply.text.prefix(200))")
        }
        let expvar = try JSON.parse(
            try await GatewayHTTP.request(.GET, "http://127.0.0.1:\(gw.adminPort)/_expvar").body)
        let errors = expvar["syncgateway"]?["per_db"]?["demo"]?["shared_bucket_import"]?["import_error_count"]
        #expect((errors?.intValue ?? 0) >= refused.count, "\(expvar.text.prefix(2_000))")

        for depth in accepted {
            let put = try await GatewayHTTP.request(.PUT, "\(base)/rest-\(depth)", body: Self.deep(depth, id: "r"))
            #expect(put.status == 201, "rest-\(depth): \(put.text.prefix(200))")
            let read = try Self.application(try await GatewayHTTP.request(.GET, "\(base)/rest-\(depth)"))
            #expect(read == (try JSON.parse(Self.deep(depth, id: "r"), maxDepth: bound)), "rest-\(depth)")
        }
        for depth in refused {
            let put = try await GatewayHTTP.request(.PUT, "\(base)/rest-\(depth)", body: Self.deep(depth, id: "r"))
            #expect(put.status == 400, "rest-\(depth): \(put.status)")
            #expect(put.text.contains("deeper than \(bound)"), "\(put.text.prefix(200))")
        }
    }

    @Test(arguments: [true, false])
    func aTooDeepDocumentFailsOnlyItsOwnBulkDocsRow(newEdits: Bool) async throws {
        // Proves (issue 67 item 8), with `new_edits` true and false: a `_bulk_docs` holding a 127-deep document, one
        // nested one past `maxDocumentDepth`, one 100,000 deep and a flat one writes the good ones (read back
        // exactly) and answers 400 on the too-deep rows alone, naming their ids. Before, the wrapper counted toward
        // the bound and the whole batch failed, so a Lite push stopped at 0 written.
        let gw = try GatewayProcess(name: "gw-bulk-depth-\(newEdits)", config: Self.config(server: nil, shared: false))
        try gw.start()
        defer { gw.stop() }
        let base = "http://127.0.0.1:\(gw.port)/demo"
        let bound = Limits.maxDocumentDepth
        let depths = [("ok127", 127), ("deep", bound + 1), ("hostile", 100_000), ("flat", 1)]
        var body = Array(#"{"new_edits":\#(newEdits),"docs":["#.utf8)
        for (i, (id, depth)) in depths.enumerated() {
            if i > 0 { body.append(UInt8(ascii: ",")) }
            var doc = depth == 1 ? Array(#"{"channels":["c"]}"#.utf8) : Self.deep(depth, id: id)
            doc.removeLast()  // the closing brace: the row's own members follow
            doc += Array(#","_id":"\#(id)""#.utf8)
            if !newEdits { doc += Array(#","_rev":"1-abc","_revisions":{"start":1,"ids":["abc"]}"#.utf8) }
            body += doc + [UInt8(ascii: "}")]
        }
        body += Array("]}".utf8)
        let reply = try await GatewayHTTP.request(.POST, "\(base)/_bulk_docs", body: body)
        #expect(reply.status == 201, "\(reply.text.prefix(300))")
        let rows = try JSON.parse(reply.body).arrayValue ?? []
        #expect(rows.count == depths.count, "\(reply.text)")
        for (row, (id, depth)) in zip(rows, depths) {
            #expect(row["id"]?.stringValue == id, "\(row)")
            if depth > bound {
                #expect(row["status"]?.intValue == 400 && row["rev"] == nil, "\(row)")
                #expect(try await GatewayHTTP.request(.GET, "\(base)/\(id)").status == 404)
            } else {
                #expect(row["rev"]?.stringValue != nil && row["error"] == nil, "\(row)")
                let read = try Self.application(try await GatewayHTTP.request(.GET, "\(base)/\(id)"))
                #expect(read["channels"] == ["c"] && read["d"] == (depth == 1 ? nil : Self.expectedD(depth)), "\(id)")
            }
        }
    }

    /// The `d` member of `deep(depth, …)`.
    static func expectedD(_ depth: Int) -> JSON? {
        (try? JSON.parse(deep(depth, id: "x"), maxDepth: Limits.maxDocumentDepth))?["d"]
    }

    @Test func reservedSegmentsWrittenPercentEncodedRouteAsTheirDecodedForm() async throws {
        // Proves (issue 67 item 6) on both ports: `PUT`/`GET /db/_local%2Fckpt1` is the local document `ckpt1` (it
        // answered 404 "unknown URL"), as are `%5Flocal/ckpt1` and `_local%2fckpt1`; `_user%2Fjane` is the user
        // `jane` on the admin port; an escaped `/` elsewhere stays inside its name: `/db/a%2Fb` is the document
        // `a/b` and `/db/doc/att%2Fname` the attachment `att/name`, the same as `/db/doc/att/name`.
        let gw = try GatewayProcess(name: "gw-encoded-paths", config: Self.config(server: nil, shared: false))
        try gw.start()
        defer { gw.stop() }
        for port in [gw.port, gw.adminPort] {
            let base = "http://127.0.0.1:\(port)/demo"
            let put = try await GatewayHTTP.request(
                .PUT, "\(base)/_local%2Fckpt\(port)", body: Array(#"{"n":\#(port)}"#.utf8))
            #expect(put.status == 201, "\(port): \(put.status) \(put.text)")
            for path in ["_local%2F", "_local/", "%5Flocal/", "_local%2f", "%5Flocal%2F"].map({ $0 + "ckpt\(port)" }) {
                let get = try await GatewayHTTP.request(.GET, "\(base)/\(path)")
                #expect(get.status == 200, "\(port) \(path): \(get.status) \(get.text)")
                #expect((try? JSON.parse(get.body))?["n"]?.intValue == port, "\(port) \(path): \(get.text)")
            }
            #expect(try await GatewayHTTP.request(.GET, "\(base)/_local%2F").status == 404)
        }
        let base = "http://127.0.0.1:\(gw.port)/demo"
        let admin = "http://127.0.0.1:\(gw.adminPort)/demo"
        let user = try await GatewayHTTP.request(
            .PUT, "\(admin)/_user%2Fjane", body: Array(#"{"password":"pw-jane","admin_channels":["c"]}"#.utf8))
        #expect(user.status == 201, "\(user.text)")
        #expect(try await GatewayHTTP.request(.GET, "\(admin)/_user/%6Aane").status == 200)

        let slashed = try await GatewayHTTP.request(.PUT, "\(base)/a%2Fb", body: Array(#"{"channels":["c"]}"#.utf8))
        #expect(slashed.status == 201, "\(slashed.text)")
        #expect((try? JSON.parse(slashed.body))?["id"]?.stringValue == "a/b")
        let rev = try #require((try? JSON.parse(slashed.body))?["rev"]?.stringValue)
        let att = try await GatewayHTTP.request(
            .PUT, "\(base)/a%2Fb/att%2Fname?rev=\(rev)", body: Array("bytes".utf8),
            headers: [("Content-Type", "text/plain")])
        #expect(att.status == 201, "\(att.text)")
        for path in ["a%2Fb/att%2Fname", "a%2Fb/att/name"] {
            let get = try await GatewayHTTP.request(.GET, "\(base)/\(path)")
            #expect(get.status == 200 && get.text == "bytes", "\(path): \(get.status) \(get.text)")
        }
        let doc = try JSON.parse(try await GatewayHTTP.request(.GET, "\(base)/a%2Fb").body)
        #expect(doc["_attachments"]?["att/name"] != nil, "\(doc)")
    }
}
