import Logging
import NIOCore
import NIOPosix
import NIOSSL
import SetteeCore
import SetteeRegistry
import SetteeStorage
import Synchronization

/// What every KV connection of a node shares: the registry of buckets, counters, a pool for the
/// rare blocking operations (bucket flush), and the clock.
public final class KVNode: Sendable {
    public let registry: NodeRegistry
    public let counters: NodeCounters
    public let logger: Logger
    public let blockingPool: NIOThreadPool
    /// DCP producer scans (change feed), kept apart so replication load never delays logins or flushes.
    public let streamPool: NIOThreadPool
    public let clock: any WallClock
    /// STATS `collections` passes running on `blockingPool` (at most `Limits.collectionStatsPassesPerNode`).
    let collectionStatsPasses = Atomic<Int>(0)
    public static let version = "7.2.0-settee"
    /// Time a new connection has to authenticate or use an open bucket before it is closed (zero: never).
    public let handshakeDeadline: TimeAmount
    /// Concurrent KV connections; more are closed on accept.
    public let maxConnections: Int
    /// Connections each KV listener accepts a second (`AcceptPacer`, ADR 0062; zero: unpaced).
    public let acceptsPerSecond: Int
    private let replicationSlot = Mutex<ReplicationManager?>(nil)

    /// The replication manager, for majority durability and replica acknowledgements (nil: single node).
    public var replication: ReplicationManager? { replicationSlot.withLock { $0 } }

    /// Installs the replication manager (settee-server does this once both exist).
    public func setReplication(_ manager: ReplicationManager?) { replicationSlot.withLock { $0 = manager } }

    /// What a cluster-wide bucket flush came to, for the binary FLUSH's status.
    public enum BucketFlushOutcome: Sendable, Equatable {
        case flushed, notFound, disabled, rebalanceRunning
        case failed(String)
    }
    private let bucketFlushSlot = Mutex<(@Sendable (String) async -> BucketFlushOutcome)?>(nil)

    /// The cluster-wide flush a binary FLUSH runs (nil: flush this node's copy only, as a lone node does).
    public var bucketFlush: (@Sendable (String) async -> BucketFlushOutcome)? { bucketFlushSlot.withLock { $0 } }

    /// Installs the cluster manager's flush (settee-server), so a binary FLUSH empties the bucket on every node.
    public func setBucketFlush(_ flush: (@Sendable (String) async -> BucketFlushOutcome)?) {
        bucketFlushSlot.withLock { $0 = flush }
    }

    public init(
        registry: NodeRegistry, clock: any WallClock = SystemWallClock(), logger: Logger,
        handshakeDeadline: TimeAmount = .seconds(Limits.kvHandshakeDeadlineSeconds),
        maxConnections: Int = Limits.maxConnections,
        acceptsPerSecond: Int = Limits.kvAcceptsPerSecond
    ) {
        self.registry = registry
        self.acceptsPerSecond = max(0, acceptsPerSecond)
        self.handshakeDeadline = handshakeDeadline
        self.maxConnections = maxConnections
        self.clock = clock
        self.logger = logger
        self.counters = NodeCounters(startedAt: clock.nowNanoseconds())
        self.blockingPool = NIOThreadPool(numberOfThreads: 2)
        self.blockingPool.start()
        self.streamPool = NIOThreadPool(numberOfThreads: Limits.dcpScanThreads)
        self.streamPool.start()
        let pushes = configPushes
        registry.addConfigObserver { bucket in pushes.publish(changed: bucket) }
    }

    /// Connections that agreed Duplex + ClustermapChangeNotification.
    let configPushes = ConfigPushes()

    public func shutdownPool() {
        try? blockingPool.syncShutdownGracefully()
        try? streamPool.syncShutdownGracefully()
    }
}

/// The KV listener: a NIO server bootstrap whose child channels each get a `KVConnectionHandler`.
public final class KVServer: Sendable {
    public let node: KVNode
    public let channel: any Channel

