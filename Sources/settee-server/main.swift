import ArgumentParser
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import SetteeAdmin
import SetteeClusterMap
import SetteeCore
import SetteeNode
import SetteeStorage

#if canImport(Glibc)
    import Glibc
#endif

/// `settee-server`: one data node. Thin: parses flags, opens the registry (warming up every
/// bucket), starts the KV listener and the admin HTTP API, and on SIGTERM/SIGINT flushes every
/// bucket to disk before exiting 0.
@main
struct SetteeServer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "settee-server", abstract: "A Settee data node: memcached-binary KV + Couchbase-style admin API.")

    @Option(help: "Directory for this node's metadata and bucket files (created if absent).")
    var dataDir: String

    @Option(help: "Address to listen on.")
    var host: String = "127.0.0.1"

    @Option(help: "Admin REST API port (Couchbase's 8091).")
    var adminPort: Int = 8091

    @Option(help: "Memcached-binary KV port (Couchbase's 11210).")
    var kvPort: Int = 11210

    @Option(help: "Views port (Couchbase's 8092); reserved, advertised in the cluster map.")
    var viewsPort: Int = 8092

    @Option(help: "Node name; defaults to n_<admin-port>@<host>.")
    var name: String?

    @Option(help: "KV event-loop threads (default: number of cores).")
    var kvThreads: Int = System.coreCount

    @Option(help: "Admin console: seconds an unused log-in session lives.")
    var uiSessionTimeout: Int = Limits.consoleSessionIdleTimeoutSeconds

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String = "info"

    func run() async throws {
        let level = Logger.Level(rawValue: logLevel) ?? .info
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        var logger = Logger(label: "settee.server")
        logger[metadataKey: "node"] = "\(host):\(adminPort)"

        let nodeName = name ?? "n_\(adminPort)@\(host)"
        let info = NodeInfo(
            otpNode: NodeID(nodeName), host: host, adminPort: adminPort, kvPort: kvPort, viewsPort: viewsPort,
            nodeUUID: "")
        logger.info("starting; warming up buckets", metadata: ["dataDir": "\(dataDir)"])
        let registry = try NodeRegistry(dataDirectory: dataDir, node: info, logger: Logger(label: "settee.registry"))

        let group = MultiThreadedEventLoopGroup(numberOfThreads: max(1, kvThreads))
        let node = KVNode(registry: registry, logger: Logger(label: "settee.kv"))
        let kv = try await KVServer.start(node: node, host: host, port: kvPort, group: group)
        logger.info("KV listening", metadata: ["port": "\(kv.port)"])

        let cluster = ClusterManager(registry: registry, logger: Logger(label: "settee.cluster"))
        let heartbeat = Task { await cluster.run() }
        let counters = node.counters
        let console = ConsoleOptions(
            sessions: ConsoleSessions(adminPort: adminPort, idleTimeout: .seconds(max(1, uiSessionTimeout))),
            metrics: NodeMetrics(registry: registry) {
                NodeMetrics.KVSample(connections: counters.connections, gets: counters.gets, sets: counters.sets)
            })
        let app = AdminServer.makeApplication(
            registry: registry, host: host, port: adminPort, logger: Logger(label: "settee.admin"), cluster: cluster,
            console: console,
            onListening: { port in
                Logger(label: "settee.admin").info("admin API listening", metadata: ["port": "\(port)"])
            })
        do {
            // Returns on SIGTERM/SIGINT after the HTTP server has shut down gracefully.
            try await app.runService()
        } catch {
            logger.error("admin API failed", metadata: ["error": "\(error)"])
        }
        logger.info("shutting down: closing KV listener and flushing every bucket")
        heartbeat.cancel()
        await cluster.shutdown()
        await kv.close()
        registry.shutdown()
        node.shutdownPool()
        try? await group.shutdownGracefully()
        logger.info("clean shutdown complete")
    }
}
