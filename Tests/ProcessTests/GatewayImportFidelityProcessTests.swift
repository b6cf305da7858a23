import Foundation
import NIOHTTP1
import SetteeClient
import SetteeJSON
import SetteeSubdoc
import SetteeTestSupport
import Testing

/// What a KV client (an SDK application) writes is what the gateway's clients read, and the gateway's import
/// changes nothing the application set (issue 67, items 1, 3, 4 and 5): a real node and a real `settee-gateway`
/// importing from its bucket, in both layouts (shared bucket access, and the 1.x one with `_sync` in the body).
@Suite("Gateway import fidelity (real processes)", .serialized, .onTestThreads)
struct GatewayImportFidelityProcessTests {
    /// A node with bucket `demo`, a gateway importing from it, and a smart client as the SDK application. With `shared`
    /// the config leaves `enable_shared_bucket_access` out (its default, issue 67 item 11), else sets it `false`.
    struct Setup {
        let node: ServerProcess
        let gateway: GatewayProcess
        let client: BucketClient
        var base: String { "http://127.0.0.1:\(gateway.port)/demo" }
        var admin: String { "http://127.0.0.1:\(gateway.adminPort)" }

        static func start(_ name: String, shared: Bool) async throws -> Setup {
            let node = try ServerProcess(name: name)
            try node.start()
            try node.initialize(authType: "sasl")
            let gateway = try GatewayProcess(
                name: name,
                config: """
                    {"interface": ":4984", "adminInterface": "127.0.0.1:4985",
                     "databases": {"demo": {"server": "http://127.0.0.1:\(node.adminPort)", "bucket": "demo",
                       "username": "Administrator", "password": "password", "import_docs": true,
                       \(shared ? "" : #""enable_shared_bucket_access": false,"#)
                       "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]}}}}}
                    """)
            try gateway.start()
            let client = try await BucketClient.connect(
                ChangeStreamProcessTests.options(node), logger: quietClientLogger)
            return Setup(node: node, gateway: gateway, client: client)
        }

        /// Stops both processes (the client's connections close with the node; `close` releases its loops).
        func stop() {
            let client = self.client
            Task { await client.close() }
            _ = gateway.stop()
            node.stopAndRemove()
        }

        func get(_ path: String) async throws -> (status: Int, json: JSON?) {
            let r = try await GatewayHTTP.request(.GET, "\(base)/\(path)", headers: [("Accept", "application/json")])
            return (r.status, try? JSON.parse(r.body))
        }

        /// Waits until the gateway serves `id` with `v` equal to `value` (the import happened).
        func waitForImport(_ id: String, v value: Int) async -> Bool {
            await GatewaySharedBucketProcessTests.eventually {
                try await get(id).json?["v"]?.intValue == value
            }
        }
    }

