import Foundation
import SetteeCore
import SetteeJSON
import Testing

@testable import SetteeGateway

/// `/{keyspace}/_config/sync` and `/{keyspace}/_config/import_filter` (Sync Gateway 3.x), and the per-collection
/// figures of `/_expvar` and `/_metrics` (ADR 0152), on a database of two named collections built in memory
/// (`BLIPCollectionsTests.Keyspaces`: each collection a walrus bucket behind a `KeyspaceBucket`), served on loopback.
@Suite struct KeyspaceFunctionTests {
    /// The in-memory keyspaces run without shared bucket access (`DatabaseOptions`' default), which `reconfigure`
    /// keeps fixed, so the entry says the same.
    static let config = """
        {"databases": {"db": {"server": "http://127.0.0.1:8091", "enable_shared_bucket_access": false,
          "scopes": {"s": {"collections": {"c1": {}, "c2": {"import_filter": "function(doc){return true;}"}}}}}}}
        """

    static func server(_ k: BLIPCollectionsTests.Keyspaces) throws -> GatewayServer {
        GatewayServer(
            config: try GatewayConfig.parse(Array(config.utf8)), keyspaces: ["db": k.spaces], mounted: [:],
            logger: quietLogger(), tls: nil)
    }

    static func text(_ reply: InProcessGateway.Reply) -> String { String(decoding: reply.bytes, as: UTF8.self) }

    @Test func syncFunctionPerKeyspaceIsReadReplacedAndRemoved() async throws {
        // Proves: GET answers the keyspace's source (empty when none); a PUT of JavaScript takes effect for the next
        // write of that keyspace only and is kept in the database's entry (`GET /db/_config`); a PUT that does not
        // compile is a 400 naming the reason and the function in force stays; DELETE restores the default function;
        // an unknown keyspace, a database without the default collection's `/db/...` and the public port answer 404.
        let k = try await BLIPCollectionsTests.Keyspaces.open(withDefault: false)
        let gw = await InProcessGateway.start(server: try Self.server(k))
        let js = "application/javascript"
        let empty = try await gw.request("GET", "/db.s.c1/_config/sync")
        #expect(empty.status == 200 && empty.bytes.isEmpty)

        let refuse = #"function(doc){ throw({forbidden: "c1 is closed"}); }"#
        #expect(try await gw.request("PUT", "/db.s.c1/_config/sync", body: refuse, contentType: js).status == 200)
        #expect(Self.text(try await gw.request("GET", "/db.s.c1/_config/sync")) == refuse)
        let entry = try await gw.request("GET", "/db/_config")
        #expect(entry.body["scopes"]?["s"]?["collections"]?["c1"]?["sync"] == .string(refuse))
        #expect(entry.body["scopes"]?["s"]?["collections"]?["c2"]?["sync"] == nil)
        #expect(try await gw.request("PUT", "/db.s.c1/a", body: "{}").status == 403)
        #expect(try await gw.request("PUT", "/db.s.c2/a", body: "{}").status == 201)

        let broken = try await gw.request("PUT", "/db.s.c1/_config/sync", body: "function(doc) {", contentType: js)
        #expect(broken.status == 400)
        #expect(broken.body["reason"]?.stringValue?.isEmpty == false)
        #expect(Self.text(try await gw.request("GET", "/db.s.c1/_config/sync")) == refuse)
        #expect(try await gw.request("PUT", "/db.s.c1/b", body: "{}").status == 403)

        #expect(try await gw.request("DELETE", "/db.s.c1/_config/sync").status == 200)
        #expect(try await gw.request("GET", "/db.s.c1/_config/sync").bytes.isEmpty)
        #expect(try await gw.request("PUT", "/db.s.c1/b", body: #"{"channels":"x"}"#).status == 201)
        let after = try await gw.request("GET", "/db/_config")
        #expect(after.body["scopes"]?["s"]?["collections"]?["c1"] == .object([]))

        #expect(try await gw.request("GET", "/db.s.nope/_config/sync").status == 404)
        #expect(try await gw.request("GET", "/db/_config/sync").status == 404)
        #expect(try await gw.request("GET", "/db.s.c1/_config/other").status == 404)
        #expect(try await gw.request("GET", "/db.s.c1/_config/sync", admin: false).status == 404)
        await gw.stop()
        await k.close()
    }

