import SetteeAuth
import SetteeCore
import Testing

@testable import SetteeNode

/// GET_COLLECTION_ID / GET_SCOPE_ID as a user with scoped roles may learn them (ADR 0141), without sockets.
@Suite struct ScopedCollectionLookupTests {
    static func manifest() throws -> CollectionsManifest {
        var m = CollectionsManifest.initial
        try m.createScope("s")
        try m.createCollection("c1", inScope: "s")
        try m.createCollection("c2", inScope: "s")
        try m.createScope("t")
        try m.createCollection("c1", inScope: "t")
        return m
    }

    /// Proves, for `data_reader[b:s:c1]`: `s.c1` resolves; `s.c2` (a scope it sees into) is UNKNOWN_COLLECTION;
    /// `t.c1` and `_default._default` (scopes it sees nothing in) are UNKNOWN_SCOPE, as if absent; GET_SCOPE_ID of `s`
    /// resolves and of `t` is UNKNOWN_SCOPE; a name that does not exist keeps its own answer; and a bucket reader
    /// learns everything unchanged.
    @Test func lookupsHideWhatTheUserHoldsNothingIn() throws {
        let m = try Self.manifest()
        let roles = try Role.parseList("data_reader[b:s:c1]").get()
        func id(_ path: String, _ roles: [Role]) -> CollectionsManifest.Resolution {
            KVConnectionHandler.visible(m.resolveCollection(path), path: path, to: roles, bucket: "b")
        }
        func scope(_ path: String, _ roles: [Role]) -> CollectionsManifest.Resolution {
            KVConnectionHandler.visible(m.resolveScope(path), path: path, to: roles, bucket: "b")
        }
        #expect(id("s.c1", roles) == m.resolveCollection("s.c1"))
        #expect(id("s.c2", roles) == .unknownCollection)
        #expect(id("s.nope", roles) == .unknownCollection)
        #expect(id("t.c1", roles) == .unknownScope)
        #expect(id("_default._default", roles) == .unknownScope)
        #expect(id(".", roles) == .unknownScope)
        #expect(scope("s", roles) == m.resolveScope("s"))
        #expect(scope("t", roles) == .unknownScope)
        #expect(id("s.c1.x", roles) == .invalid)
        let reader = try Role.parseList("data_reader[b]").get()
        for path in ["s.c2", "t.c1", "_default._default"] {
            #expect(id(path, reader) == m.resolveCollection(path), "\(path)")
        }
    }
}
