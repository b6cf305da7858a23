import ArgumentParser
import Dispatch
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import SetteeAdmin
import SetteeClusterMap
import SetteeCore
import SetteeNode
import SetteeStorage
import SetteeViews
import SetteeViewsServer
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// `settee-server`: one data node. Thin: parses flags, opens the registry (warming up every
/// bucket), starts the KV listener and the admin HTTP API, and on SIGTERM/SIGINT flushes every
/// bucket to disk before exiting 0.
///
/// Exit codes: 0 clean shutdown; 1 bad flags or a start-up failure; 2 the node refused to start because
/// its metadata file is missing next to bucket data; 3 shutdown gave up persisting (items were lost,
/// counted in the log).
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

    @Option(help: "Views port (Couchbase's 8092 capi): design documents and view queries.")
    var viewsPort: Int = 8092

    @Option(help: "Node name; defaults to n_<admin-port>@<host>.")
    var name: String?

    @Option(help: "KV event-loop threads (default: number of cores).")
    var kvThreads: Int = System.coreCount

    @Option(
        help:
            "Nice value for each bucket's flusher and expiry threads (0-19): above 0 they give way to the KV event loops, shortening latency tails at the cost of persistence lag under saturation."
    )
    var backgroundNice: Int32 = 0

    @Option(help: "Admin console: seconds an unused log-in session lives.")
    var uiSessionTimeout: Int = Limits.consoleSessionIdleTimeoutSeconds

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String = "info"

    @Option(help: "User data (names, keys, paths) in logs: none, partial (marked <ud>...</ud>), full (hashed).")
    var logRedactionLevel: String = "partial"

    @Option(help: "Seconds a KV connection has to authenticate (or use an open bucket) before it is closed.")
    var kvHandshakeTimeout: Double = Double(Limits.kvHandshakeDeadlineSeconds)

    @Option(help: "Seconds an admin or views HTTP connection may stay idle or dribble a request head.")
    var httpIdleTimeout: Double = Double(Limits.httpIdleTimeoutSeconds)

    @Option(
        help: ArgumentHelp(
            "Start bucket NAME in repair mode (repeatable): rows that fail verification are skipped, reported and deleted from its file; a data file that cannot be read is moved aside and the bucket starts empty.",
            valueName: "NAME"))
    var repairBucket: [String] = []

    @Option(
        help:
            "Seconds a shutdown keeps retrying to persist dirty items while the disk fails before it gives up (exit code 3)."
    )
    var shutdownPersistTimeout: Int = Limits.shutdownPersistRetrySeconds

    func run() async throws {
        let level = Logger.Level(rawValue: logLevel) ?? .info
        guard let redaction = LogRedactionLevel(rawValue: logRedactionLevel) else {
            throw ValidationError("--log-redaction-level must be none, partial or full")
        }
        LogText.redactionLevel = redaction
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
            nodeUUID: "", servesViews: true)
        logger.info("starting; warming up buckets", metadata: ["dataDir": "\(dataDir)"])
        BackgroundPriority.nice.store(max(0, min(19, backgroundNice)), ordering: .relaxed)
        var engineOptions = EngineOptions()
        engineOptions.shutdownPersistTimeout = Double(max(0, shutdownPersistTimeout))
        let registry: NodeRegistry
        do {
            registry = try NodeRegistry(
                dataDirectory: dataDir, node: info, engineOptions: engineOptions, repairBuckets: Set(repairBucket),
                logger: Logger(label: "settee.registry"))
        } catch RegistryError.metadataMissing(let message) {
            logger.critical("refusing to start: \(message)")
            throw ExitCode(2)
        }
        for name in repairBucket where registry.bucketSettings(named: name) == nil {
            logger.warning("--repair-bucket names no bucket of this node", metadata: ["bucket": "\(name)"])
        }

        let group = MultiThreadedEventLoopGroup(numberOfThreads: max(1, kvThreads))
        // Per-port connection caps, scaled to the descriptors this process may open (raised to the hard limit).
        let descriptors = DescriptorBudget.raiseDescriptorLimit()
        let caps = DescriptorBudget.fit(
            [Limits.maxConnections, Limits.maxAdminConnections, Limits.maxViewsConnections],
            descriptorLimit: descriptors)
        logger.info(
            "connection caps",
            metadata: [
                "descriptors": "\(descriptors)", "kv": "\(caps[0])", "admin": "\(caps[1])", "views": "\(caps[2])",
            ])
        let httpIdle = TimeAmount.milliseconds(Int64(max(0.05, min(httpIdleTimeout, 86_400)) * 1000))
        let node = KVNode(
            registry: registry, logger: Logger(label: "settee.kv"),
            handshakeDeadline: .milliseconds(Int64(max(0, min(kvHandshakeTimeout, 86_400)) * 1000)),
            maxConnections: caps[0])
        let kv: KVServer
        do {
            kv = try await KVServer.start(node: node, host: host, port: kvPort, group: group)
        } catch {
            logger.critical("cannot listen for KV on \(host):\(kvPort): \(error)")
            throw ExitCode(1)
        }
        logger.info("KV listening", metadata: ["port": "\(kv.port)"])
        // Replica streams and majority durability: each node follows the placement it holds. Node-to-node DCP
        // logs in with the cluster's internal credentials.
        let replication = ReplicationManager(
            registry: registry, node: registry.node, group: group,
            credentials: { registry.internalCredentials }, logger: Logger(label: "settee.replication"))
        node.setReplication(replication)
        // Copies this node no longer holds (moved away, or left behind by a failover) are dropped in the
        // background, one vBucket at a time, re-checking just before each drop that it is still unowned.
        let dropQueue = DispatchQueue(label: "settee.drop-unowned")
        let dropUnowned: @Sendable (String) -> Void = { name in
            dropQueue.async {
                guard let engine = registry.bucket(named: name) else { return }
                for vb in registry.unownedVBuckets(bucket: name) where engine.seqnoInfo(vb).highSeqno > .zero {
                    guard registry.unownedVBuckets(bucket: name).contains(vb), engine.vbucketState(vb) == .dead
                    else { continue }
                    do { _ = try engine.rollback(vb, to: .zero) } catch {
                        Logger(label: "settee.server").warning(
                            "could not drop an unowned vBucket", metadata: ["vb": "\(vb)", "error": "\(error)"])
                    }
                }
            }
        }
        let followed = Mutex<Set<String>>([])
        let reconcile: @Sendable (String?) -> Void = { changed in
            // nil: every config may have changed (an adopted cluster config): also stop buckets that are gone.
            let current = Set(registry.bucketNames)
            let names = changed.map { [$0] } ?? Array(current.union(followed.withLock { $0 }))
            for name in names {
                if let duties = registry.duties(bucket: name), registry.bucket(named: name) != nil {
                    replication.reconcile(bucket: name, duties: duties, nodes: registry.mapNodes)
                    followed.withLock { _ = $0.insert(name) }
                    dropUnowned(name)
                } else {
                    replication.removeBucket(name)
                    followed.withLock { _ = $0.remove(name) }
                }
            }
        }
        registry.addConfigObserver(reconcile)
        reconcile(nil)

        // Views (capi port): indexes of existing design documents resume in the background.
        let views = NodeViews(registry: registry, logger: Logger(label: "settee.views"))
        views.openAll()
        let viewsApp = ViewsServer.makeApplication(
            views: views, host: host, port: viewsPort, logger: Logger(label: "settee.views"),
            idleTimeout: httpIdle, maxConnections: caps[2],
            onListening: { port in
                Logger(label: "settee.views").info("views API listening", metadata: ["port": "\(port)"])
            })
        let viewsAddress = "\(host):\(viewsPort)"
        let viewsTask = Task {
            do { try await viewsApp.run() } catch {
                Logger(label: "settee.views").critical("views API failed on \(viewsAddress): \(error)")
                throw error
            }
        }

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
            console: console, idleTimeout: httpIdle, maxConnections: caps[1],
            onListening: { port in
                Logger(label: "settee.admin").info("admin API listening", metadata: ["port": "\(port)"])
            })
        // A node whose admin API cannot run (its port is taken, say) is not a node: it shuts down and exits 1.
        var adminFailed = false
        do {
            // Returns on SIGTERM/SIGINT after the HTTP server has shut down gracefully.
            try await app.runService()
        } catch {
            logger.critical("admin API failed on \(host):\(adminPort): \(error)")
            adminFailed = true
        }
        logger.info("shutting down: closing KV listener and flushing every bucket")
        heartbeat.cancel()
        viewsTask.cancel()
        _ = await viewsTask.result
        views.shutdown()
        await cluster.shutdown()
        await replication.shutdown()
        await kv.close()
        let lost = registry.shutdown()
        node.shutdownPool()
        try? await group.shutdownGracefully()
        if !lost.isEmpty {
            let total = lost.values.reduce(0, &+)
            let perBucket = lost.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
            logger.critical(
                "shutdown complete, but unpersisted items were lost: the disk could not persist them",
                metadata: ["lostItems": "\(total)", "buckets": "\(perBucket)"])
            throw ExitCode(3)
        }
        if adminFailed { throw ExitCode(1) }
        logger.info("clean shutdown complete")
    }
}
