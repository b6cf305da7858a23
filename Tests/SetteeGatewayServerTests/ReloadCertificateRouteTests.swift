import SetteeGateway
import Testing

/// The gateway's certificate reload endpoint (ADR 0040) as a route.
@Suite struct ReloadCertificateRouteTests {
    /// Proves `POST /_reload_certificate` is an admin-interface route needing no database and answering while
    /// databases are offline; on the public interface it does not exist (404), and GET on the admin one is 405.
    @Test func adminOnlyPost() {
        #expect(
            GatewayRoute.match(method: "POST", path: "/_reload_certificate", admin: true)
                == .route(GatewayRoute(.reloadCertificate)))
        #expect(GatewayRoute.match(method: "POST", path: "/_reload_certificate", admin: false) == .notFound)
        #expect(
            GatewayRoute.match(method: "GET", path: "/_reload_certificate", admin: true)
                == .methodNotAllowed(allow: ["POST"]))
        #expect(!GatewayEndpoint.reloadCertificate.needsDatabase)
        #expect(GatewayEndpoint.reloadCertificate.worksOffline)
    }
}
