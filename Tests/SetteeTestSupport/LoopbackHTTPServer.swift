import Hummingbird
import Synchronization

/// Runs `router` on a port of 127.0.0.1 the kernel picks, as the task `task` holds (cancel it to stop), and returns
/// the port once the server listens: the one way tests' fake HTTP peers listen (a CouchDB source, a views port, a
/// peer node). With `executor` (`TestThreadPool.oneThread`) the server's work runs there, off the cooperative pool.
package func serveOnLoopback(
    _ router: Router<BasicRequestContext>, in task: borrowing Mutex<Task<Void, any Error>?>,
    executor: (any TaskExecutor)? = nil
) async -> Int {
    let (stream, continuation) = AsyncStream.makeStream(of: Int.self)
    let app = Application(
        router: router,
        configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: 0)),
        onServerRunning: { channel in continuation.yield(channel.localAddress?.port ?? 0) })
    task.withLock { $0 = Task(executorPreference: executor) { try await app.runService() } }
    var iterator = stream.makeAsyncIterator()
    return await iterator.next() ?? 0
}
