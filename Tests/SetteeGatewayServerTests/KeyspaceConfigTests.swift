import SetteeCore
import SetteeGateway
import SetteeJSON
import Testing

/// Sync Gateway 3.1's `scopes` in a database config and its keyspace names in URL paths (ADR 0142), without sockets.
@Suite struct KeyspaceConfigTests {
    static func parse(_ db: String) throws(ConfigError) -> DatabaseConfig? {
        try GatewayConfig.parse(Array(#"{"databases":{"db":\#(db)}}"#.utf8)).databases.first
    }

    static let server = #""server":"http://127.0.0.1:8091""#

    /// Proves the 3.1 shape parses into one keyspace per collection, each with its own sync function (absent: nil,
    /// the default function), in the config's order; a database without `scopes` is its default collection with the
    /// top-level `sync`.
    @Test func scopesNameKeyspacesEachWithItsSyncFunction() throws {
        let db = try Self.parse(
            #"{\#(Self.server),"scopes":{"s":{"collections":{"c1":{"sync":"function(doc){channel('a');}"},"c2":{}}}}}"#)
        #expect(
            db?.keyspaces == [
                CollectionConfig(
                    keyspace: Keyspace(scope: "s", collection: "c1"), sync: "function(doc){channel('a');}"),
                CollectionConfig(keyspace: Keyspace(scope: "s", collection: "c2"), sync: nil),
            ])
        let plain = try Self.parse(#"{"server":"walrus:","sync":"function(doc){}"}"#)
        #expect(plain?.collections == nil)
        #expect(plain?.keyspaces == [CollectionConfig(keyspace: .defaultCollection, sync: "function(doc){}")])
        // The default scope's default collection is a keyspace like any other, on any bucket.
        let explicit = try Self.parse(#"{"server":"walrus:","scopes":{"_default":{"collections":{"_default":{}}}}}"#)
        #expect(explicit?.keyspaces.map(\.keyspace) == [.defaultCollection])
    }

    /// Proves each rule is refused at its path: two scopes (Sync Gateway 3.1 allows one), no collections, a name the
    /// data service refuses, `_default` as a named scope's collection, an unknown field, an `import_filter` that is not
    /// a string, a top-level `sync` beside `scopes`, named collections on an
    /// embedded bucket, and more collections than `Limits.gatewayMaxCollectionsPerDatabase`.
    @Test func invalidScopesAreRefusedAtTheirPath() {
        func refusal(_ db: String) -> String? {
            do {
                _ = try Self.parse(db)
                return nil
            } catch { return error.path }
        }
        #expect(
            refusal(#"{\#(Self.server),"scopes":{"a":{"collections":{"c":{}}},"b":{"collections":{"c":{}}}}}"#)
                == "databases.db.scopes")
        #expect(refusal(#"{\#(Self.server),"scopes":{"s":{"collections":{}}}}"#) == "databases.db.scopes.s.collections")
        #expect(
            refusal(#"{\#(Self.server),"scopes":{"s":{"collections":{"bad.name":{}}}}}"#)
                == "databases.db.scopes.s.collections.bad.name")
        #expect(refusal(#"{\#(Self.server),"scopes":{"_x":{"collections":{"c":{}}}}}"#) == "databases.db.scopes._x")
        #expect(
            refusal(#"{\#(Self.server),"scopes":{"s":{"collections":{"_default":{}}}}}"#)
                == "databases.db.scopes.s.collections._default")
        #expect(
            refusal(#"{\#(Self.server),"scopes":{"s":{"collections":{"c":{"nope":1}}}}}"#)
                == "databases.db.scopes.s.collections.c.nope")
        #expect(
            refusal(#"{\#(Self.server),"scopes":{"s":{"collections":{"c":{"import_filter":1}}}}}"#)
                == "databases.db.scopes.s.collections.c.import_filter")
        #expect(
            refusal(#"{\#(Self.server),"sync":"f","scopes":{"s":{"collections":{"c":{}}}}}"#) == "databases.db.sync")
        #expect(refusal(#"{"server":"walrus:","scopes":{"s":{"collections":{"c":{}}}}}"#) == "databases.db.scopes")
        let many = (0...Limits.gatewayMaxCollectionsPerDatabase).map { #""c\#($0)":{}"# }.joined(separator: ",")
        #expect(
            refusal(#"{\#(Self.server),"scopes":{"s":{"collections":{\#(many)}}}}"#)
                == "databases.db.scopes.s.collections")
    }

    /// Proves the keyspace forms of a path's first segment (Sync Gateway 3.1): `db` is the default collection,
    /// `db.c` a collection of the default scope, `db.s.c` a scope's collection; more dots or an empty part name
    /// nothing; `pathName` writes each back in its shortest form.
    @Test func keyspacePathForms() {
        #expect(Keyspace.parsePath("db")! == ("db", Keyspace.defaultCollection))
        #expect(Keyspace.parsePath("db.c")! == ("db", Keyspace(scope: "_default", collection: "c")))
        #expect(Keyspace.parsePath("db.s.c")! == ("db", Keyspace(scope: "s", collection: "c")))
        #expect(Keyspace.parsePath("db._default._default")! == ("db", Keyspace.defaultCollection))
        for bad in ["db.s.c.x", "db..c", ".c", "db."] { #expect(Keyspace.parsePath(bad) == nil, "\(bad)") }
        #expect(Keyspace.defaultCollection.pathName(db: "db") == "db")
        #expect(Keyspace(scope: "_default", collection: "c").pathName(db: "db") == "db.c")
        #expect(Keyspace(scope: "s", collection: "c").pathName(db: "db") == "db.s.c")
    }

    /// Proves `replacing` writes a keyspace's function where the entry keeps it and reads back the same: the
    /// top-level field of a database without `scopes` (a field spelt in another letter case is replaced, not doubled),
    /// the collection's field under `scopes`, nil removing it; the other collections are untouched, and a keyspace
    /// the database does not serve is refused.
    @Test func replacingAKeyspaceFunctionEditsTheEntry() throws {
        let plain = try #require(try Self.parse(#"{"server":"walrus:","Sync":"function(doc){}","revs_limit":50}"#))
        let set = try plain.replacing(.sync, of: .defaultCollection, with: "function(doc){channel('x');}")
        #expect(set.sync == "function(doc){channel('x');}")
        #expect(set.revsLimit == 50)
        #expect(set.source.objectValue?.filter { $0.0.lowercased() == "sync" }.count == 1)
        let filtered = try set.replacing(.importFilter, of: .defaultCollection, with: "function(doc){return true;}")
        #expect(filtered.source(of: .importFilter, for: .defaultCollection) == "function(doc){return true;}")
        #expect(try filtered.replacing(.sync, of: .defaultCollection, with: nil).sync == nil)

        let scoped = try #require(
            try Self.parse(#"{\#(Self.server),"scopes":{"s":{"collections":{"c1":{"sync":"a"},"c2":{"sync":"b"}}}}}"#))
        let c1 = Keyspace(scope: "s", collection: "c1")
        let c2 = Keyspace(scope: "s", collection: "c2")
        let changed = try scoped.replacing(.sync, of: c1, with: "z")
        #expect(changed.source(of: .sync, for: c1) == "z")
        #expect(changed.source(of: .sync, for: c2) == "b")
        let removed = try changed.replacing(.sync, of: c2, with: nil)
        #expect(removed.keyspaces == [CollectionConfig(keyspace: c1, sync: "z"), CollectionConfig(keyspace: c2)])
        #expect(throws: ConfigError.self) { try scoped.replacing(.sync, of: .defaultCollection, with: "x") }
        #expect(throws: ConfigError.self) { try plain.replacing(.sync, of: c1, with: "x") }
    }

    /// Proves which endpoints take a keyspace: the document-level ones (and `POST /{keyspace}/`), not the
    /// database's own (users, sessions, `_config`, `_online`, BLIP).
    @Test func keyspaceEndpoints() {
        let keyspaced: [GatewayEndpoint] = [
            .document, .attachment, .local, .allDocs, .bulkDocs, .bulkGet, .changes, .revsDiff, .purge, .raw,
            .keyspaceConfig,
        ]
        for e in GatewayEndpoint.allCases {
            #expect(e.takesKeyspace(method: "GET") == keyspaced.contains(e), "\(e)")
        }
        #expect(GatewayEndpoint.database.takesKeyspace(method: "POST"))
    }
}
