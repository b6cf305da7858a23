import Foundation
import NIOCore
import NIOHTTP1
import SetteeClient
import SetteeCore
import SetteeJSON
import SetteeReplication
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A gateway database over two collections of a real node's bucket (issue 70 item 4, ADR 0142): a real
/// `settee-server` and a real `settee-gateway`.
@Suite(.serialized, .onTestThreads) struct GatewayCollectionsProcessTests {
    static func ids(_ url: String) async throws -> Set<String> {
        let reply = try await ReplicationHTTP.request(.GET, url + "/_all_docs")
        #expect(reply.status == 200, "\(url): \(reply.text.prefix(200))")
        return Set((try JSON.parse(reply.body)["rows"]?.arrayValue ?? []).compactMap { $0["id"]?.stringValue })
    }

    static func docs(_ prefix: String, _ count: Int) -> [JSON] {
        (0..<count).map { JSON.object([("_id", .string("\(prefix)-\($0)")), ("channels", .array(["one"]))]) }
    }

    /// Runs a one-shot replication to its end; records an issue if it failed.
    static func replicate(_ source: String, _ target: String) async throws {
        let r = Replicator(
            source: try RemoteEndpoint(url: source), target: try RemoteEndpoint(url: target),
            options: ReplicatorOptions(continuous: false, batchSize: 50, maxAttempts: 3))
        r.start()
        for await s in r.status where s.activity == .stopped { break }
        #expect(r.currentStatus.lastError == nil, "\(source) -> \(target): \(r.currentStatus)")
        #expect(r.currentStatus.docWriteFailures == 0)
    }

