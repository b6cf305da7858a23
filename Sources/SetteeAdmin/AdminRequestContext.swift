import SetteeHTTPServer

/// The admin and console API's request context: the one every HTTP port that checks passwords shares.
public typealias AdminRequestContext = PeerAddressRequestContext
