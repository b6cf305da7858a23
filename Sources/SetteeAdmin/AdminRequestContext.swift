import Hummingbird
import NIOCore

/// The admin and console API's request context: Hummingbird's basic context plus the connection's peer address,
/// so failed logins are counted per source as well as per user (`LoginGuard`), and a source the user logged in
/// from is not locked out by failures in the user's name from elsewhere.
public struct AdminRequestContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let remoteAddress: SocketAddress?

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.remoteAddress = source.channel.remoteAddress
    }

    /// The peer's IP address, as the KV port counts it (`LoginGuard.sourceHost`); nil when unknown.
    var sourceHost: String? { remoteAddress?.ipAddress }
}