    /// Waits (up to 60 s) until `url`'s `_all_docs` holds `expected`, then returns what it holds.
    /// A real node whose bucket `demo` has scope `tenant` with collections `c1` and `c2`, and a real gateway serving
    /// database `db` over them, started and answering `db.tenant.c2`: the setup of every process test of a gateway
    /// over collections. `collections`: the members of the scope's `collections` object (a sync function per
    /// collection, or `{}`); `databaseMembers`: more members of `db`'s entry, each ending in a comma
    /// (`"import_docs":true,`); `peers`: walrus databases served beside it. On a failure nothing is left running;
    /// otherwise the caller stops both (`gateway.stop()`, `server.stopAndRemove()`).
    static func gatewayOverTenantCollections(
        _ name: String, collections: String = #""c1":{},"c2":{}"#, databaseMembers: String = "", peers: [String] = []
    ) async throws -> (server: ServerProcess, gateway: GatewayProcess) {
        let server = try ServerProcess.started(name: name)
        do {
            try server.initialize(authType: "sasl")
            for (path, collection) in [("", "tenant"), ("/tenant/collections", "c1"), ("/tenant/collections", "c2")] {
                let r = try server.http(
                    "POST", "/pools/default/buckets/demo/scopes\(path)", form: [("name", collection)])
                #expect(r.status == 200, "\(path) \(collection): \(r.status) \(r.text)")
            }
            let served = peers.map { #","\#($0)":{"server":"walrus:"}"# }.joined()
            let gateway = try GatewayProcess(
                name: name,
                config: #"""
                    {"databases":{"db":{"server":"http://127.0.0.1:\#(server.adminPort)","bucket":"demo",
                    "username":"\#(server.user)","password":"\#(server.password)",\#(databaseMembers)
                    "scopes":{"tenant":{"collections":{\#(collections)}}}}\#(served)}}
                    """#)
            let admin = "http://127.0.0.1:\(gateway.adminPort)"
            do {
                try await gateway.start {
                    (try? await ReplicationHTTP.request(.GET, admin + "/db.tenant.c2/_all_docs", timeout: .seconds(2)))?
                        .status == 200
                }
            } catch {
                gateway.stop()
                throw error
            }
            return (server, gateway)
        } catch {
            server.stopAndRemove()
            throw error
        }
    }

    static func awaitIDs(_ url: String, _ expected: Set<String>) async throws -> Set<String> {
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(60)
        var held = try await ids(url)
        while !expected.isSubset(of: held) && clock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
            held = try await ids(url)
        }
        return held
    }

    /// Proves the must-show of issue 70 item 4 end to end: database `db` over `tenant.c1` and `tenant.c2` (Sync Gateway
    /// 3.1's `scopes` config, a sync function per collection) serves each as keyspace `db.tenant.cN`; the project's
    /// replicator pushes a walrus database into each keyspace and pulls each keyspace back out, and each keyspace
    /// holds exactly its own documents (the one-shot pulls end, so no keyspace's changes feed waits on the sequences
    /// the other used: `KeyspaceLinks`); `_local` checkpoints are per keyspace (a second push sends nothing); SDK
    /// writes through the smart client to each collection (and to the default collection) are imported into the
    /// right keyspace only; a user created on the database logs in on both keyspaces and its channel grant applies in
    /// both, as does a grant a c1 document's sync function makes (`access()`); `/db/...` answers 404 since the
    /// database does not serve the default collection.
    @Test func twoCollectionsReplicateAndImportIntoTheirOwnKeyspace() async throws {
        let (server, gateway) = try await Self.gatewayOverTenantCollections(
            "collections",
            collections: #"""
                "c1":{"sync":"function(doc){channel(doc.channels); if (doc.sdk) channel('one'); if (doc.grant) access(doc.grant, 'secret');}"},
                "c2":{}
                """#,
            databaseMembers: #""import_docs":true,"#, peers: ["p1", "p1back", "p2", "p2back"])
        defer {
            gateway.stop()
            server.stopAndRemove()
        }
        let admin = "http://127.0.0.1:\(gateway.adminPort)"
        let c1 = admin + "/db.tenant.c1"
        let c2 = admin + "/db.tenant.c2"

        // The default collection is not one of the database's keyspaces; the database's own endpoints still answer.
        #expect(try await ReplicationHTTP.request(.GET, admin + "/db/_all_docs").status == 404)
        #expect(try await ReplicationHTTP.request(.GET, admin + "/db/").status == 200)
        #expect(try await ReplicationHTTP.request(.GET, admin + "/db.tenant.c3/_all_docs").status == 404)

        // Push a walrus database into each keyspace, write through each keyspace, pull each back out.
        _ = try await GatewayReplicationProcessTests.bulkDocs(admin + "/p1", Self.docs("push1", 60), newEdits: true)
        _ = try await GatewayReplicationProcessTests.bulkDocs(admin + "/p2", Self.docs("push2", 40), newEdits: true)
        try await Self.replicate(admin + "/p1", c1)
        try await Self.replicate(admin + "/p2", c2)
        _ = try await GatewayReplicationProcessTests.bulkDocs(c1, Self.docs("own1", 20), newEdits: true)
        _ = try await GatewayReplicationProcessTests.bulkDocs(c2, Self.docs("own2", 30), newEdits: true)
        try await Self.replicate(c1, admin + "/p1back")
        try await Self.replicate(c2, admin + "/p2back")
        let want1 = Set((0..<60).map { "push1-\($0)" } + (0..<20).map { "own1-\($0)" })
        let want2 = Set((0..<40).map { "push2-\($0)" } + (0..<30).map { "own2-\($0)" })
        #expect(try await Self.ids(c1) == want1)
        #expect(try await Self.ids(c2) == want2)
        #expect(try await Self.ids(admin + "/p1back") == want1)
        #expect(try await Self.ids(admin + "/p2back") == want2)
        // The checkpoint of each push is its keyspace's: a second push finds nothing new.
        let again = Replicator(
            source: try RemoteEndpoint(url: admin + "/p1"), target: try RemoteEndpoint(url: c1),
            options: ReplicatorOptions(continuous: false))
        again.start()
        for await s in again.status where s.activity == .stopped { break }
        #expect(again.currentStatus.completed == 0 && again.currentStatus.lastError == nil, "\(again.currentStatus)")

        // SDK writes to each collection and to the default collection.
        var options = ClientProcessTests.options(server)
        options.collections = true
        let client = try await BucketClient.connect(options)
        defer { Task { await client.close() } }
        for i in 0..<25 {
            _ = try await client.collection("tenant", "c1").upsert(
                "sdk1-\(i)", Array(#"{"sdk":true,"n":\#(i)}"#.utf8), datatype: 1)
            _ = try await client.collection("tenant", "c2").upsert(
                "sdk2-\(i)", Array(#"{"sdk":true,"channels":["one"]}"#.utf8), datatype: 1)
            _ = try await client.upsert("sdkd-\(i)", Array(#"{"sdk":true}"#.utf8), datatype: 1)
        }
        let sdk1 = Set((0..<25).map { "sdk1-\($0)" })
        let sdk2 = Set((0..<25).map { "sdk2-\($0)" })
        #expect(try await Self.awaitIDs(c1, want1.union(sdk1)) == want1.union(sdk1))
        #expect(try await Self.awaitIDs(c2, want2.union(sdk2)) == want2.union(sdk2))
        let imported = try JSON.parse(try await ReplicationHTTP.request(.GET, c1 + "/sdk1-3").body)
        #expect(imported["n"]?.intValue == 3 && imported["_rev"]?.stringValue?.hasPrefix("1-") == true, "\(imported)")
        // The gateway wrote nothing into the default collection: not the pushed documents, not the imports.
        for key in ["push1-0", "own2-0", "sdk1-0", "sdk2-0"] {
            await #expect(throws: ClientError.keyNotFound) { _ = try await client.get(key) }
        }
        // Each collection's changes feed lists its own documents only.
        let changes1 = try JSON.parse(try await ReplicationHTTP.request(.GET, c1 + "/_changes").body)
        let fed1 = Set((changes1["results"]?.arrayValue ?? []).compactMap { $0["id"]?.stringValue })
        #expect(fed1 == want1.union(sdk1))

        // One user for the database: created through the database's endpoint, it logs in on both keyspaces, and its
        // channel applies in both.
        let user = JSON.object([("password", "pass1234"), ("admin_channels", .array(["one"]))])
        let put = try await ReplicationHTTP.request(.PUT, admin + "/db/_user/alice", body: user.serialized())
        #expect(put.status == 201 || put.status == 200, "\(put.text)")
        let auth = [("Authorization", "Basic " + Base64.encode(Array("alice:pass1234".utf8)))]
        let public1 = "http://127.0.0.1:\(gateway.port)/db.tenant.c1"
        let public2 = "http://127.0.0.1:\(gateway.port)/db.tenant.c2"
        for (url, want) in [(public1, want1.union(sdk1)), (public2, want2.union(sdk2))] {
            let r = try await ReplicationHTTP.request(.GET, url + "/_changes", headers: auth)
            #expect(r.status == 200, "\(url): \(r.text.prefix(200))")
            // The user's own `_user/alice` row (its grant) is in every keyspace's feed, as in Sync Gateway.
            let seen = Set((try JSON.parse(r.body)["results"]?.arrayValue ?? []).compactMap { $0["id"]?.stringValue })
                .filter { !$0.hasPrefix("_user/") }
            #expect(seen == want, "\(url): \(seen.subtracting(want)) extra, \(want.subtracting(seen)) missing")
        }

        // A grant made by a document's sync function in c1 (`access()`) applies in c2 too.
        let bob = JSON.object([("password", "pass1234"), ("admin_channels", .array([]))])
        #expect(try await ReplicationHTTP.request(.PUT, admin + "/db/_user/bob", body: bob.serialized()).status < 300)
        let secret = JSON.object([("channels", .array(["secret"]))])
        #expect(try await ReplicationHTTP.request(.PUT, c2 + "/secret-doc", body: secret.serialized()).status == 201)
        let bobAuth = [("Authorization", "Basic " + Base64.encode(Array("bob:pass1234".utf8)))]
        func bobSees() async throws -> Set<String> {
            let r = try await ReplicationHTTP.request(.GET, public2 + "/_changes", headers: bobAuth)
            return Set((try JSON.parse(r.body)["results"]?.arrayValue ?? []).compactMap { $0["id"]?.stringValue })
        }
        #expect(try await !bobSees().contains("secret-doc"))
        let grant = JSON.object([("grant", "bob")])
        #expect(try await ReplicationHTTP.request(.PUT, c1 + "/grant-bob", body: grant.serialized()).status == 201)
        #expect(try await bobSees().contains("secret-doc"))
    }
}
