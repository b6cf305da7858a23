import ArgumentParser
import Dispatch
import Logging
import NIOCore
import NIOPosix
import SetteeClient
import SetteeCore

#if canImport(Glibc)
    import Glibc
#endif

/// `settee-router`: one memcached-binary port for vBucket-unaware clients (moxi's role). Keyed
/// requests are routed with `BucketClient`; the vBucket a client sends is ignored and recomputed.
@main
struct SetteeRouter: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "settee-router", abstract: "Route memcached-binary clients to the right Settee node.")

    @Option(help: "Address to listen on, HOST:PORT.")
    var listen = "127.0.0.1:11211"

    @Option(help: "Seed addresses (comma-separated): http://HOST:ADMINPORT or couchbase://HOST:KVPORT.")
    var cluster = "http://127.0.0.1:8091"

    @Option(help: "Bucket to serve.")
    var bucket = "demo"

    @Option(name: [.customShort("u"), .long], help: "Cluster user; clients may SASL PLAIN with the same.")
    var username: String?

    @Option(name: [.customShort("p"), .long], help: "Cluster password.")
    var password: String?

    @Flag(help: "Refuse keyed commands from clients that have not authenticated with the router's credentials.")
    var requireAuth = false

    @Option(help: "Per-operation deadline in milliseconds, retries included.")
    var timeoutMs = ClientLimits.defaultOperationTimeoutMs

    @Option(help: "Event-loop threads (default: cores).")
    var threads: Int?

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel = "info"

    func run() async throws {
        var logger = Logger(label: "settee.router")
        logger.logLevel = Logger.Level(rawValue: logLevel) ?? .info
        guard let listenAddr = splitHostPort(listen) else { throw ValidationError("--listen must be HOST:PORT") }
        let seeds = cluster.split(separator: ",").compactMap { Seed(String($0)) }
        guard !seeds.isEmpty else { throw ValidationError("--cluster has no usable address") }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: threads ?? System.coreCount)
        let client = try await BucketClient.connect(
            ClientOptions(
                seeds: seeds, bucket: bucket, username: username, password: password, operationTimeoutMs: timeoutMs),
            group: group, logger: logger)
        await client.connectAll()
        let config = RouterConfig(
            username: username, password: password, requireAuth: requireAuth, bucket: bucket,
            operationTimeoutMs: timeoutMs,
            flushVia: seeds.lazy.compactMap { if case .http(let a) = $0 { a } else { nil } }.first)
        let stats = RouterStats()
        let handlerLogger = logger
        let server = try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        RouterHandler(client: client, config: config, stats: stats, logger: handlerLogger))
                }
            }
            .bind(host: listenAddr.host, port: listenAddr.port).get()
        logger.notice(
            "settee-router listening",
            metadata: [
                "listen": "\(server.localAddress.map { "\($0)" } ?? listen)", "bucket": "\(bucket)",
                "map": "\(client.configRevision.map { "\($0)" } ?? "-")",
            ])
        // Stop on SIGTERM/SIGINT: close the listener; the process exits when its channel closes.
        let signals: [Int32] = [SIGTERM, SIGINT]
        var sources: [any DispatchSourceSignal] = []
        for sig in signals {
            signal(sig, SIG_IGN)
            let src = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            src.setEventHandler { server.close(promise: nil) }
            src.resume()
            sources.append(src)
        }
        try await server.closeFuture.get()
        _ = sources
        await client.close()
        try await group.shutdownGracefully()
    }
}