    /// Binds `host:port` (port 0 picks a free one; see `port`). With `tls`, every connection starts with a
    /// TLS handshake (Couchbase's KV TLS port, 11207); the handshake runs inside the connection's
    /// authentication deadline and counts against the same connection cap, as the handler sees the
    /// connection from accept.
    public static func start(
        node: KVNode, host: String, port: Int, group: any EventLoopGroup, tls: NIOSSLContext? = nil
    ) async throws -> KVServer {
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.backlog, value: Limits.kvListenBacklog)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(ChannelOptions.maxMessagesPerRead, value: UInt(Limits.kvAcceptsPerRead))
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    guard node.acceptsPerSecond > 0 else { return }
                    try channel.pipeline.syncOperations.addHandler(
                        AcceptPacingHandler(ratePerSecond: node.acceptsPerSecond, burst: Limits.kvAcceptBurst))
                }
            }
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try setChildOptions(channel)
                    if let tls { try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls)) }
                    try channel.pipeline.syncOperations.addHandler(KVConnectionHandler(node: node))
                }
            }
        let channel = try await bootstrap.bind(host: host, port: port).get()
        return KVServer(node: node, channel: channel)
    }

    /// What every accepted connection's receive buffers start from (a value shared by all, not built per connection).
    static let childRecvAllocator = AdaptiveRecvByteBufferAllocator(
        minimum: 1024, initial: 16 * 1024, maximum: 1024 * 1024)

    /// Sets an accepted connection's options directly on its event loop, inside the child initializer: through
    /// `childChannelOption` NIO applied them one chained future each (five futures and closures per connection,
    /// on the listener's loop's accept path during a connect flood; issue 16).
    static func setChildOptions(_ channel: any Channel) throws {
        guard let options = channel.syncOptions else { throw ChannelError.operationUnsupported }
        try options.setOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
        try options.setOption(ChannelOptions.maxMessagesPerRead, value: 16)
        try options.setOption(
            ChannelOptions.writeBufferWaterMark,
            value: .init(low: Limits.kvOutputLowWaterBytes, high: Limits.kvOutputHighWaterBytes))
        try options.setOption(ChannelOptions.recvAllocator, value: childRecvAllocator)
    }

    init(node: KVNode, channel: any Channel) {
        self.node = node
        self.channel = channel
    }

    public var port: Int { channel.localAddress?.port ?? 0 }

    public func close() async {
        try? await channel.close()
    }
}

/// The shell of `AcceptPacer` on a listener's server channel: counts the connections each read of the socket
/// accepted and, when the pacer says so, turns the listener's autoRead off for the pause (new connects wait in the
/// kernel's listen backlog, `Limits.kvListenBacklog`), then on again. Sits before NIO's accept handler and passes
/// every accepted channel on unchanged.
final class AcceptPacingHandler: ChannelDuplexHandler {
    typealias InboundIn = any Channel
    typealias InboundOut = any Channel
    typealias OutboundIn = Never

    private var pacer: AcceptPacer
    private var acceptedThisRead = 0
    private var paused = false

    init(ratePerSecond: Int, burst: Int) {
        pacer = AcceptPacer(ratePerSecond: ratePerSecond, burst: burst, now: Self.now())
    }

    static func now() -> Int64 { Int64(truncatingIfNeeded: NIODeadline.now().uptimeNanoseconds) }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        acceptedThisRead += 1
        context.fireChannelRead(data)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        let count = acceptedThisRead
        acceptedThisRead = 0
        if count > 0, !paused, case .pause(let nanoseconds) = pacer.accepted(count, now: Self.now()) {
            paused = true
            try? context.channel.syncOptions?.setOption(ChannelOptions.autoRead, value: false)
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(in: .nanoseconds(nanoseconds)) {
                let (handler, context) = bound.value
                handler.paused = false
                guard context.channel.isActive else { return }
                try? context.channel.syncOptions?.setOption(ChannelOptions.autoRead, value: true)
                context.read()
            }
        }
        context.fireChannelReadComplete()
    }

    /// While paused, reads asked for from elsewhere (NIO's accept handler after an accept error) wait for the
    /// pause to end.
    func read(context: ChannelHandlerContext) {
        if !paused { context.read() }
    }
}
