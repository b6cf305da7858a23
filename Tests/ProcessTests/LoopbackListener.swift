import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
    import Glibc
#endif

/// A TCP listener on 127.0.0.1, on a port the kernel picks, for the fake peers a test runs in its own process
/// (`FakeKVNode`, `WebhookReceiver`): `start` serves each accepted connection on a thread of its own (`serve`
/// returns when the connection is done); `stop` closes the listener and every connection, which ends them.
final class LoopbackListener: @unchecked Sendable {
    let port: Int
    private let listenFD: Int32
    private let stopped = NIOLockedValueBox(false)
    private let clients = NIOLockedValueBox<[Int32]>([])

    /// Binds and listens; nothing is accepted before `start`. `name` names the fake in errors.
    init(name: String) throws {
        let fd = try boundLoopbackSocket(port: 0)
        guard listen(fd, 16) == 0 else {
            close(fd)
            throw HarnessError("\(name): listen failed")
        }
        listenFD = fd
        port = Loopback.localPort(of: fd)
    }

    func start(serve: @escaping @Sendable (Int32) -> Void) {
        let t = Thread { [self] in
            while !stopped.withLockedValue({ $0 }) {
                let c = accept(listenFD, nil, nil)
                if c < 0 { return }
                clients.withLockedValue { $0.append(c) }
                Thread { serve(c) }.start()
            }
        }
        t.start()
    }

    func stop() {
        stopped.withLockedValue { $0 = true }
        shutdown(listenFD, Int32(SHUT_RDWR))
        close(listenFD)
        for c in clients.withLockedValue({ $0 }) {
            shutdown(c, Int32(SHUT_RDWR))
            close(c)
        }
    }
}
