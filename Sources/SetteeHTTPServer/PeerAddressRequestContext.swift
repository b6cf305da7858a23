import Hummingbird
import NIOCore
import SetteeAuth

/// The request context of every HTTP port that checks passwords (admin and console, views, the gateway):
/// Hummingbird's basic context plus the connection's peer address, so failed logins are counted per user at each source
/// (`LoginGuard`, ADR 0144): failures in a user's name from elsewhere never lock the user out at this address.
public struct PeerAddressRequestContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let remoteAddress: SocketAddress?

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.remoteAddress = source.channel.remoteAddress
    }

    /// The peer's host as every port counts failed logins (the one parser, `LoginGuard.sourceHost`), so one address
    /// is one throttle key on every port; nil when unknown.
    public var sourceHost: String? { LoginGuard.sourceHost(remoteAddress?.description) }
}
