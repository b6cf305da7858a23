import Hummingbird
import NIOCore
import NIOHTTP1
import SetteeClusterMap
import SetteeCore
import SetteeRegistry
import SetteeStorage

/// `/settee/views/REST` → `http://HOST:VIEWSPORT/REST` on this node, for the console's Views page: the pages come
/// from the admin port, so calling the views port directly would be cross-origin (CORS, and the session cookie
/// would not go there). The relay authenticates to the views service with the internal credentials; the caller
/// has already passed this port's admin check. Design documents, queries and their parameters pass unchanged.
enum ViewsRelay {
    static let prefix = "/settee/views"

    static func add(to router: Router<AdminRequestContext>, api: AdminAPI) {
        router.get("/settee/views/**") { r, _ in await relay(r, api: api) }
        router.put("/settee/views/**") { r, _ in await relay(r, api: api) }
        router.delete("/settee/views/**") { r, _ in await relay(r, api: api) }
        router.post("/settee/views/**") { r, _ in await relay(r, api: api) }
        // Couchbase lists a bucket's design documents on the admin port.
        router.get("/pools/default/buckets/:name/ddocs") { r, c in
            let name = bucketParameter(c) ?? ""
            return await relay(r, api: api, path: "/" + PercentEncoding.encode(name) + "/_settee_ddocs")
        }
    }

    static func relay(_ request: Request, api: AdminAPI, path fixedPath: String? = nil) async -> Response {
        guard let peers = api.cluster?.peers else {
            return AdminResponses.general(.serviceUnavailable, "The views relay needs the cluster manager")
        }
        var request = request
        let body = try? await request.collectBody(upTo: Limits.maxAdminRequestBody)
        let rest = String(request.uri.path.dropFirst(prefix.count))
        let path = fixedPath ?? (rest + (request.uri.query.map { "?" + $0 } ?? ""))
        let node = api.registry.node
        let creds = api.registry.internalCredentials
        // Over the views TLS port, pinned to this node's own certificate, when it has one (ADR 0040): the internal
        // credentials never cross in clear, and a --tls-only node has no plain views port.
        let endpoint =
            node.viewsTLSPort.flatMap { port in
                node.tlsFingerprint.map { PeerEndpoint(host: node.host, port: port, tlsFingerprint: $0) }
            } ?? PeerEndpoint(host: node.host, port: node.viewsPort, tlsFingerprint: nil)
        do {
            let reply = try await peers.call(
                endpoint, HTTPMethod(rawValue: request.method.rawValue), path,
                body: body.map { Array($0.readableBytesView) }, credentials: (creds.username, creds.password),
                contentType: request.headers[.contentType], timeout: .seconds(60))
            var headers: HTTPFields = [:]
            if let type = reply.contentType { headers[.contentType] = type }
            return Response(
                status: HTTPResponse.Status(code: Int(reply.status)), headers: headers,
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: reply.body)))
        } catch {
            return AdminResponses.general(
                .badGateway, "The views service on port \(endpoint.port) does not answer")
        }
    }
}
