import SetteeGateway
import Testing

@Suite struct GatewayRouteTests {
    @Test(arguments: [
        ("/", GatewayRoute(.root)),
        ("/demo", GatewayRoute(.database, db: "demo")),
        ("/demo/", GatewayRoute(.database, db: "demo")),
        ("/demo/doc1", GatewayRoute(.document, db: "demo", id: "doc1")),
        ("/demo/a%2Fb", GatewayRoute(.document, db: "demo", id: "a/b")),
        ("/demo/doc1/photo.jpg", GatewayRoute(.attachment, db: "demo", id: "doc1", attachment: "photo.jpg")),
        ("/demo/doc1/dir/x.txt", GatewayRoute(.attachment, db: "demo", id: "doc1", attachment: "dir/x.txt")),
        ("/demo/_local/abc%3D", GatewayRoute(.local, db: "demo", id: "abc=")),
        ("/demo/_changes", GatewayRoute(.changes, db: "demo")),
        ("/demo/_user/", GatewayRoute(.userList, db: "demo")),
        ("/demo/_user/jane", GatewayRoute(.user, db: "demo", id: "jane")),
        ("/demo/_role/editor", GatewayRoute(.role, db: "demo", id: "editor")),
        ("/demo/_raw/doc1", GatewayRoute(.raw, db: "demo", id: "doc1")),
        ("/demo/_config", GatewayRoute(.dbConfig, db: "demo")),
        ("/demo.s.c/_config/sync", GatewayRoute(.keyspaceConfig, db: "demo.s.c", id: "sync")),
        ("/demo/_config/import_filter", GatewayRoute(.keyspaceConfig, db: "demo", id: "import_filter")),
        ("/demo/_resync", GatewayRoute(.resync, db: "demo")),
        ("/_all_dbs", GatewayRoute(.allDBs)),
        // A reserved segment routes as its decoded form; an escaped `/` elsewhere stays inside its name.
        ("/demo/_local%2Fckpt1", GatewayRoute(.local, db: "demo", id: "ckpt1")),
        ("/demo/_local%2fckpt1", GatewayRoute(.local, db: "demo", id: "ckpt1")),
        ("/demo/%5Flocal/ckpt1", GatewayRoute(.local, db: "demo", id: "ckpt1")),
        ("/demo/%5Flocal%2Fa%2Fb", GatewayRoute(.local, db: "demo", id: "a/b")),
        ("/demo/_local/a%2Fb", GatewayRoute(.local, db: "demo", id: "a/b")),
        ("/demo/_user%2Fjane", GatewayRoute(.user, db: "demo", id: "jane")),
        ("/demo/_user/%6Aane", GatewayRoute(.user, db: "demo", id: "jane")),
        ("/demo/_user%2F", GatewayRoute(.userList, db: "demo")),
        ("/demo/%5Fchanges", GatewayRoute(.changes, db: "demo")),
        ("/%5Fall_dbs", GatewayRoute(.allDBs)),
        ("/demo/doc%2Fwith%2Fslash", GatewayRoute(.document, db: "demo", id: "doc/with/slash")),
        ("/demo/doc/att%2Fname", GatewayRoute(.attachment, db: "demo", id: "doc", attachment: "att/name")),
        ("/demo/a%2Fb/att%2Fname", GatewayRoute(.attachment, db: "demo", id: "a/b", attachment: "att/name")),
    ])
    func pathsResolve(path: String, expected: GatewayRoute) {
        // Proves each URL shape of the reference resolves to its endpoint with decoded parts.
        #expect(GatewayRoute.resolve(path: path) == expected)
    }

    @Test func unknownAndAdminOnlyPathsAreNotFoundOnThePublicPort() {
        // Proves unknown `_` endpoints are 404 everywhere and admin endpoints are 404 on the public port.
        #expect(GatewayRoute.match(method: "GET", path: "/demo/_nope", admin: true) == .notFound)
        #expect(GatewayRoute.match(method: "GET", path: "/_nope", admin: true) == .notFound)
        #expect(GatewayRoute.match(method: "GET", path: "/demo/_user/jane", admin: false) == .notFound)
        #expect(GatewayRoute.match(method: "POST", path: "/demo/_resync", admin: false) == .notFound)
        #expect(GatewayRoute.match(method: "PUT", path: "/demo/_config", admin: false) == .notFound)
        #expect(GatewayRoute.match(method: "PUT", path: "/demo.s.c/_config/sync", admin: false) == .notFound)
        #expect(GatewayRoute.match(method: "GET", path: "/demo/_config/revs_limit", admin: true) == .notFound)
        #expect(
            GatewayRoute.match(method: "DELETE", path: "/demo.c/_config/import_filter", admin: true)
                == .route(GatewayRoute(.keyspaceConfig, db: "demo.c", id: "import_filter")))
        #expect(
            GatewayRoute.match(method: "POST", path: "/demo/_resync", admin: true)
                == .route(GatewayRoute(.resync, db: "demo")))
        #expect(GatewayEndpoint.resync.worksOffline && GatewayEndpoint.dbConfig.methods(admin: true).contains("PUT"))
        #expect(GatewayRoute.match(method: "GET", path: "/demo/bad%zz", admin: false) == .notFound)
        // Decoded, these name what their written forms name: nothing (`_design/` is no route here), or an empty id.
        for path in [
            "/demo/_design%2Fddoc", "/demo/_local%2F", "/demo/_local%2F%2Fx", "/_all_dbs%2Fx", "/demo/_nope%2Fx",
        ] {
            #expect(GatewayRoute.match(method: "GET", path: path, admin: true) == .notFound, "\(path)")
        }
        #expect(
            GatewayRoute.match(method: "GET", path: "/demo/_user/jane", admin: true)
                == .route(GatewayRoute(.user, db: "demo", id: "jane")))
    }

    @Test func wrongMethodListsTheAllowedOnes() {
        // Proves a known URL with a method it does not answer gives 405 with the methods it does.
        #expect(
            GatewayRoute.match(method: "GET", path: "/demo/_bulk_docs", admin: false)
                == .methodNotAllowed(allow: ["POST"]))
        #expect(
            GatewayRoute.match(method: "POST", path: "/demo/doc1", admin: false)
                == .methodNotAllowed(allow: ["GET", "HEAD", "PUT", "DELETE"]))
        #expect(GatewayRoute.match(method: "OPTIONS", path: "/demo/_bulk_docs", admin: false) != .notFound)
    }
}
