import Logging
import NIOCore
import NIOPosix
import SetteeClusterMap
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import SetteeStorage
import Synchronization

/// One KV connection: decodes pipelined frames straight from the read buffer, executes them against
/// the bucket engine on the event loop, and answers in request order.
///
/// Response ordering invariant: responses leave in the order requests arrived. While no operation is
/// waiting (for a disk fetch, persistence, or a blocking flush), responses are appended to `out` and
/// written once per read burst (`channelReadComplete`). Once one operation waits, every later
/// response is queued in `slots` behind it and drained in order as slots complete.
final class KVConnectionHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// A response whose bytes may not be known yet. Only touched on the connection's event loop;
    /// completions from storage threads hop to that loop first (`NIOLoopBound` enforces it), so the
    /// unchecked Sendable is safe.
    final class Slot: @unchecked Sendable {
        var buffer: ByteBuffer?
        var closeAfter = false
        /// Not in `slots`: answered whenever it completes (UnorderedExecution).
        var detached = false
        /// A durable write's timeout, cancelled by `complete`: a task left scheduled would hold its closure (and
        /// the memory it reaches) for the whole timeout after the write was answered.
        var timeout: Scheduled<Void>?
        init(buffer: ByteBuffer? = nil) { self.buffer = buffer }
    }

    let node: KVNode
    var state = ConnectionState()
    var inbound: ByteBuffer?
    var out: ByteBuffer
    var slots = CircularBuffer<Slot>()
    /// Detached slots (UnorderedExecution durable writes) still waiting.
    var detachedWaiting = 0
    /// Body bytes of an oversized frame still to discard.
    var swallow = 0
    var closing = false
    /// Mirrors the channel's activity (channelActive/Inactive), so flushing needs no channel lookup.
    var active = false
    var readPaused = false
    /// Reading and frame processing stop while this is set: the socket's unsent output passed the channel's
    /// high-water mark (`Limits.kvOutputHighWaterBytes`) or too many response bytes queue behind a waiting
    /// operation. Cleared when the channel turns writable again / the queue drains.
    var outputPaused = false
    /// Set while a SASL frame waits for the operation before it (a password check on the blocking pool) to
    /// finish: one connection never has more than one password check queued, however many logins it pipelines.
    var authPaused = false
    /// Whether the channel currently has autoRead on (every pause reason above turns it off).
    var autoReading = true
    /// Bytes of finished responses queued in `slots` behind one still waiting.
    var queuedBytes = 0
    /// Set while `flushOut` hands `out` to the channel. NIO may call `channelWritabilityChanged` from inside
    /// that write (the socket drained below the low-water mark); resuming frame processing right there would
    /// append answers to `out` before it is cleared and send the flushed bytes a second time. The resume waits
    /// for the write to return (`resumeAfterFlush`).
    var flushing = false
    /// A flush of `out` is queued on the event loop (`flushSoon`): completions that arrive in one loop tick
    /// leave in one write (ADR 0055).
    var flushScheduled = false
    var resumeAfterFlush = false
    /// Whether the connection authenticated or used a bucket. Until then it is a stranger: it must get there
    /// within `KVNode.handshakeDeadline` and, unless an open bucket exists, send only small frames.
    var established = false
    var handshakeTimer: Scheduled<Void>?
    /// PLAIN and SCRAM logins waiting in the login throttle's line: ticket → deadline (`checkPlain`, `scramFirst`).
    var loginWaits: [UInt64: Scheduled<Void>] = [:]
    /// The peer's address, kept as NIO gave it: its text (`remote`) is built only when a log line or a login needs
    /// it, not for every accepted connection (most of a connect flood never logs in; issue 16).
    var remoteAddress: SocketAddress?
    var remote: String { remoteAddress?.description ?? "?" }
    var context: ChannelHandlerContext?
    /// Last bucket lookup, valid while the registry's generation is unchanged.
    var cachedBucket: ResolvedBucket?
    /// The registry's `usersGeneration` when the roles of the connection's `.user` principal were resolved; nil for
    /// every other principal and before login (no user change can affect them, so they are never re-checked).
    var rolesGeneration: Int?
    /// Set once the connection sent DCP_OPEN(producer): its streams (see KVConnectionHandler+DCP).
    var dcp: DCPProducerState?
    /// Majority durability of the operation being executed: the vBucket's monitor and copies needed.
    var pendingMajority: (monitor: DurabilityMonitor, majority: Int)?
    /// The storage `inCollection` writes a named collection's engine key into, reused from request to request: a
    /// request handled at once has dropped its frame (the buffer's only other reference) before the next one, so the
    /// key is written without an allocation; a frame still held (a waiting durable write) keeps its own bytes, as
    /// `clear` then starts new storage. At most `CollectionKey.maxLogicalKeyLength` plus a prefix and the marker.
    var engineKeyBuffer = ByteBuffer()
    /// The named collection this connection's last request reached, with the registry generation it was checked
    /// against (`inCollection`): while both hold, a request to it is not checked against the manifest again. Reset
    /// whenever the connection's bucket changes (SELECT_BUCKET, a bucket principal's login, the bucket gone).
    var lastCollection: (generation: Int, id: UInt32)?

    /// The operation counters of this connection's event loop (set in `handlerAdded`).
    var ops: LoopCounters

    init(node: KVNode) {
        self.node = node
        self.out = ByteBuffer()
        self.ops = LoopCounters()
    }

    var logger: Logger { node.logger }

    // MARK: lifecycle

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        ops = node.counters.forLoop(context.eventLoop)
        // `out` stays the shared empty buffer until the first frame arrives (`channelRead`): an idle connection
        // (thousands, in a connect flood) costs no output storage.
        active = context.channel.isActive
    }

    func channelActive(context: ChannelHandlerContext) {
        active = true
        remoteAddress = context.remoteAddress
        let n = node.counters.currentConnections.wrappingAdd(1, ordering: .relaxed).newValue
        let sequence = node.counters.totalConnections.wrappingAdd(1, ordering: .relaxed).newValue
        if n > node.maxConnections {
            node.counters.rejectedConnections.wrappingAdd(1, ordering: .relaxed)
            logger.warning(
                "too many connections, closing", metadata: ["remote": "\(remote)", "limit": "\(node.maxConnections)"])
            context.close(promise: nil)
        } else if node.handshakeDeadline > .zero {
            let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
            let unit = HandshakeDeadline.unit(sequence: sequence)
            let delay = HandshakeDeadline.delay(base: node.handshakeDeadline, unit: unit)
            handshakeTimer = context.eventLoop.scheduleTask(in: delay) {
                bound.value.handshakeDeadlinePassed()
            }
        }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        active = false
        handshakeTimer?.cancel()
        handshakeTimer = nil
        node.counters.currentConnections.wrappingSubtract(1, ordering: .relaxed)
        closing = true
        self.context = nil
        withdrawLoginWaits()
        abandonScram()
        node.configPushes.unsubscribe(ObjectIdentifier(self))
        dcpClosed()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.debug("connection error", metadata: ["remote": "\(remote)", "error": "\(error)"])
        context.close(promise: nil)
    }

    /// Closes a connection that neither authenticated nor used an open bucket in time: an idle or
    /// half-sent stranger must not hold a descriptor.
    private func handshakeDeadlinePassed() {
        handshakeTimer = nil
        guard !checkEstablished(), !closing, let context else { return }
        node.counters.handshakeTimeouts.wrappingAdd(1, ordering: .relaxed)
        logger.info(
            "closing connection that did not authenticate in time",
            metadata: ["remote": "\(remote)", "deadline": "\(node.handshakeDeadline)"])
        closing = true
        context.close(promise: nil)
    }

    /// Whether the connection authenticated (SASL may finish off the event loop, after its frame was
    /// dispatched) or used a bucket; once true, stays true and the handshake deadline is cancelled.
    private func checkEstablished() -> Bool {
        if !established && (state.isAuthenticated || cachedBucket != nil) {
            established = true
            handshakeTimer?.cancel()
            handshakeTimer = nil
        }
        return established
    }

    /// The largest frame body accepted now: small for a stranger while no open bucket could serve it.
    private func currentMaxBody() -> Int {
        if checkEstablished() || node.registry.defaultUnauthenticatedBucket() != nil { return Limits.maxFrameBodySize }
        return Limits.kvUnauthenticatedMaxFrameBody
    }

    // MARK: reading

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var incoming = unwrapInboundIn(data)
        if closing { return }
        if out.capacity == 0 { out = context.channel.allocator.buffer(capacity: Self.outCapacity) }
        if swallow > 0 {
            let n = min(swallow, incoming.readableBytes)
            incoming.moveReaderIndex(forwardBy: n)
            swallow -= n
            if incoming.readableBytes == 0 { return }
        }
        if var buffered = inbound, buffered.readableBytes > 0 {
            buffered.writeBuffer(&incoming)
            inbound = buffered
        } else {
            inbound = incoming
        }
        processInbound(context: context)
    }

    private func processInbound(context: ChannelHandlerContext) {
        guard !outputPaused, !authPaused, var buffer = inbound else { return }
        inbound = nil  // keep the buffer uniquely referenced while we slice it
        warmLookups(buffer)
        while !closing {
            // Backpressure for every operation: a client that pipelines and never reads would otherwise
            // make the node hold every answer. Input stays unread (in `buffer`, then in the kernel).
            if out.readableBytes >= Self.outKeepCapacity { flushOut(context: context) }
            if queuedBytes > Limits.kvMaxQueuedResponseBytes || !context.channel.isWritable {
                outputPaused = true
                node.counters.outputPauses.wrappingAdd(1, ordering: .relaxed)
                applyReadInterest(context: context)
                break
            }
            if !slots.isEmpty, buffer.readableBytes >= Frame.headerLength,
                let opcode = buffer.getInteger(at: buffer.readerIndex + 1, as: UInt8.self),
                opcode == Opcode.saslAuth.rawValue || opcode == Opcode.saslStep.rawValue
            {
                authPaused = true
                applyReadInterest(context: context)
                break
            }
            let frame: Frame
            do {
                guard let f = try FrameDecoder.decode(&buffer, maxBodyLength: currentMaxBody()) else { break }
                frame = f
            } catch {
                switch error {
                case .bodyTooLarge(let h) where !established && h.bodyLength <= Limits.maxFrameBodySize:
                    protocolViolation(
                        context: context, reason: "frame of \(h.bodyLength) bytes before authentication")
                case .bodyTooLarge(let h):
                    node.counters.protocolErrors.wrappingAdd(1, ordering: .relaxed)
                    logger.notice(
                        "frame body over limit: answering E2BIG and skipping it",
                        metadata: ["remote": "\(remote)", "opcode": "\(h.opcode)", "bodyLength": "\(h.bodyLength)"])
                    emit {
                        $0.writeResponse(
                            opcode: h.opcode, status: .valueTooLarge, opaque: h.opaque, value: ErrorText.tooLarge)
                    }
                    buffer.moveReaderIndex(forwardBy: Frame.headerLength)
                    let available = min(buffer.readableBytes, h.bodyLength)
                    buffer.moveReaderIndex(forwardBy: available)
                    swallow = h.bodyLength - available
                    continue
                case .unknownMagic(let m):
                    protocolViolation(context: context, reason: "unknown magic 0x\(String(m, radix: 16))")
                case .inconsistentLengths(let h):
                    protocolViolation(
                        context: context, reason: "section lengths exceed body length (opcode \(h.opcode))")
                }
                return
            }
            if frame.magic != .clientRequest && frame.magic != .altClientRequest {
                // Responses to server pushes (0x83) are ignored; a client sending responses is confused,
                // except a DCP consumer answering the producer's NOOP / SET_VBUCKET_STATE.
                if frame.magic == .serverResponse || (dcp != nil && frame.magic == .clientResponse) { continue }
                protocolViolation(context: context, reason: "unexpected magic \(frame.magic.rawValue) from a client")
                return
            }
            dispatch(frame, context: context)
            if !established { _ = checkEstablished() }
        }
        if buffer.readableBytes > 0 {
            if buffer.readerIndex > 64 * 1024 { buffer.discardReadBytes() }
            inbound = buffer
        }
    }

    /// Starts the cache misses of the look-ups the whole requests in `buffer` will make, together (ADR 0114): a read
    /// of pipelined GETs then waits for its misses once instead of once per request. Only for two or more keyed
    /// requests on an established connection with a bucket; a hint, so it changes no answer.
    private func warmLookups(_ buffer: ByteBuffer) {
        guard established, buffer.readableBytes >= 2 * Frame.headerLength, let engine = cachedBucket?.engine else {
            return
        }
        let collections = state.collections
        buffer.withUnsafeReadableBytes { bytes in
            withUnsafeTemporaryAllocation(of: WarmKey.self, capacity: BucketEngine.warmCapacity) { keys in
                var n = 0
                FrameDecoder.forEachRequestKey(in: bytes) { vb, key in
                    var key = key
                    var leading: UInt8?
                    if collections {
                        // The default collection's keys (id 0, one LEB128 byte) are looked up without their prefix;
                        // a named collection's as the marker and the wire key (`inCollection`'s engine key when its
                        // prefix is canonical; any other key warms a slot it will not read, which changes nothing).
                        guard let first = key.first else { return true }
                        if first == 0 {
                            key = UnsafeRawBufferPointer(rebasing: key.dropFirst())
                        } else {
                            leading = CollectionKey.engineMarker
                        }
                    }
                    keys.initializeElement(at: n, to: WarmKey(vb: VBucketID(vb), leadingByte: leading, key: key))
                    n += 1
                    return n < keys.count
                }
                if n >= 2 { engine.warm(UnsafeBufferPointer(rebasing: keys[0..<n])) }
            }
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if flushing {
            resumeAfterFlush = true
        } else {
            resumeIfOutputDrained(context: context)
        }
        // DCP streams pause while the socket's send buffer is full (flow control towards slow readers).
        if context.channel.isWritable, let p = dcp {
            for vb in p.streams.keys { dcpStep(vb) }
        }
        context.fireChannelWritabilityChanged()
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        flushOut(context: context)
        context.fireChannelReadComplete()
    }

    private func protocolViolation(context: ChannelHandlerContext, reason: String) {
        node.counters.protocolErrors.wrappingAdd(1, ordering: .relaxed)
        logger.notice(
            "closing connection after malformed input", metadata: ["remote": "\(remote)", "reason": "\(reason)"])
        closing = true
        inbound = nil
        flushOut(context: context)
        context.close(promise: nil)
    }

    /// Resumes frame processing and reading once the socket takes output again and the queue behind a
    /// waiting operation is small.
    private func resumeIfOutputDrained(context: ChannelHandlerContext) {
        guard outputPaused, !closing, context.channel.isWritable,
            queuedBytes <= Limits.kvMaxQueuedResponseBytes / 2
        else { return }
        outputPaused = false
        processInbound(context: context)
        flushOut(context: context)
        applyReadInterest(context: context)
    }

    /// Turns autoRead on or off to match the two pause reasons (output backed up, too many pending slots).
    func applyReadInterest(context: ChannelHandlerContext) {
        let want = !(readPaused || outputPaused || authPaused)
        guard want != autoReading else { return }
        autoReading = want
        context.channel.setOption(ChannelOptions.autoRead, value: want).whenComplete { _ in }
        if want { context.read() }
    }

    // MARK: writing, in order

    /// Writes a response now, or queues it behind a waiting one.
    @inline(__always)
    func emit(_ body: (inout ByteBuffer) -> Void) {
        if slots.isEmpty {
            body(&out)
        } else {
            var b = ByteBuffer()
            body(&b)
            queuedBytes += b.readableBytes
            slots.append(Slot(buffer: b))
        }
    }

    /// Reserves the next response position for an operation that completes later.
    func reserveSlot() -> Slot {
        let slot = Slot()
        slots.append(slot)
        if slots.count > Limits.maxPendingResponsesPerConnection && !readPaused, let context {
            readPaused = true
            applyReadInterest(context: context)
        }
        return slot
    }

    /// A response position outside the ordered queue, for a durable write on a connection that negotiated
    /// UnorderedExecution: it leaves when done, whatever is before or after it. Past
    /// `Limits.maxPendingResponsesPerConnection` detached ones, an ordered slot (whose queue pauses reading).
    func reserveDetachedSlot() -> Slot {
        guard detachedWaiting < Limits.maxPendingResponsesPerConnection else { return reserveSlot() }
        let slot = Slot()
        slot.detached = true
        detachedWaiting += 1
        return slot
    }

    /// Completes a slot (on the event loop) and drains every finished response at the head.
    func complete(_ slot: Slot, _ buffer: ByteBuffer, closeAfter: Bool = false) {
        if let timeout = slot.timeout {
            timeout.cancel()
            slot.timeout = nil
            node.counters.durableTimeoutsScheduled.wrappingSubtract(1, ordering: .relaxed)
        }
        if slot.detached {
            slot.buffer = buffer
            detachedWaiting -= 1
            guard let context else { return }
            var b = buffer
            out.writeBuffer(&b)
            flushSoon(context: context)
            return
        }
        slot.buffer = buffer
        slot.closeAfter = closeAfter
        queuedBytes += buffer.readableBytes
        guard let context else { return }
        var shouldClose = false
        while let head = slots.first, var b = head.buffer {
            queuedBytes -= b.readableBytes
            out.writeBuffer(&b)
            slots.removeFirst()
            if head.closeAfter {
                shouldClose = true
                break
            }
        }
        if shouldClose { flushOut(context: context) } else { flushSoon(context: context) }
        if shouldClose {
            closing = true
            context.close(promise: nil)
        } else {
            if readPaused && slots.count < Limits.maxPendingResponsesPerConnection / 2 {
                readPaused = false
                applyReadInterest(context: context)
            }
            resumeIfOutputDrained(context: context)
            if authPaused && slots.isEmpty && !closing {
                authPaused = false
                processInbound(context: context)
                flushOut(context: context)
                applyReadInterest(context: context)
            }
            // DCP streams stop while too many response bytes wait behind this slot (DCPProducerState invariant 5).
            if dcp != nil { dcpQueueDrained() }
        }
    }

    /// The output buffer's usual size; one grown past `outKeepCapacity` (a large value) is not kept.
    static let outCapacity = 4096
    static let outKeepCapacity = 64 * 1024

    func flushOut(context: ChannelHandlerContext) {
        guard out.readableBytes > 0, active, !flushing else { return }
        flushing = true
        let sentUpTo = out.writerIndex
        context.writeAndFlush(wrapOutboundOut(out), promise: nil)
        flushing = false
        if out.writerIndex > sentUpTo {
            // Something answered from inside the write (a handler NIO called while flushing): those bytes
            // follow the sent ones in `out` (copy-on-write kept the sent ones intact); send only them.
            out.moveReaderIndex(to: sentUpTo)
            flushOut(context: context)
        } else if out.capacity > Self.outKeepCapacity {
            out = context.channel.allocator.buffer(capacity: Self.outCapacity)
        } else {
            // Reused: the write normally finished inside writeAndFlush, so the storage is ours again. If
            // the socket was full, NIO still holds it and clear() moves us to fresh storage (copy-on-write).
            out.clear()
        }
        if resumeAfterFlush {
            resumeAfterFlush = false
            resumeIfOutputDrained(context: context)
        }
    }

    /// Sends whatever is queued, then closes (QUIT).
    func closeAfterPending(context: ChannelHandlerContext) {
        if slots.isEmpty {
            closing = true
            flushOut(context: context)
            context.close(promise: nil)
        } else {
            let s = reserveSlot()
            complete(s, ByteBuffer(), closeAfter: true)
        }
    }
}
