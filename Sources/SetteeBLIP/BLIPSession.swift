import SetteeCore

/// The async driver of one BLIP connection over any transport that carries binary messages in order (a server's or a
/// client's WebSocket, or memory): it feeds inbound frames to a `BLIPConnection`, writes the frames it produces,
/// answers incoming requests with a `BLIPRequestHandler`, and is the `BLIPPeer` its handler (or anyone) sends
/// requests through. No sockets: the shell gives it an inbound sequence and a `sendFrame` closure, and closes its
/// socket with `End.closeCode` when `run(inbound:)` returns.
///
/// ```
/// let session = BLIPSession(handler: handler) { frame in try await outbound.write(.binary(ByteBuffer(bytes: frame))) }
/// let end = await session.run(inbound: binaryMessages)   // returns when either side ends the connection
/// try await outbound.close(code(end.closeCode), reason: end.reason)
/// ```
///
/// Concurrency: incoming requests are handled concurrently, at most `Limits.blipMaxConcurrentRequests` at a time
/// (more complete requests wait in arrival order, at most `Limits.blipMaxWaitingRequests`; past that the peer is
/// flooding and the session ends with a protocol error). Responses go out as the handlers finish, in any order (BLIP
/// Protocol 3.0, §2). Senders wait while `Limits.blipMaxQueuedOutgoingBytes` are queued.
public actor BLIPSession: BLIPPeer {
    /// Why a session ended, and how the shell should close its WebSocket (RFC 6455 §7.4.1 codes).
    public enum End: Sendable, Equatable {
        /// The inbound sequence finished: the peer closed the transport.
        case closedByPeer
        /// `close(code:reason:)` was called (and the frames queued before it were written).
        case closedLocally(code: UInt16, reason: String)
        /// The peer broke the protocol (§3.8) or a bound; the shell closes with `violation.closeCode`.
        case protocolError(BLIPProtocolViolation)
        /// The inbound sequence threw or `sendFrame` failed.
        case transportFailed(String)

        /// The WebSocket close code to send (when the transport is still open): 1000 for a normal close, the local
        /// code, the violation's 1002/1008/1009, 1011 for a transport failure.
        public var closeCode: UInt16 {
            switch self {
            case .closedByPeer: return 1000
            case .closedLocally(let code, _): return code
            case .protocolError(let violation): return violation.closeCode
            case .transportFailed: return 1011
            }
        }

        /// A close reason text (at most 123 bytes, as a WebSocket close frame allows).
        public var reason: String {
            let text: String
            switch self {
            case .closedByPeer: text = ""
            case .closedLocally(_, let reason): text = reason
            case .protocolError(let violation): text = violation.description
            case .transportFailed(let why): text = why
            }
            var out = ""
            for c in text where out.utf8.count + String(c).utf8.count <= 123 { out.append(c) }
            return out
        }

        /// What pending senders and `send` after the end throw.
        public var error: BLIPConnectionError {
            if case .protocolError(let violation) = self { return violation.connectionError }
            return .closed
        }
    }

    private let handler: any BLIPRequestHandler
    private let sendFrame: @Sendable ([UInt8]) async throws -> Void
    private let maxConcurrentRequests: Int
    private let maxWaitingRequests: Int
    private var connection: BLIPConnection
    private var started = false
    private var closing: (code: UInt16, reason: String)?
    private var ended: End?
    private var responseWaiters: [UInt64: CheckedContinuation<BLIPMessage, any Error>] = [:]
    /// Senders waiting for out-box room, first come first served (`waitForRoom`); `id` finds a cancelled one.
    private var roomWaiters: [(id: UInt64, bytes: Int, continuation: CheckedContinuation<Void, any Error>)] = []
    private var lastRoomWaiterID: UInt64 = 0
    private var writerWaiter: CheckedContinuation<Void, Never>?
    private var endWaiters: [CheckedContinuation<End, Never>] = []
    private var waitingRequests = 0
    private let requests: AsyncStream<BLIPMessage>
    private let requestsInput: AsyncStream<BLIPMessage>.Continuation
    private var reader: Task<Void, Never>?

    /// - Parameters:
    ///   - handler: answers the peer's requests (`handle` is called once per complete request).
    ///   - configuration: frame sizes, flow control and bounds (defaults: `Limits.blip*`).
    ///   - maxConcurrentRequests: handler calls running at once (`Limits.blipMaxConcurrentRequests`).
    ///   - maxWaitingRequests: complete requests waiting for a slot before the peer counts as flooding.
    ///   - sendFrame: writes one frame as one binary WebSocket message; called from one task at a time, in order.
    ///     A throw ends the session (`.transportFailed`).
    public init(
        handler: any BLIPRequestHandler, configuration: BLIPConnection.Configuration = .init(),
        maxConcurrentRequests: Int = Limits.blipMaxConcurrentRequests,
        maxWaitingRequests: Int = Limits.blipMaxWaitingRequests,
        sendFrame: @escaping @Sendable ([UInt8]) async throws -> Void
    ) {
        self.handler = handler
        self.sendFrame = sendFrame
        self.maxConcurrentRequests = max(1, maxConcurrentRequests)
        self.maxWaitingRequests = max(1, maxWaitingRequests)
        connection = BLIPConnection(configuration: configuration)
        (requests, requestsInput) = AsyncStream<BLIPMessage>.makeStream()
    }

    // MARK: Running

    /// Runs the session until it ends: reads `inbound` (each element one binary WebSocket message), writes frames
    /// through `sendFrame`, runs the handler. Returns why it ended; by then every pending `send` has thrown and every
    /// handler task has been cancelled and awaited. Call it once.
    public func run<Inbound: AsyncSequence & Sendable>(inbound: Inbound) async -> End
    where Inbound.Element == [UInt8] {
        precondition(!started, "BLIPSession.run(inbound:) called twice")
        started = true
        if ended == nil {
            // Unstructured, so a transport that ignores cancellation cannot hold `run` open after the end; the shell
            // closing its socket ends it.
            reader = Task { await self.read(inbound) }
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await self.writeLoop() }
                group.addTask { await self.dispatchLoop() }
                _ = await self.waitUntilEnded()
                group.cancelAll()
            }
        }
        return ended ?? .closedByPeer
    }

    /// Waits for the session's end (returns at once if it has ended).
    public func waitUntilEnded() async -> End {
        if let ended { return ended }
        return await withCheckedContinuation { endWaiters.append($0) }
    }

    /// The end, once the session has ended.
    public var end: End? { ended }

    /// Ends the session: new sends throw `BLIPConnectionError.closed`, the frames already queued are written (a
    /// message waiting for an ACK is not), then `run` returns `.closedLocally(code:reason:)`.
    public func close(code: UInt16 = 1000, reason: String = "") {
        guard ended == nil, closing == nil else { return }
        closing = (code, reason)
        wakeWriter()
    }

    private func read<Inbound: AsyncSequence>(_ inbound: Inbound) async where Inbound.Element == [UInt8] {
        do {
            for try await frame in inbound {
                if ended != nil { return }
                received(frame)
            }
            finish(.closedByPeer)
        } catch {
            finish(Task.isCancelled ? .closedByPeer : .transportFailed("inbound: \(error)"))
        }
    }

    private func received(_ frame: [UInt8]) {
        guard ended == nil else { return }
        let messages: [BLIPMessage]
        do {
            messages = try connection.receive(frame: frame)
        } catch {
            finish(.protocolError(error))
            return
        }
        for message in messages {
            switch message.type {
            case .request:
                waitingRequests += 1
                if waitingRequests > maxWaitingRequests {
                    finish(.protocolError(.tooManyWaitingRequests(limit: maxWaitingRequests)))
                    return
                }
                requestsInput.yield(message)
            case .response, .error:
                responseWaiters.removeValue(forKey: message.number)?.resume(returning: message)
            case .ackRequest, .ackResponse:
                break
            }
        }
        // ACKs may be due, and an ACK received may have resumed a paused message.
        wakeWriter()
    }

    private func writeLoop() async {
        while let frame = await nextFrame() {
            do {
                try await sendFrame(frame)
            } catch {
                finish(.transportFailed("sending a frame: \(error)"))
                return
            }
        }
    }

    private func nextFrame() async -> [UInt8]? {
        while ended == nil {
            if let frame = connection.nextFrame() {
                wakeRoomWaiters()
                return frame
            }
            if let closing {
                finish(.closedLocally(code: closing.code, reason: closing.reason))
                return nil
            }
            await withCheckedContinuation { writerWaiter = $0 }
        }
        return nil
    }

    private func wakeWriter() {
        writerWaiter?.resume()
        writerWaiter = nil
    }

    private func dispatchLoop() async {
        await withTaskGroup(of: Void.self) { group in
            var running = 0
            for await request in requests {
                if running >= maxConcurrentRequests {
                    await group.next()
                    running -= 1
                }
                guard takeWaitingRequest() else { break }
                running += 1
                group.addTask { await self.handle(request) }
            }
            group.cancelAll()
        }
    }

    /// Counts a request as taken by a handler slot; false once the session has ended (queued requests are dropped).
    private func takeWaitingRequest() -> Bool {
        waitingRequests -= 1
        return ended == nil
    }

    private func handle(_ request: BLIPMessage) async {
        let answer = await handler.handle(request, peer: self)
        guard ended == nil else { return }
        guard !request.noReply else {
            await handler.responded(to: request, peer: self)
            return
        }
        var response = answer
        response.number = request.number
        if response.type != .error { response.type = .response }
        // An urgent request's answer is urgent too, as LiteCore's MessageBuilder makes it.
        response.urgent = response.urgent || request.urgent
        do {
            try await waitForRoom(Self.estimatedBytes(response))
            guard ended == nil else { return }
            do {
                try connection.enqueue(response)
            } catch {
                // The handler's answer cannot be framed (a NUL inside a property): the peer gets an error instead.
                try connection.enqueue(
                    .error(answering: request.number, domain: "BLIP", code: 500, message: error.description))
            }
            wakeWriter()
        } catch {
            // The session ended while the answer waited for room.
            return
        }
        await handler.responded(to: request, peer: self)
    }

    private func finish(_ end: End) {
        guard ended == nil else { return }
        ended = end
        let error = end.error
        for (_, waiter) in responseWaiters { waiter.resume(throwing: error) }
        responseWaiters = [:]
        for waiter in roomWaiters { waiter.continuation.resume(throwing: error) }
        roomWaiters = []
        wakeWriter()
        requestsInput.finish()
        for waiter in endWaiters { waiter.resume(returning: end) }
        endWaiters = []
        reader?.cancel()
    }

    // MARK: Sending

    /// Sends `request` (numbered by the connection; its `number` and `type` are ignored, it goes as a request) and
    /// waits for the peer's response or error message. Returns nil once a `noReply` request is queued.
    /// - Throws: `BLIPConnectionError.closed` when the session ends (or has ended, or is closing) first,
    ///   `.protocolError` when it ended on a protocol violation or the request cannot be framed (a NUL in a
    ///   property); `CancellationError` when the calling task is cancelled while it waits (a late answer is dropped).
    public func send(_ request: BLIPMessage) async throws -> BLIPMessage? {
        var message = request
        message.type = .request
        try await waitForRoom(Self.estimatedBytes(message))
        if let ended { throw ended.error }
        if closing != nil { throw BLIPConnectionError.closed }
        let number: UInt64
        do {
            number = try connection.enqueue(message)
        } catch {
            throw error.connectionError
        }
        wakeWriter()
        if message.noReply { return nil }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<BLIPMessage, any Error>) in
                if let ended {
                    c.resume(throwing: ended.error)
                } else if Task.isCancelled {
                    c.resume(throwing: CancellationError())
                } else {
                    responseWaiters[number] = c
                }
            }
        } onCancel: {
            Task { await self.cancelWaiter(number) }
        }
    }

    private func cancelWaiter(_ number: UInt64) {
        responseWaiters.removeValue(forKey: number)?.resume(throwing: CancellationError())
    }

    /// Returns once the out-box has room for `bytes` more (`BLIPConnection.hasRoom(for:)`), after every sender that
    /// came first. Nothing is reserved while waiting: the caller enqueues after it returns, so a waiter that leaves
    /// holds no bytes of the out-box, only its place in the line.
    /// - Throws: the session's end error once it ends (or `closed` while closing); `CancellationError` when the
    ///   calling task is cancelled while it waits: it leaves the line at once (the waiters behind it are woken if
    ///   they now fit), without waiting for room or for the session to end.
    private func waitForRoom(_ bytes: Int) async throws {
        if let ended { throw ended.error }
        if closing != nil { throw BLIPConnectionError.closed }
        if roomWaiters.isEmpty && connection.hasRoom(for: bytes) { return }
        try Task.checkCancellation()
        lastRoomWaiterID &+= 1
        let id = lastRoomWaiterID
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                if let ended {
                    c.resume(throwing: ended.error)
                } else if Task.isCancelled {
                    c.resume(throwing: CancellationError())
                } else {
                    roomWaiters.append((id, bytes, c))
                }
            }
        } onCancel: {
            Task { await self.cancelRoomWaiter(id) }
        }
    }

    /// Takes a cancelled sender out of the line (if it is still in it: room or the end may have come first).
    private func cancelRoomWaiter(_ id: UInt64) {
        guard let i = roomWaiters.firstIndex(where: { $0.id == id }) else { return }
        roomWaiters.remove(at: i).continuation.resume(throwing: CancellationError())
        // It may have been the head of the line holding smaller messages back.
        wakeRoomWaiters()
    }

    /// Senders waiting for out-box room now (for tests of flow control).
    var sendersWaitingForRoom: Int { roomWaiters.count }

    /// Message bytes queued in the out-box and not yet framed (`BLIPConnection.queuedOutgoingBytes`): what
    /// `Limits.blipMaxQueuedOutgoingBytes` bounds. A message paused for the peer's ACK keeps its unsent bytes here.
    public var queuedOutgoingBytes: Int { connection.queuedOutgoingBytes }

    private func wakeRoomWaiters() {
        while let first = roomWaiters.first, connection.hasRoom(for: first.bytes) {
            roomWaiters.removeFirst().continuation.resume()
        }
    }

    private static func estimatedBytes(_ message: BLIPMessage) -> Int {
        message.properties.reduce(BLIPVarint.maxLength + message.body.count) {
            $0 + $1.name.utf8.count + $1.value.utf8.count + 2
        }
    }
}
