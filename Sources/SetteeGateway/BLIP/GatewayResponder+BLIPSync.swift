import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOCore
import SetteeBLIP
import SetteeCore
import SetteeHTTPServer
import SetteeJSON
import SetteeSync

/// `GET /db/_blipsync` (replication-protocol.adoc §2 "Connecting"): the HTTP request authenticates as every REST
/// request does (Basic, then the `SyncGatewaySession` cookie, then GUEST; the admin port as the admin), names the
/// subprotocol (`BLIPSubprotocol.negotiate`: the first of `Sec-WebSocket-Protocol` this gateway speaks, echoed in
/// the answer), and is then upgraded to a WebSocket carrying BLIP, served by a `BLIPSyncHandler` for that user. A
/// refusal is an HTTP error before the upgrade, with the REST error body (`UpgradeRefusalWriter`): 404 unknown
/// database, 503 offline, 403 a cross-site or rebinding request, 400 no subprotocol spoken here, 401 (with
/// `WWW-Authenticate`) or 429 a refused login.
extension GatewayResponder {
    func blipSyncUpgrade(
        _ head: HTTPRequest, route: GatewayRoute, source: String?, channel: (any Channel)?
    ) async -> ShouldUpgradeResult<WebSocketHandler> {
        func refuse(_ e: GatewayError, headers: HTTPFields = [:]) async -> ShouldUpgradeResult<WebSocketHandler> {
            var h = headers
            h[.contentType] = GatewayReply.jsonType
            h[.syncServer] = Self.serverHeader
            await UpgradeRefusalWriter.leave((e.status, h, GatewayReply.errorBody(e)), on: channel)
            return .dontUpgrade
        }
        // The database's keyspaces (ADR 0149): requests name theirs by `getCollections` index; authentication and
        // the online state are the primary keyspace's (users and sessions are the database's).
        guard let db = server.databases[route.db], let spaces = server.keyspaces[route.db] else {
            return await refuse(.status(404, "no such database \"\(route.db)\""))
        }
        guard db.isOnline else { return await refuse(.status(503, "DB is currently under maintenance")) }
        if refusesHost(head.authority) { return await refuse(.status(403, "Host is not this admin port's")) }
        guard
            CORSConfig.allowsWebSocket(
                origin: head.headerFields[.origin], host: head.authority, config: admin ? nil : server.config.cors)
        else { return await refuse(.status(403, "Cross-origin request refused")) }
        guard let subprotocol = BLIPSubprotocol.negotiate(head.headerFields[.secWebSocketProtocol]) else {
            return await refuse(
                BLIPSyncUpgrade.refusal(
                    upgrade: head.headerFields[.upgrade], subprotocol: head.headerFields[.secWebSocketProtocol]))
        }
        var user: UserContext? = nil
        if !admin {
            do { user = try await authenticate(headers: head.headerFields, db: db, source: source) } catch let e
                as GatewayError
            {
                return await refuse(e, headers: e.status == 401 ? Self.challenge : [:])
            } catch {
                return await refuse(.status(500, "Internal error: \(error)"))
            }
        }
        let logger = server.logger
        let handler = BLIPSyncHandler(
            keyspaces: BLIPKeyspaces(primary: db, keyspaces: spaces), user: user, subprotocol: subprotocol,
            logger: logger)
        var headers = HTTPFields()
        headers[.secWebSocketProtocol] = subprotocol.rawValue
        headers[.syncServer] = Self.serverHeader
        let database = route.db
        return .upgrade(headers) { inbound, outbound, _ in
            defer { handler.close() }
            handler.logOpened(database: database, peerAddress: source)
            try await BLIPSyncConnection.serve(handler: handler, inbound: inbound, outbound: outbound)
        }
    }
}
