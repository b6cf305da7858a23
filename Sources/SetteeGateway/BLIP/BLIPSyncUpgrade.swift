import SetteeJSON

/// Why a `GET /db/_blipsync` was not upgraded to a BLIP WebSocket, as the error its client gets (Sync Gateway
/// answers these with an HTTP error before the upgrade; Couchbase Lite reports the status as its replicator's error):
/// no `Upgrade: websocket` at all, or no `Sec-WebSocket-Protocol` this gateway speaks (`BLIPSubprotocol`).
enum BLIPSyncUpgrade {
    static func refusal(upgrade: String?, subprotocol: String?) -> GatewayError {
        guard upgrade?.lowercased().contains("websocket") == true else {
            return .status(
                400, "/_blipsync is Couchbase Lite's replication WebSocket: the request needs Upgrade: websocket")
        }
        return unsupportedSubprotocol(subprotocol)
    }

    static func unsupportedSubprotocol(_ offered: String?) -> GatewayError {
        let speaks = BLIPSubprotocol.supportedNames.joined(separator: ", ")
        guard let offered, !offered.isEmpty else {
            return .status(400, "Missing Sec-WebSocket-Protocol: this gateway speaks \(speaks)")
        }
        return .status(
            400, "Unsupported WebSocket subprotocol \"\(offered)\": this gateway speaks \(speaks)")
    }
}
