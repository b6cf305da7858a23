import Hummingbird
import NIOCore
import NIOHTTP1
import SetteeClusterMap
import SetteeCore
import SetteeJSON
import SetteePeerHTTP
import SetteeRegistry
import SetteeStorage

/// `/settee/views/REST` → `http://HOST:VIEWSPORT/REST` on this node, for the console's Views page: the pages come
/// from the admin port, so calling the views port directly would be cross-origin (CORS, and the session cookie
/// would not go there). The relay authenticates to the views service with the internal credentials; the caller
/// has already passed this port's admin check. Design documents, queries and their parameters pass unchanged.
///
/// The views service's answer is held whole before it is relayed, so what the relay reads is bounded: at most
/// `bounds.maxReplyBytes` (`Limits.viewsRelayMaxReplyBytes`, a view query's own budget: past it 413 `too_large`,
/// as the views port answers a query past its budget) and all of it within `bounds.deadline`
/// (`Limits.viewsRelayDeadlineSeconds`: past it 504). The caller's body is read whole first, at most
/// `bounds.maxRequestBytes` (`Limits.viewsRelayMaxRequestBytes`, the views port's own bound): past it 413 `too_large`,
/// never a forward without it.
enum ViewsRelay {
    static let prefix = "/settee/views"

    /// What one relayed call may read from the views service, and for how long.
    struct Bounds: Sendable {
        /// The caller's request body, at most (`Limits.viewsRelayMaxRequestBytes`, the views port's own bound).
        var maxRequestBytes = Limits.viewsRelayMaxRequestBytes
        var maxReplyBytes = Limits.viewsRelayMaxReplyBytes
        var deadline = Duration.seconds(Limits.viewsRelayDeadlineSeconds)
    }

    static func add(to router: Router<AdminRequestContext>, api: AdminAPI, bounds: Bounds = Bounds()) {
        router.get("/settee/views/**") { r, _ in await relay(r, api: api, bounds: bounds) }
        router.put("/settee/views/**") { r, _ in await relay(r, api: api, bounds: bounds) }
        router.delete("/settee/views/**") { r, _ in await relay(r, api: api, bounds: bounds) }
        router.post("/settee/views/**") { r, _ in await relay(r, api: api, bounds: bounds) }
        // Couchbase lists a bucket's design documents on the admin port.
        router.get("/pools/default/buckets/:name/ddocs") { r, c in
            let name = bucketParameter(c) ?? ""
            return await relay(
                r, api: api, bounds: bounds, path: "/" + PercentEncoding.encode(name) + "/_settee_ddocs")
        }
    }

    static func relay(_ request: Request, api: AdminAPI, bounds: Bounds, path fixedPath: String? = nil) async
        -> Response
    {
        guard let peers = api.cluster?.peers else {
            return AdminResponses.general(.serviceUnavailable, "The views relay needs the cluster manager")
        }
        var request = request
        // The caller's body goes whole or the request does not go: forwarded without it, the views service would see
        // another request (a design document PUT without its document).
        let body: ByteBuffer
        do { body = try await request.collectBody(upTo: bounds.maxRequestBytes) } catch is NIOTooManyBytesError {
            return AdminResponses.json(
                .contentTooLarge,
                .errorBody(
                    "too_large", reason: "The request body is larger than \(bounds.maxRequestBytes) bytes"))
        } catch {
            return AdminResponses.json(
                .badRequest, .errorBody("bad_request", reason: "The request body could not be read: \(error)"))
        }
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
                body: Array(body.readableBytesView), credentials: (creds.username, creds.password),
                contentType: request.headers[.contentType], timeout: bounds.deadline,
                maxReplyBytes: bounds.maxReplyBytes, deadline: bounds.deadline)
            var headers: HTTPFields = [:]
            if let type = reply.contentType { headers[.contentType] = type }
            return Response(
                status: HTTPResponse.Status(code: Int(reply.status)), headers: headers,
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: reply.body)))
        } catch let error as PeerReplyTooLarge {
            // The views port's own answer to a query past its budget (`ViewError.tooLarge`), so the console and
            // scripts see one error for one cause.
            return AdminResponses.json(
                .contentTooLarge,
                .errorBody(
                    "too_large",
                    reason: "The views service's answer is larger than \(error.maxBytes) bytes; ask for fewer rows "
                        + "with limit and page with startkey and startkey_docid"))
        } catch let error as PeerDeadlinePassed {
            return AdminResponses.json(
                .gatewayTimeout,
                .errorBody(
                    "timeout", reason: "The views service on port \(endpoint.port) did not answer in \(error.deadline)")
            )
        } catch {
            return AdminResponses.general(
                .badGateway, "The views service on port \(endpoint.port) does not answer")
        }
    }
}
