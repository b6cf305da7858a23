import Hummingbird
import NIOCore
import SetteeAuth

/// The gateway's request context on both listeners: Hummingbird's basic context plus the connection's peer address,
/// so failed logins are counted per source as well as per user (`LoginGuard`), as on the KV port and the admin API
/// (`AdminRequestContext`), and a source a user logged in from is not locked out by failures in the user's name
/// from elsewhere.
struct GatewayRequestContext: RequestContext, RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: SocketAddress?

    init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.remoteAddress = source.channel.remoteAddress
    }

    /// The peer's host as every port counts failed logins (the one parser, `LoginGuard.sourceHost`); nil when
    /// unknown.
    var sourceHost: String? { LoginGuard.sourceHost(remoteAddress?.description) }
}
