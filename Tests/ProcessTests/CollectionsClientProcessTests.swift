import Foundation
import SetteeClient
import SetteeCore
import SetteeTestSupport
import Testing

/// Scopes and collections through Settee's own clients (issue 70 item 3, ADR 0134): the `settee scope`/`collection`
/// commands, `settee kv --collection`, and `BucketClient.collection(_:_:)` against one real node.
@Suite(.serialized, .onTestThreads) struct CollectionsClientProcessTests {
    /// Proves the CLI round trip: `scope create` and `collection create` make `tenant.users` (listed by
    /// `collection list` and `scope list`); `kv set/get --collection` store and read a document there while the same
    /// key in the default collection keeps its own value (read also as `--collection _default._default`, the 0x00
    /// prefix); `kv delete --collection` removes only the collection's key; `collection drop` removes it from the
    /// list and a later `kv get --collection` fails naming the collection; unknown scopes and bad paths are refused
    /// with the server's or the CLI's reason; `scope drop` drops the scope.
    @Test func cliRoundTrip() throws {
        let server = try ServerProcess.started(name: "cli-collections")
        defer { server.stopAndRemove() }
        try server.initialize(authType: "sasl")
        func cli(_ arguments: String...) throws -> CLIRun { try runCLI(arguments, server: server) }
        func ok(_ run: CLIRun, _ what: String) { #expect(run.status == 0, "\(what): \(run.stdout) \(run.stderr)") }

        let scope = try cli("scope", "create", "tenant")
        ok(scope, "scope create")
        #expect(scope.stdout.hasPrefix("created scope tenant (manifest uid 1)"), "\(scope.stdout)")
        let created = try cli("collection", "create", "tenant.users", "--bucket", "demo")
        ok(created, "collection create")
        #expect(created.stdout.hasPrefix("created collection tenant.users (manifest uid 2)"), "\(created.stdout)")

        ok(try cli("kv", "set", "k1", #"{"in":"users"}"#, "--collection", "tenant.users"), "set in users")
        ok(try cli("kv", "set", "k1", #"{"in":"default"}"#), "set in default")
        ok(try cli("kv", "set", "k2", #"{"n":2}"#, "--collection", "tenant.users"), "set k2 in users")
        let inUsers = try cli("kv", "get", "k1", "--collection", "tenant.users")
        #expect(inUsers.status == 0 && inUsers.stdout == "{\"in\":\"users\"}\n", "\(inUsers.stdout) \(inUsers.stderr)")
        let inDefault = try cli("kv", "get", "k1")
        #expect(inDefault.stdout == "{\"in\":\"default\"}\n", "\(inDefault.stdout) \(inDefault.stderr)")
        let prefixed = try cli("kv", "get", "k1", "--collection", "_default._default")
        #expect(prefixed.stdout == "{\"in\":\"default\"}\n", "\(prefixed.stdout) \(prefixed.stderr)")
        let notInDefault = try cli("kv", "get", "k2")
        #expect(notInDefault.status != 0 && notInDefault.stderr.contains("key not found"), "\(notInDefault.stderr)")

        let listed = try cli("collection", "list")
        ok(listed, "collection list")
        #expect(listed.stdout.contains("_default._default\tid=0x0\tmaxTTL=0\n"), "\(listed.stdout)")
        #expect(listed.stdout.contains("tenant.users\tid=0x8\tmaxTTL=0\n"), "\(listed.stdout)")
        let scopes = try cli("scope", "list")
        #expect(scopes.stdout.contains("tenant\tid=0x8\tcollections=1\n"), "\(scopes.stdout)")

        ok(try cli("kv", "delete", "k2", "--collection", "tenant.users"), "delete k2")
        let deleted = try cli("kv", "get", "k2", "--collection", "tenant.users")
        #expect(deleted.status != 0 && deleted.stderr.contains("key not found"), "\(deleted.stderr)")

        let dropped = try cli("collection", "drop", "tenant.users")
        ok(dropped, "collection drop")
        #expect(dropped.stdout.hasPrefix("dropped collection tenant.users"), "\(dropped.stdout)")
        #expect(try !cli("collection", "list").stdout.contains("tenant.users"))
        let gone = try cli("kv", "get", "k1", "--collection", "tenant.users")
        #expect(
            gone.status != 0 && gone.stderr.contains("collection not found: tenant.users in bucket demo"),
            "\(gone.stderr)")
        let stillDefault = try cli("kv", "get", "k1")
        #expect(stillDefault.stdout == "{\"in\":\"default\"}\n", "\(stillDefault.stdout) \(stillDefault.stderr)")

        let noScope = try cli("collection", "create", "nope.users")
        #expect(
            noScope.status != 0 && noScope.stderr.contains(#"Scope with name \"nope\" is not found"#),
            "\(noScope.stderr)")
        let badPath = try cli("kv", "get", "k1", "--collection", "users")
        #expect(badPath.status != 0 && badPath.stderr.contains("SCOPE.COLLECTION"), "\(badPath.stderr)")
        ok(try cli("scope", "drop", "tenant"), "scope drop")
        #expect(try !cli("scope", "list").stdout.contains("tenant"))
    }

    /// Proves the client library's collection handle: ids are resolved with GET_COLLECTION_ID and cached; when the
    /// collection is dropped and created again under a new id, the next operation with the cached id is refused
    /// UNKNOWN_COLLECTION, re-resolves once and succeeds on the new (empty) collection; once it is dropped for good
    /// the operation fails `collectionNotFound` naming it; the default collection's documents are untouched
    /// throughout; a client without `ClientOptions.collections` refuses a named collection before sending anything.
    @Test func handleResolvesAndRefreshesTheCollectionID() async throws {
        let server = try ServerProcess.started(name: "client-collections")
        defer { server.stopAndRemove() }
        try server.initialize(authType: "sasl")
        func edit(_ method: String, _ path: String, _ name: String? = nil) throws {
            let r = try server.http(
                method, "/pools/default/buckets/demo/scopes\(path)", form: name.map { [("name", $0)] })
            #expect(r.status == 200, "\(method) \(path): \(r.status) \(r.text)")
        }
        try edit("POST", "", "s")
        try edit("POST", "/s/collections", "c")
        var options = ClientProcessTests.options(server)
        options.collections = true
        let client = try await BucketClient.connect(options)
        defer { Task { await client.close() } }

        let c = client.collection("s", "c")
        _ = try await c.upsert("k", Array(#"{"in":"c"}"#.utf8), datatype: 1)
        _ = try await client.upsert("k", Array(#"{"in":"default"}"#.utf8), datatype: 1)
        #expect(try await c.get("k").value == Array(#"{"in":"c"}"#.utf8))
        #expect(try await client.collectionID(scope: "s", collection: "c") == 8)
        #expect(try await client.collection("_default", "_default").get("k").value == Array(#"{"in":"default"}"#.utf8))

        try edit("DELETE", "/s/collections/c")
        try edit("POST", "/s/collections", "c")
        await #expect(throws: ClientError.keyNotFound) { try await c.get("k") }
        #expect(try await client.collectionID(scope: "s", collection: "c") == 9)
        _ = try await c.insert("k", Array(#"{"in":"c again"}"#.utf8), datatype: 1)
        #expect(try await c.get("k").value == Array(#"{"in":"c again"}"#.utf8))

        try edit("DELETE", "/s/collections/c")
        do {
            _ = try await c.get("k")
            Issue.record("a get in a dropped collection succeeded")
        } catch ClientError.collectionNotFound(let why) {
            #expect(why.contains("s.c in bucket demo"), "\(why)")
        }
        #expect(try await client.get("k").value == Array(#"{"in":"default"}"#.utf8))

        let plain = try await BucketClient.connect(ClientProcessTests.options(server))
        defer { Task { await plain.close() } }
        await #expect(throws: ClientError.self) { try await plain.collection("s", "c").get("k") }
        #expect(try await plain.collection("_default", "_default").get("k").value == Array(#"{"in":"default"}"#.utf8))
    }
}