    static func json(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test("an import keeps the item's expiry, flags and user XATTRs", arguments: [true, false])
    func importKeepsTheApplicationsItemMetadata(shared: Bool) async throws {
        // Proves (item 1): an SDK document written with a TTL, the JSON common flags and a user XATTR, imported by
        // the gateway, still has that expiry, those flags and that XATTR afterwards, in both layouts; with shared
        // access its body is byte for byte the application's. Before, the import's write cleared the expiry.
        let s = try await Setup.start("gw-fid-ttl-\(shared)", shared: shared)
        defer { s.stop() }
        let body = #"{"channels":["c"],"v":2}"#
        _ = try await s.client.mutateIn(
            "ttl",
            .multiMutation(
                [
                    SubdocSpec(
                        operation: .command(.dictUpsert), flags: [.xattrPath, .mkdirP], path: Array("app".utf8),
                        value: Self.json(#"{"k":1}"#)),
                    SubdocSpec(operation: .wholeDocumentSet, path: [], value: Self.json(#"{"v":1}"#)),
                ], docFlags: .add))
        // A plain SET keeps the document's XATTRs (as kv_engine does) and sets the flags and a one-hour expiry.
        _ = try await s.client.upsert("ttl", Self.json(body), flags: 0x0200_0006, expiry: 3600, datatype: 1)
        #expect(await s.waitForImport("ttl", v: 2))
        let read = try #require(
            try await s.client.lookupIn(
                "ttl",
                .multiLookup([
                    SubdocSpec(operation: .command(.get), flags: .xattrPath, path: Array("$document".utf8)),
                    SubdocSpec(operation: .command(.get), flags: .xattrPath, path: Array("app".utf8)),
                    SubdocSpec(operation: .wholeDocumentGet, path: []),
                ])))
        let document = try JSON.parse(read.results[0].value)
        #expect((document["exptime"]?.intValue ?? 0) > Int(Date().timeIntervalSince1970), "\(document)")
        #expect(document["flags"]?.intValue == 0x0200_0006, "\(document)")
        #expect(read.results[1].status == 0 && String(decoding: read.results[1].value, as: UTF8.self) == #"{"k":1}"#)
        if shared { #expect(String(decoding: read.results[2].value, as: UTF8.self) == body) }
        // The gateway serves the application's body.
        let served = try await s.get("ttl")
        // `1-` or `2-`: the change stream may have imported the first body before the upsert replaced it.
        #expect(served.json?["v"]?.intValue == 2 && served.json?["_rev"] != nil)
    }

    @Test("bodies with reserved top-level properties are refused at import, left as written", arguments: [true, false])
    func reservedPropertiesAreRefusedAtImport(shared: Bool) async throws {
        // Proves (item 3): KV documents holding `_id` (a CouchDB export naming another document), `_rev`, `_deleted`
        // or a `_sync` that is no gateway metadata are not imported: GET answers 404 "Not imported", `_changes`
        // never lists them, a pull of the channel (`_changes` + `_bulk_get`) gets every row it asks for, the items
        // keep their bytes, and the refusals are counted (`import_error_count`) and logged. A document the gateway
        // served before an SDK overwrote it that way keeps serving its last revision. Before, `b` was served with
        // two `_id`s (shared) or imported with the members silently dropped (1.x).
        let s = try await Setup.start("gw-fid-rsv-\(shared)", shared: shared)
        defer { s.stop() }
        let reserved: [(String, String)] = [
            ("b", #"{"_id":"a","channels":["c"],"v":1}"#),
            ("r", #"{"_rev":"1-abc","channels":["c"],"v":1}"#),
            ("d", #"{"_deleted":true,"channels":["c"],"v":1}"#),
            ("s", #"{"_sync":{"not":"metadata"},"channels":["c"],"v":1}"#),
        ]
        let put = try await GatewayHTTP.request(.PUT, "\(s.base)/prev", body: Self.json(#"{"channels":["c"],"v":1}"#))
        #expect(put.status == 201, "\(put.text)")
        for (id, text) in reserved { _ = try await s.client.upsert(id, Self.json(text), datatype: 1) }
        _ = try await s.client.upsert("prev", Self.json(#"{"_id":"a","channels":["c"],"v":9}"#), datatype: 1)
        _ = try await s.client.upsert("good", Self.json(#"{"channels":["c"],"v":1}"#), datatype: 1)
        #expect(await s.waitForImport("good", v: 1))
        for (id, text) in reserved {
            let r = try await GatewayHTTP.request(.GET, "\(s.base)/\(id)")
            #expect(r.status == 404 && r.text.contains("Not imported"), "\(id): \(r.status) \(r.text)")
            #expect(String(decoding: try await s.client.get(id).value, as: UTF8.self) == text, "\(id)")
        }
        let prev = try await s.get("prev")
        #expect(prev.status == 200 && prev.json?["v"]?.intValue == 1, "\(String(describing: prev.json))")
        // A pull of the channel: every row `_changes` lists is fetched without an error row.
        let changes = try #require(try await s.get("_changes?filter=sync_gateway/bychannel&channels=c").json)
        // The feed's `_user/GUEST` row is the reader's own record, not a document.
        let rows = (changes["results"]?.arrayValue ?? []).filter { $0["id"]?.stringValue?.hasPrefix("_user/") == false }
        let ids = Set(rows.compactMap { $0["id"]?.stringValue })
        #expect(ids == ["prev", "good"], "\(changes)")
        let wanted = rows.map { row in
            JSON.object([
                ("id", row["id"] ?? .null), ("rev", row["changes"]?.arrayValue?.first?["rev"] ?? .null),
            ])
        }
        let bulk = try await GatewayHTTP.request(
            .POST, "\(s.base)/_bulk_get?revs=true&latest=true",
            body: JSON.object([("docs", .array(wanted))]).serialized(), headers: [("Accept", "application/json")])
        let results = try JSON.parse(bulk.body)["results"]?.arrayValue ?? []
        #expect(
            results.count == 2 && results.allSatisfy { $0["docs"]?.arrayValue?.first?["ok"] != nil }, "\(bulk.text)")
        let expvar = try JSON.parse(try await GatewayHTTP.request(.GET, "\(s.admin)/_expvar").body)
        let refused = expvar["syncgateway"]?["per_db"]?["demo"]?["shared_bucket_import"]?["import_error_count"]
        #expect((refused?.intValue ?? 0) >= reserved.count + 1, "\(expvar)")
        let log = (try? String(contentsOf: s.gateway.logURL, encoding: .utf8)) ?? ""
        #expect(log.contains("not imported: the body has a reserved top-level property"))
    }

    @Test("bodies that are not UTF-8 are refused, never rewritten with U+FFFD", arguments: [true, false])
    func nonUTF8BodiesAreRefused(shared: Bool) async throws {
        // Proves (the fresh-user trial's finding on items 1-3's kind): a KV value holding invalid UTF-8 inside a JSON
        // string (the node stores it as raw) is not imported: GET 404 "Not imported", the refusal counted, the item's
        // bytes unchanged; the same bytes sent to REST `PUT` or `_bulk_docs` answer 400, as CouchDB answers. Before,
        // both were stored with the bytes replaced by U+FFFD.
        let s = try await Setup.start("gw-fid-utf8-\(shared)", shared: shared)
        defer { s.stop() }
        let bad: [UInt8] = Array(#"{"v":""#.utf8) + [0xFF, 0xFE] + Array(#""}"#.utf8)
        _ = try await s.client.upsert("bad", bad)
        _ = try await s.client.upsert("good", Self.json(#"{"v":1}"#), datatype: 1)
        #expect(await s.waitForImport("good", v: 1))
        let read = try await GatewayHTTP.request(.GET, "\(s.base)/bad")
        #expect(read.status == 404 && read.text.contains("Not imported"), "\(read.status) \(read.text)")
        #expect(try await s.client.get("bad").value == bad)
        let put = try await GatewayHTTP.request(.PUT, "\(s.base)/rest", body: bad)
        #expect(put.status == 400 && put.text.contains("UTF-8"), "\(put.status) \(put.text)")
        let bulk = try await GatewayHTTP.request(
            .POST, "\(s.base)/_bulk_docs",
            body: Array(#"{"docs":[{"_id":"b1","v":""#.utf8) + [0xC3] + Array(#""}]}"#.utf8))
        #expect(bulk.status == 400, "\(bulk.status) \(bulk.text)")
        #expect(try await GatewayHTTP.request(.GET, "\(s.base)/rest").status == 404)
        let expvar = try JSON.parse(try await GatewayHTTP.request(.GET, "\(s.admin)/_expvar").body)
        let refused = expvar["syncgateway"]?["per_db"]?["demo"]?["shared_bucket_import"]?["import_error_count"]
        #expect((refused?.intValue ?? 0) >= 1, "\(expvar)")
    }

    @Test("KV updates in a row keep the whole history (1.x layout)")
    func kvUpdatesInARowKeepTheHistory() async throws {
        // Proves (item 4): without shared access, two SDK upserts in a row of a document the gateway wrote as `1-`
        // make `3-` whose `_revisions` still reach `1-`, so a replica holding `1-` (it missed the `2-` import) takes
        // `3-` as a descendant, not a conflict. Before, each import of a body without `_sync` started from the
        // winner alone: `3-`'s history was `[3, 2]`.
        let s = try await Setup.start("gw-fid-hist", shared: false)
        defer { s.stop() }
        let put = try await GatewayHTTP.request(.PUT, "\(s.base)/doc", body: Self.json(#"{"channels":["c"],"v":1}"#))
        let rev1 = try #require(try JSON.parse(put.body)["rev"]?.stringValue)
        _ = try await s.client.upsert("doc", Self.json(#"{"channels":["c"],"v":2}"#), datatype: 1)
        #expect(await s.waitForImport("doc", v: 2))
        _ = try await s.client.upsert("doc", Self.json(#"{"channels":["c"],"v":3}"#), datatype: 1)
        #expect(await s.waitForImport("doc", v: 3))
        let doc = try #require(try await s.get("doc?revs=true").json)
        let ids = doc["_revisions"]?["ids"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(doc["_rev"]?.stringValue?.hasPrefix("3-") == true, "\(doc)")
        #expect(ids.count == 3 && "1-" + ids[2] == rev1, "\(doc)")
        // A replica at `1-` asks what it lacks of `3-`: `1-` is a possible ancestor, not a second root.
        let diff = try await GatewayHTTP.request(
            .POST, "\(s.base)/_revs_diff",
            body: Self.json(#"{"doc":["\#(doc["_rev"]?.stringValue ?? "")","\#(rev1)","9-zzz"]}"#))
        let missing = try JSON.parse(diff.body)["doc"]?["missing"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(missing == ["9-zzz"], "\(diff.text)")
    }

    @Test("a revision replaced by an import can still be fetched, or moved past with latest", arguments: [true, false])
    func replacedRevisionsStayFetchable(shared: Bool) async throws {
        // Proves (item 5): after an SDK update replaces the gateway's `1-`, a puller `_changes` told about `1-` still
        // gets its body (`GET ?rev=`, `_bulk_get`), kept as the import's parent body from the revision cache; and
        // with `latest=true` (PouchDB's and CouchDB's replicators send it) `_bulk_get` and `open_revs` answer the
        // leaf that replaced it. Before, both answered 404 "missing" and a PouchDB pull failed its batch.
        let s = try await Setup.start("gw-fid-old-\(shared)", shared: shared)
        defer { s.stop() }
        let put = try await GatewayHTTP.request(.PUT, "\(s.base)/doc", body: Self.json(#"{"channels":["c"],"v":1}"#))
        let rev1 = try #require(try JSON.parse(put.body)["rev"]?.stringValue)
        _ = try await s.client.upsert("doc", Self.json(#"{"channels":["c"],"v":2}"#), datatype: 1)
        #expect(await s.waitForImport("doc", v: 2))
        let rev2 = try #require(try await s.get("doc").json?["_rev"]?.stringValue)

        let old = try await s.get("doc?rev=\(rev1)")
        #expect(old.status == 200 && old.json?["v"]?.intValue == 1, "\(String(describing: old.json))")
        let request = Self.json(#"{"docs":[{"id":"doc","rev":"\#(rev1)"}]}"#)
        let plain = try await GatewayHTTP.request(
            .POST, "\(s.base)/_bulk_get?revs=true", body: request, headers: [("Accept", "application/json")])
        #expect(
            try JSON.parse(plain.body)["results"]?.arrayValue?.first?["docs"]?.arrayValue?.first?["ok"]?["v"]?.intValue
                == 1, "\(plain.text)")
        let latest = try await GatewayHTTP.request(
            .POST, "\(s.base)/_bulk_get?revs=true&latest=true", body: request, headers: [("Accept", "application/json")]
        )
        let ok = try JSON.parse(latest.body)["results"]?.arrayValue?.first?["docs"]?.arrayValue?.first?["ok"]
        #expect(ok?["_rev"]?.stringValue == rev2 && ok?["v"]?.intValue == 2, "\(latest.text)")
        let revisions = ok?["_revisions"]?["ids"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(revisions.count == 2 && "1-" + revisions[1] == rev1, "\(latest.text)")
        let openRevs = try await s.get("doc?open_revs=%5B%22\(rev1)%22%5D&latest=true&revs=true")
        #expect(
            openRevs.json?.arrayValue?.first?["ok"]?["_rev"]?.stringValue == rev2,
            "\(String(describing: openRevs.json))")
    }
}
