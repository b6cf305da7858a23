import NIOCore
import NIOPosix
import SetteeAuth

/// Where the smart client runs the expensive step of a SCRAM login.
///
/// The answer to the server-first message (SASL_AUTH answered AUTH_CONTINUE) costs one PBKDF2 run of the
/// iteration count the node chose (4,096 for a settee node, up to `Limits.scramClientMaxIterations` for any
/// server). On the connection's event loop that run would stall every other connection and timer of that loop,
/// so it runs on NIO's process-wide blocking pool (`NIOThreadPool.singleton`: SetteeClient sits beside the node's
/// `BlockingPool`, not above it, and the gateway, the router and the CLI have no pool of their own) and the
/// result comes back on the loop. The other steps (mechanism list, the server-final check) are cheap and stay
/// on the loop.
enum LoginHashing {
    static func receive(
        _ login: SaslClientLogin, _ answer: SaslClientLogin.Answer, on loop: any EventLoop,
        pool: NIOThreadPool = .singleton
    ) -> EventLoopFuture<(SaslClientLogin, SaslClientLogin.Directive)> {
        guard case .authContinue = answer else {
            var machine = login
            let next = machine.receive(answer)
            return loop.makeSucceededFuture((machine, next))
        }
        return pool.runIfActive(eventLoop: loop) {
            var machine = login
            let next = machine.receive(answer)
            return (machine, next)
        }
    }
}
