import SetteeHTTPServer

/// The gateway's request context on both listeners: the one every HTTP port that checks passwords shares, so a
/// source is one throttle key here, on the KV port and on the admin API.
typealias GatewayRequestContext = PeerAddressRequestContext
