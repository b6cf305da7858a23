import ArgumentParser
import Dispatch
import Logging
import NIOCore
import NIOPosix
import SetteeClient
import SetteeCore
import SetteeTLS

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

    @Option(
        help:
            "Seed addresses (comma-separated): http://HOST:ADMINPORT or couchbase://HOST:KVPORT; https://HOST:18091 or couchbases://HOST:11207 for TLS (with --cacert or --cert-pin)."
    )
    var cluster = "http://127.0.0.1:8091"

    @Option(help: "CA certificate (PEM) that verifies the cluster's TLS certificate.")
    var cacert: String?

    @Option(help: "Pinned TLS certificate of the cluster, sha256:HEX (instead of --cacert).")
    var certPin: String?

    @Option(help: "Bucket to serve.")
    var bucket = "demo"

    @Option(
        name: [.customShort("u"), .long],
        help: "Cluster user; clients may log in to the router with the same (SCRAM-SHA512/256/1 or PLAIN).")
    var username: String?

    @Option(name: [.customShort("p"), .long], help: "Cluster password.")
    var password: String?

    @Flag(help: "Refuse keyed commands from clients that have not authenticated with the router's credentials.")
    var requireAuth = false

    @Option(help: "Per-operation deadline in milliseconds, retries included.")
    var timeoutMs = ClientLimits.defaultOperationTimeoutMs

    @Option(
        help: "With --require-auth: seconds a client connection has to authenticate before it is closed (0: never).")
    var handshakeTimeout = Double(Limits.kvHandshakeDeadlineSeconds)

    @Option(
        help: "Client connections open at once; more are closed when accepted (lowered to fit the descriptor limit).")
    var maxConnections = Limits.maxConnections

    @Option(help: "Event-loop threads (default: cores).")
    var threads: Int?

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel = "info"

    func run() async throws {
        // Every entry stays on one line whatever a client sent (LineSafeLogHandler), on standard error as the
        // server's and the gateway's.
        LoggingSystem.bootstrap { label in LineSafeLogHandler(StreamLogHandler.standardError(label: label)) }
        var logger = Logger(label: "settee.router")
        logger.logLevel = Logger.Level(rawValue: logLevel) ?? .info
        guard let listenAddr = splitHostPort(listen) else { throw ValidationError("--listen must be HOST:PORT") }
        let seedTexts = cluster.split(separator: ",").map(String.init)
        let seeds = seedTexts.compactMap { Seed($0) }
        guard !seeds.isEmpty else { throw ValidationError("--cluster has no usable address") }
        let trust: TLSTrust?
        do { trust = try TLSTrust.forSeeds(seedTexts, caFile: cacert, pin: certPin) } catch {
            throw ValidationError("\(error)")
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: threads ?? System.coreCount)
        var options = ClientOptions(
            seeds: seeds, bucket: bucket, username: username, password: password, operationTimeoutMs: timeoutMs)
        options.tls = trust
        let client = try await BucketClient.connect(options, group: group, logger: logger)
        await client.connectAll()
        let config = RouterConfig(
            username: username, password: password, login: RouterLogin(username: username, password: password),
            requireAuth: requireAuth, bucket: bucket,
            operationTimeoutMs: timeoutMs, tls: client.tlsContext,
            flushVia: seeds.lazy.compactMap { if case .http(let a) = $0 { a } else { nil } }.first,
            handshakeDeadline: .milliseconds(Int64(max(0, min(handshakeTimeout, 86_400)) * 1000)),
            maxConnections: DescriptorBudget.fit(
                [max(1, maxConnections)], descriptorLimit: DescriptorBudget.raiseDescriptorLimit())[0])
        let stats = RouterStats()
        let handlerLogger = logger
        let server = try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            // Past `high` unsent bytes a connection stops taking requests until its client has read down to `low`.
            .childChannelOption(
                .writeBufferWaterMark,
                value: .init(low: Limits.kvOutputLowWaterBytes, high: Limits.kvOutputHighWaterBytes)
            )
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
