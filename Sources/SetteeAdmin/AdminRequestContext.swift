import Hummingbird
import NIOCore
import SetteeAuth

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

    /// The peer's host as the KV port counts failed logins (the one parser, `LoginGuard.sourceHost`), so one address
    /// is one throttle key on both ports; nil when unknown.
    var sourceHost: String? { LoginGuard.sourceHost(remoteAddress?.description) }
}