    @Test func theDefaultKeyspaceOfADatabaseWithoutScopesIsTheDatabasePath() async throws {
        // Proves `/db/_config/sync` on a database without `scopes` (its default collection): the PUT replaces the
        // top-level `sync` the file gave (shown by `GET /db/_config`) and decides the next write; DELETE restores the
        // default function.
        let gw = try await InProcessGateway.start(
            config: #"{"databases": {"db": {"server": "walrus:", "sync": "function(doc){channel(doc.channels);}"}}}"#)
        let refuse = #"function(doc){ throw({forbidden: "closed"}); }"#
        #expect(try await gw.request("PUT", "/db/_config/sync", body: refuse).status == 200)
        #expect(try await gw.request("GET", "/db/_config").body["sync"] == .string(refuse))
        #expect(try await gw.request("PUT", "/db/a", body: "{}").status == 403)
        #expect(try await gw.request("DELETE", "/db/_config/sync").status == 200)
        #expect(try await gw.request("GET", "/db/_config").body["sync"] == nil)
        #expect(try await gw.request("PUT", "/db/a", body: "{}").status == 201)
        await gw.stop()
    }

    @Test func importFilterPerKeyspaceIsReplacedAndRemoved() async throws {
        // Proves: the import filter of one keyspace is read, replaced (the new one decides the next import question
        // of that keyspace, the other keyspace keeps none) and removed (every document imported again); a filter
        // that does not compile is a 400 and the one in force stays.
        let k = try await BLIPCollectionsTests.Keyspaces.open(withDefault: false)
        let gw = await InProcessGateway.start(server: try Self.server(k))
        let c2 = try k.db(BLIPCollectionsTests.Keyspaces.c2)
        let c1 = try k.db(BLIPCollectionsTests.Keyspaces.c1)
        #expect(
            Self.text(try await gw.request("GET", "/db.s.c2/_config/import_filter")) == "function(doc){return true;}")
        let onlyA = #"function(doc){ return doc.type == "a"; }"#
        #expect(try await gw.request("PUT", "/db.s.c2/_config/import_filter", body: onlyA).status == 200)
        #expect(await c2.importFilterAccepts(json(#"{"type":"a"}"#), id: "x"))
        #expect(await !c2.importFilterAccepts(json(#"{"type":"b"}"#), id: "y"))
        #expect(await c1.importFilterAccepts(json(#"{"type":"b"}"#), id: "y"))
        let bad = try await gw.request("PUT", "/db.s.c2/_config/import_filter", body: "function(doc) { return (")
        #expect(bad.status == 400)
        #expect(await !c2.importFilterAccepts(json(#"{"type":"b"}"#), id: "y"))
        let entry = try await gw.request("GET", "/db/_config")
        #expect(entry.body["scopes"]?["s"]?["collections"]?["c2"]?["import_filter"] == .string(onlyA))
        #expect(try await gw.request("DELETE", "/db.s.c2/_config/import_filter").status == 200)
        #expect(await c2.importFilterAccepts(json(#"{"type":"b"}"#), id: "y"))
        #expect(try await gw.request("GET", "/db.s.c2/_config/import_filter").bytes.isEmpty)
        await gw.stop()
        await k.close()
    }

    @Test func figuresArePerCollection() async throws {
        // Proves: `/_expvar` shows `per_collection` figures for each keyspace by `scope.collection`, counting a
        // keyspace's client writes, reads and sync function runs (and refusals) there only; `/_metrics` shows the
        // same figures with a `collection` label.
        let k = try await BLIPCollectionsTests.Keyspaces.open(withDefault: false)
        let server = try Self.server(k)
        let c1 = try k.db(BLIPCollectionsTests.Keyspaces.c1)
        let rev = try await c1.put("a", body: json(#"{"n":1}"#), user: nil)
        _ = try await c1.put("b", body: json(#"{"n":2}"#), user: nil)
        _ = try await c1.get("a", user: nil)
        // An update (read first, so the sync function runs once) the default function refuses: a bad channel name.
        let refused = json(#"{"_rev":"\#(rev)","channels":"bad,name"}"#)
        await #expect(throws: GatewayError.self) { try await c1.put("a", body: refused, user: nil) }
        let perCollection = server.expvar()["syncgateway"]?["per_db"]?["db"]?["per_collection"]
        let one = try #require(perCollection?["s.c1"])
        let two = try #require(perCollection?["s.c2"])
        #expect(one["num_doc_writes"] == .integer(2))
        #expect(one["num_doc_reads"] == .integer(1))
        #expect((one["doc_writes_bytes"]?.intValue ?? 0) >= 14)
        #expect((one["doc_reads_bytes"]?.intValue ?? 0) >= 7)
        #expect(one["sync_function_count"] == .integer(3))
        #expect(one["sync_function_reject_count"] == .integer(1))
        #expect(one["sync_function_exception_count"] == .integer(0))
        #expect((one["sync_function_time"]?.intValue ?? 0) > 0)
        #expect(one["import_count"] == .integer(0))
        for name in ["num_doc_writes", "num_doc_reads", "sync_function_count", "doc_writes_bytes"] {
            #expect(two[name] == .integer(0), "\(name)")
        }
        let metrics = String(decoding: server.prometheusText(), as: UTF8.self)
        let lines = metrics.split(separator: "\n").filter { $0.hasPrefix("settee_gateway_collection_num_doc_writes{") }
        #expect(lines.count == 2)
        #expect(
            lines.contains {
                $0.contains(#"collection="s.c1""#) && $0.contains(#"database="db""#) && $0.hasSuffix(" 2")
            })
        #expect(lines.contains { $0.contains(#"collection="s.c2""#) && $0.hasSuffix(" 0") })
        await k.close()
    }
}
