import Foundation
import NIOHTTP1
import SetteeClient
import SetteeJSON
import SetteeTestSupport
import Testing

/// A `settee-gateway` process with `enable_shared_bucket_access` on a real node's bucket, used at once by a KV
/// client (the smart client, as an SDK application) and a REST client (as PouchDB): each sees only its own data
/// shape (docs/adr/0037).
@Suite("settee-gateway with shared bucket access (real processes)", .serialized, .onTestThreads)
struct GatewaySharedBucketProcessTests {
    static func config(_ node: ServerProcess) -> String {
        """
        {"interface": ":4984", "adminInterface": "127.0.0.1:4985",
         "databases": {"demo": {"server": "http://127.0.0.1:\(node.adminPort)", "bucket": "demo",
           "username": "Administrator", "password": "password", "import_docs": true,
           "enable_shared_bucket_access": true,
           "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]}}}}}
        """
    }

    static func json(_ r: GatewayHTTP.Reply) throws -> JSON { try JSON.parse(r.body) }

    /// Polls `check` for up to `seconds`.
    static func eventually(_ seconds: Double = 30, _ check: () async throws -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if (try? await check()) == true { return true }
            try? await Task.sleep(for: .milliseconds(100))
        }
        return (try? await check()) == true
    }

    @Test func sdkAndRESTClientsShareABucketEachSeeingItsOwnShape() async throws {
        // Proves: (1) a document written through the gateway reads over KV as exactly the application's JSON
        // (no `_sync`, `_id`, `_rev`), while `settee kv get --xattrs` shows `_sync` with the revision; (2) an SDK
        // update of it becomes a child revision (`3-` on `2-`, one leaf, no fork) and the KV body stays exactly
        // the SDK's bytes; (3) an SDK-created document is imported (`1-`); (4) a KV delete reaches `_changes` as a
        // deleted `4-` and the key stays deleted for KV readers.
        let node = try ServerProcess(name: "gw-sba")
        defer { node.stopAndRemove() }
        try node.start()
        try node.initialize(authType: "sasl")
        let gw = try GatewayProcess(name: "gw-sba", config: Self.config(node))
        try gw.start()
        defer { gw.stop() }
        let base = "http://127.0.0.1:\(gw.port)/demo"
        let client = try await BucketClient.connect(ChangeStreamProcessTests.options(node), logger: quietClientLogger)
        defer { Task { await client.close() } }

        // (1) The REST client's document, as KV readers see it.
        let put1 = try await GatewayHTTP.request(.PUT, "\(base)/doc", body: Array(#"{"channels":["c"],"v":1}"#.utf8))
        #expect(put1.status == 201, "\(put1.text)")
        let rev1 = try #require(try Self.json(put1)["rev"]?.stringValue)
        let put2 = try await GatewayHTTP.request(
            .PUT, "\(base)/doc", body: Array(#"{"_rev":"\#(rev1)","channels":["c"],"v":2}"#.utf8))
        let rev2 = try #require(try Self.json(put2)["rev"]?.stringValue)
        let kv = try await client.get("doc")
        #expect(String(decoding: kv.value, as: UTF8.self) == #"{"channels":["c"],"v":2}"#)
        let plain = try runCLI(["kv", "get", "doc"], server: node)
        #expect(plain.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == #"{"channels":["c"],"v":2}"#)
        let withXattrs = try runCLI(["kv", "get", "--xattrs", "doc"], server: node)
        let shown = try JSON.parse(Array(withXattrs.stdout.utf8))
        #expect(shown["xattrs"]?["_sync"]?["rev"]?.stringValue == rev2, "\(withXattrs.stdout)")
        #expect(shown["body"]?["v"]?.intValue == 2 && shown["body"]?["_sync"] == nil)

        // (2) An SDK update of the gateway's document: a child revision, the body left as the SDK wrote it.
        let sdkBody = #"{"channels":["c"],"v":3,"by":"sdk"}"#
        _ = try await client.upsert("doc", Array(sdkBody.utf8), flags: 0x0200_0006, datatype: 1)
        #expect(
            await Self.eventually {
                try Self.json(try await GatewayHTTP.request(.GET, "\(base)/doc"))["v"]?.intValue == 3
            })
        let revs = try Self.json(try await GatewayHTTP.request(.GET, "\(base)/doc?revs=true"))
        #expect(revs["_rev"]?.stringValue?.hasPrefix("3-") == true, "\(revs)")
        let ids = revs["_revisions"]?["ids"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(ids.count == 3 && "2-" + ids[1] == rev2, "\(revs)")
        let leaves = try await GatewayHTTP.request(
            .GET, "\(base)/doc?open_revs=all", headers: [("Accept", "application/json")])
        #expect(try Self.json(leaves).arrayValue?.count == 1, "\(leaves.text)")
        #expect(String(decoding: try await client.get("doc").value, as: UTF8.self) == sdkBody)

        // (3) A document the SDK created is imported.
        _ = try await client.upsert(
            "sdk-only", Array(#"{"channels":["c"],"n":1}"#.utf8), flags: 0x0200_0006, datatype: 1)
        #expect(
            await Self.eventually {
                try Self.json(try await GatewayHTTP.request(.GET, "\(base)/sdk-only"))["_rev"]?.stringValue?
                    .hasPrefix("1-") == true
            })

        // (4) A KV delete reaches `_changes` as a tombstone revision.
        _ = try await client.remove("doc")
        #expect(
            await Self.eventually {
                let rows =
                    try Self.json(try await GatewayHTTP.request(.GET, "\(base)/_changes?since=0"))["results"]?
                    .arrayValue ?? []
                return rows.contains {
                    $0["id"]?.stringValue == "doc" && $0["deleted"]?.boolValue == true
                        && $0["changes"]?.arrayValue?.first?["rev"]?.stringValue?.hasPrefix("4-") == true
                }
            })
        await #expect(throws: ClientError.keyNotFound) { _ = try await client.get("doc") }

        // (5) What the gateway's change stream reads: with INCLUDE_XATTRS the tombstone carries `_sync`.
        var options = ChangeStreamProcessTests.options(node)
        options.changeStreamIncludesXattrs = true
        let stream = try await ChangeStream.open(options, logger: quietClientLogger)
        let reader = Task { () -> ChangeEvent? in
            for await batch in stream.batches {
                if let e = batch.events.first(where: { $0.key == Array("doc".utf8) }) { return e }
            }
            return nil
        }
        let timeout = Task {
            try await Task.sleep(for: .seconds(30))
            reader.cancel()
        }
        let event = await reader.value
        timeout.cancel()
        await stream.close()
        #expect(event?.kind == .deletion && event.map { $0.datatype & 0x04 != 0 } == true)
        #expect(event.map { String(decoding: $0.value, as: UTF8.self).contains("_sync") } == true)
    }
}
