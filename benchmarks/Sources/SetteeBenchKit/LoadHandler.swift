import Histogram
import NIOCore
import SetteeCore
import Synchronization

/// How a connection picks the key of its next op.
public enum KeyOrder: Sendable, Hashable {
    /// Uniformly random over the key space (the measured phases).
    case uniform
    /// `first`, `first + stride`, ... until the key space ends (the preload: each key once).
    case sequential(first: Int, stride: Int)
}

/// The keys one connection (or one smart-client lane) asks for, in order: random, or its own share of a sequential
/// pass. Every user of `KeyOrder` draws its keys here, so the shares of a sequential pass (`first` = 0 ..< stride)
/// cover the key space exactly once whatever the connections' speeds.
public struct KeyCursor: Sendable {
    private let order: KeyOrder
    private let keys: Int
    private var nextSequential: Int

    public init(_ order: KeyOrder, keys: Int) {
        self.order = order
        self.keys = keys
        if case .sequential(let first, _) = order { nextSequential = first } else { nextSequential = 0 }
    }

    /// The next key's index in 0 ..< keys; nil once this share of a sequential pass is written out (a uniform
    /// order never ends). A uniform draw takes one number from `rng`, a sequential one none.
    public mutating func next(_ rng: inout SplitMix64) -> Int? {
        switch order {
        case .uniform:
            return keys > 0 ? Int(rng.next() % UInt64(keys)) : nil
        case .sequential(_, let stride):
            guard nextSequential < keys else { return nil }
            defer { nextSequential += max(1, stride) }
            return nextSequential
        }
    }
}

/// Everything one connection needs to run a phase, fixed when the phase starts.
public struct ConnectionPlan: Sendable {
    public var getPercent: Int
    public var keys: Int
    public var keyOrder: KeyOrder
    /// Closed loop: requests kept outstanding. Ignored in open loop.
    public var depth: Int
    /// No op starts at or after this instant (nil: bounded by the op budget only).
    public var stopAt: NIODeadline?
    /// Outstanding requests are given up (counted as timeouts) at this instant.
    public var abandonAt: NIODeadline
    /// Ops that start before this instant (uptime ns) are not counted: the warmup.
    public var recordAfter: UInt64
    /// Open loop: one op every `interval` ns on this connection, starting at `firstIntended`.
    public var openLoop: (interval: UInt64, firstIntended: UInt64)?
    /// Open loop: the most requests outstanding; later ops wait and their wait counts as latency.
    public var maxInFlight: Int
    /// Open loop: the shortest sleep between sends when nothing arrives; a request can leave up to
    /// this late, and that delay counts as latency (the generator errs against itself).
    public var tickNanos: UInt64
    public var seed: UInt64
    /// Temporary failures are sent again under this policy (the preload); nil: counted as errors.
    public var retry: TemporaryFailureRetry? = nil
    /// When the phase started (uptime ns), the origin of `retry`'s total time.
    public var phaseStart: UInt64 = 0
}

@inline(__always) func uptimeNanos() -> UInt64 { NIODeadline.now().uptimeNanoseconds }

