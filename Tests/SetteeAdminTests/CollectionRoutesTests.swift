import Foundation
import Hummingbird
import HummingbirdTesting
import SetteeCore
import SetteeRegistry
import Testing

/// The collections REST API (ns_server's, ADR 0129) through the router over a real registry: the answers and texts
/// the SDKs' collection managers read, and the manifest the registry keeps.
@Suite struct CollectionRoutesTests {
    /// Proves creating a scope and a collection answers `{"uid":"<hex>"}` with the new manifest uid and lists them in
    /// `GET .../scopes`; duplicates answer 400 with "already exists", unknown scopes and collections 404 with "is not
    /// found", a bad name a field error, an unknown bucket 404; drops answer the next uid and the registry's manifest
    /// follows.
    @Test func createListAndDrop() async throws {
        try await withAdmin { client, registry in
            try registry.createBucket(settings("b", vbuckets: 16))
            let base = "/pools/default/buckets/b/scopes"
            let scope = try await call(client, .post, base, form: "name=tenant")
            #expect(scope.status == .ok && scope.json?["uid"] as? String == "1")
            let collection = try await call(client, .post, base + "/tenant/collections", form: "name=users&maxTTL=60")
            #expect(collection.status == .ok && collection.json?["uid"] as? String == "2")

            let again = try await call(client, .post, base, form: "name=tenant")
            #expect(again.status == .badRequest && again.body.contains(#"Scope with name \"tenant\" already exists"#))
            let twice = try await call(client, .post, base + "/tenant/collections", form: "name=users")
            #expect(twice.status == .badRequest && twice.body.contains("already exists"))
            let noScope = try await call(client, .post, base + "/nope/collections", form: "name=c")
            #expect(noScope.status == .notFound && noScope.body.contains(#"Scope with name \"nope\" is not found"#))
            let badName = try await call(client, .post, base, form: "name=_system")
            #expect(badName.status == .badRequest && badName.errors?["name"] != nil)
            let badTTL = try await call(client, .post, base + "/tenant/collections", form: "name=x&maxTTL=-1")
            #expect(badTTL.status == .badRequest && badTTL.errors?["maxTTL"] != nil)
            let noBucket = try await call(client, .post, "/pools/default/buckets/none/scopes", form: "name=s")
            #expect(noBucket.status == .notFound)

            let listed = try await call(client, .get, base)
            #expect(listed.status == .ok && listed.json?["uid"] as? String == "2")
            let scopes = listed.json?["scopes"] as? [[String: Any]] ?? []
            #expect(scopes.map { $0["name"] as? String } == ["_default", "tenant"])
            let users = (scopes.last?["collections"] as? [[String: Any]])?.first
            #expect(users?["name"] as? String == "users" && users?["uid"] as? String == "8")
            #expect(users?["maxTTL"] as? Int == 60)

            let missing = try await call(client, .delete, base + "/tenant/collections/nope")
            #expect(missing.status == .notFound && missing.body.contains("is not found"))
            let dropped = try await call(client, .delete, base + "/tenant/collections/users")
            #expect(dropped.status == .ok && dropped.json?["uid"] as? String == "3")
            let droppedScope = try await call(client, .delete, base + "/tenant")
            #expect(droppedScope.status == .ok && droppedScope.json?["uid"] as? String == "4")
            #expect(try await call(client, .delete, base + "/_default").status == .badRequest)
            let manifest = try #require(registry.collectionsManifest(bucket: "b"))
            #expect(manifest.uid == 4 && manifest.scopes.map(\.name) == ["_default"])
        }
    }
}