/// Drives one connection: writes requests, matches responses in order, records latency and
/// errors. Runs entirely on its event loop; the report leaves through `reportFuture`.
///
/// Closed loop: each response releases the next request, keeping `depth` outstanding; latency is
/// send-to-response. Open loop: requests are due at fixed intervals; latency runs from the *intended*
/// send time, so a stalled server is charged for the requests it delayed (no coordinated omission).
/// Writes produced while handling one read are flushed once, at `channelReadComplete`.
final class LoadHandler<Codec: LoadCodec>: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private struct Outstanding {
        var start: UInt64
        var kind: OpKind
        var opaque: UInt32
        var key: Int
        /// Times this request was sent again after a temporary failure.
        var retries: Int
    }

    private let control: RunControl
    private var codec: Codec
    private var plan: ConnectionPlan?
    private var rng = SplitMix64(seed: 1)
    private var report = ConnectionReport()
    private var outstanding = CircularBuffer<Outstanding>(initialCapacity: 64)
    private var received: ByteBuffer?
    private var out = ByteBuffer()
    private var nextOpaque: UInt32 = 1
    private var keyCursor = KeyCursor(.uniform, keys: 0)
    private var nextIntended: UInt64 = 0
    private var issuing = false
    private var done = false
    private var context: ChannelHandlerContext?
    private var promise: EventLoopPromise<ConnectionReport>?
    private var tick: Scheduled<Void>?
    private var watchdog: Scheduled<Void>?
    /// Requests waiting for their retry's back-off.
    private var pendingRetries = 0

    init(codec: Codec, control: RunControl) {
        self.codec = codec
        self.control = control
    }

    var reportFuture: EventLoopFuture<ConnectionReport> { promise!.futureResult }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        self.promise = context.eventLoop.makePromise()
        self.out = context.channel.allocator.buffer(capacity: 16 * 1024)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        finish(close: false)
        self.context = nil
    }

    /// Starts the phase; called on the event loop once every connection of the run is up.
    func start(_ plan: ConnectionPlan) {
        guard let context, !done else { return }
        precondition(self.plan == nil, "LoadHandler started twice")
        self.plan = plan
        rng = SplitMix64(seed: plan.seed)
        keyCursor = KeyCursor(plan.keyOrder, keys: plan.keys)
        issuing = true
        let loop = context.eventLoop.assumeIsolated()
        watchdog = loop.scheduleTask(deadline: plan.abandonAt) { self.abandon() }
        let now = uptimeNanos()
        if let openLoop = plan.openLoop {
            nextIntended = openLoop.firstIntended
            pump(now: now)
        } else {
            for _ in 0..<plan.depth where issueNext(start: now, now: now) {}
        }
        flush()
        finishIfDrained()
    }

    // MARK: requests

    /// Writes one request into the pending buffer; false (and no more issuing) once the phase is over.
    private func issueNext(start: UInt64, now: UInt64) -> Bool {
        guard issuing, let plan else { return false }
        if control.isStopped || (plan.stopAt.map { now >= $0.uptimeNanoseconds } ?? false) {
            issuing = false
            return false
        }
        guard let key = keyCursor.next(&rng) else {
            issuing = false
            return false
        }
        guard control.takeOne() else {
            issuing = false
            return false
        }
        let kind: OpKind
        switch plan.getPercent {
        case 100: kind = .get
        case 0: kind = .set
        default: kind = rng.next() % 100 < UInt64(plan.getPercent) ? .get : .set
        }
        send(kind, key: key, start: start, retries: 0)
        return true
    }

    private func send(_ kind: OpKind, key: Int, start: UInt64, retries: Int) {
        let opaque = nextOpaque
        nextOpaque &+= 1
        switch kind {
        case .get: codec.writeGet(key: key, opaque: opaque, into: &out)
        case .set: codec.writeSet(key: key, opaque: opaque, into: &out)
        }
        outstanding.append(Outstanding(start: start, kind: kind, opaque: opaque, key: key, retries: retries))
    }

    /// A request refused for now: sent again after the policy's back-off, or given up (an error) when its time
    /// is spent or the phase has no policy.
    private func retryOrFail(_ op: Outstanding, _ kind: String, now: UInt64, counted: Bool) {
        guard let policy = plan?.retry, let context else {
            control.failed.add(1, ordering: .relaxed)
            if counted { report.addError("\(op.kind.name): \(kind)") }
            return
        }
        guard case .retry(let delay) = policy.decide(retries: op.retries, phaseStart: plan!.phaseStart, now: now) else {
            control.failed.add(1, ordering: .relaxed)
            report.failedAfterRetries += 1
            report.addError("\(op.kind.name): \(kind) (retries spent)")
            return
        }
        report.retried += 1
        pendingRetries += 1
        let loop = context.eventLoop.assumeIsolated()
        loop.scheduleTask(deadline: NIODeadline.uptimeNanoseconds(now &+ delay)) {
            self.pendingRetries -= 1
            guard !self.done else { return }
            let sent = uptimeNanos()
            self.send(op.kind, key: op.key, start: sent, retries: op.retries + 1)
            self.flush()
        }
    }

    /// Open loop: sends every request whose intended time has come, within `maxInFlight`.
    private func pump(now: UInt64) {
        guard let plan, let openLoop = plan.openLoop else { return }
        while issuing && outstanding.count < plan.maxInFlight && nextIntended <= now {
            guard issueNext(start: nextIntended, now: now) else { break }
            nextIntended += openLoop.interval
        }
        if issuing && tick == nil, let context {
            // Wake at the next intended time, but not more often than the tick.
            let wake = max(nextIntended, now + plan.tickNanos)
            tick = context.eventLoop.assumeIsolated().scheduleTask(deadline: NIODeadline.uptimeNanoseconds(wake)) {
                self.tick = nil
                self.pump(now: uptimeNanos())
                self.flush()
                self.finishIfDrained()
            }
        }
    }

    private func flush() {
        guard let context, out.readableBytes > 0 else { return }
        let size = out.readableBytes
        context.writeAndFlush(wrapOutboundOut(out), promise: nil)
        out = context.channel.allocator.buffer(capacity: max(4096, size))
    }

    // MARK: responses

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var incoming = unwrapInboundIn(data)
        if received == nil {
            received = incoming
        } else {
            received!.writeBuffer(&incoming)
        }
        let now = uptimeNanos()
        do {
            while let response = try codec.decode(&received!) {
                try complete(response, now: now)
            }
        } catch {
            report.addError("protocol: \(error.description)")
            loseOutstanding(as: "lost: protocol error on connection")
            finish(close: true)
            return
        }
        if received!.readableBytes == 0 {
            received = nil
        } else if received!.readerIndex > 1 << 16 {
            received!.discardReadBytes()
        }
        pump(now: now)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        flush()
        finishIfDrained()
    }

    private func complete(_ response: DecodedResponse, now: UInt64) throws(ProtocolViolation) {
        guard let op = outstanding.popFirst() else {
            throw ProtocolViolation(description: "response without a request")
        }
        if let opaque = response.opaque, opaque != op.opaque {
            throw ProtocolViolation(description: "opaque \(opaque) answers request \(op.opaque) (out of order)")
        }
        control.completed.add(1, ordering: .relaxed)
        let counted = op.start >= plan!.recordAfter
        switch response.outcome {
        case .ok:
            if counted {
                report.ok[op.kind.rawValue] += 1
                _ = report.latency[op.kind.rawValue].record(now &- op.start)
            }
        case .miss:
            if counted {
                report.misses += 1
                _ = report.latency[op.kind.rawValue].record(now &- op.start)
            }
        case .error(let kind):
            control.failed.add(1, ordering: .relaxed)
            if counted { report.addError("\(op.kind.name): \(kind)") }
        case .temporary(let kind):
            retryOrFail(op, kind, now: now, counted: counted)
        }
        if counted { report.lastCompletion = now }
        if plan!.openLoop == nil { _ = issueNext(start: now, now: now) }
    }

    // MARK: ending

    private func finishIfDrained() {
        if !issuing && outstanding.isEmpty && pendingRetries == 0 && plan != nil { finish(close: true) }
    }

    private func loseOutstanding(as kind: String) {
        if !outstanding.isEmpty {
            report.addError(kind, count: outstanding.count)
            control.failed.add(outstanding.count, ordering: .relaxed)
            outstanding.removeAll()
        }
        issuing = false
    }

    /// The phase's hard limit passed with requests still unanswered.
    private func abandon() {
        watchdog = nil
        loseOutstanding(as: "timeout: no response before the phase ended")
        if pendingRetries > 0 {
            report.addError("timeout: retry pending when the phase ended", count: pendingRetries)
            report.failedAfterRetries += pendingRetries
            control.failed.add(pendingRetries, ordering: .relaxed)
        }
        finish(close: true)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !done {
            report.addError("connection closed by peer")
            loseOutstanding(as: "lost: connection closed")
        }
        finish(close: false)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        report.addError("io: \(error)")
        loseOutstanding(as: "lost: connection error")
        finish(close: true)
    }

    private func finish(close: Bool) {
        guard !done else { return }
        done = true
        issuing = false
        tick?.cancel()
        watchdog?.cancel()
        promise?.succeed(report)
        if close { context?.close(promise: nil) }
    }
}
