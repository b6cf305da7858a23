import SetteeBLIP
import SetteeCore
import Synchronization
import Testing

/// Answers every request with its body reversed and its properties echoed plus `seen=<number>`.
struct EchoHandler: BLIPRequestHandler {
    func handle(_ request: BLIPMessage, peer: any BLIPPeer) async -> BLIPMessage {
        BLIPMessage(
            type: .response, compressed: request.compressed,
            properties: request.properties + [("seen", "\(request.number)")], body: request.body.reversed())
    }
}

/// Refuses everything (a side that only sends).
struct NoHandler: BLIPRequestHandler {
    func handle(_ request: BLIPMessage, peer: any BLIPPeer) async -> BLIPMessage {
        .error(answering: request.number, domain: "BLIP", code: 404, message: "no handler")
    }
}

/// Holds every request until released, or until its task is cancelled (a session that ends cancels its handlers and
/// awaits them: a gate deaf to cancellation held `run` open for good when the end found a request inside, so the flood
/// test hung whenever the session's dispatch took a request before the flood was counted), counting how many are
/// inside `handle` at once.
final class GateHandler: BLIPRequestHandler {
    private struct State {
        var inside = 0
        var most = 0
        var handled = 0
        var next = 0
        var gates: [(id: Int, continuation: CheckedContinuation<Void, Never>)] = []
        /// Calls cancelled before their gate was held: let through at once.
        var cancelled: Set<Int> = []
        var watchers: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }
    private let state = Mutex(State())

    func handle(_ request: BLIPMessage, peer: any BLIPPeer) async -> BLIPMessage {
        let id = state.withLock { s in
            s.next += 1
            return s.next
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (gate: CheckedContinuation<Void, Never>) in
                let (pass, woken) = state.withLock { s -> (Bool, [CheckedContinuation<Void, Never>]) in
                    s.inside += 1
                    s.most = max(s.most, s.inside)
                    if s.cancelled.remove(id) != nil { return (true, []) }
                    s.gates.append((id, gate))
                    let ready = s.watchers.filter { $0.count <= s.gates.count }
                    s.watchers.removeAll { $0.count <= s.gates.count }
                    return (false, ready.map(\.continuation))
                }
                if pass { gate.resume() }
                for w in woken { w.resume() }
            }
        } onCancel: {
            let gate = state.withLock { s -> CheckedContinuation<Void, Never>? in
                guard let i = s.gates.firstIndex(where: { $0.id == id }) else {
                    s.cancelled.insert(id)
                    return nil
                }
                return s.gates.remove(at: i).continuation
            }
            gate?.resume()
        }
        state.withLock {
            $0.inside -= 1
            $0.handled += 1
        }
        return BLIPMessage(type: .response, body: request.body)
    }

    /// Returns once `count` requests are held (inside `handle`, not released) together.
    func waitForHeld(_ count: Int) async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.gates.count >= count { return true }
                s.watchers.append((count, c))
                return false
            }
            if now { c.resume() }
        }
    }

    /// Lets one held request finish; false if none is held.
    func releaseOne() -> Bool {
        let gate = state.withLock { $0.gates.isEmpty ? nil : $0.gates.removeFirst().continuation }
        gate?.resume()
        return gate != nil
    }

    var most: Int { state.withLock { $0.most } }
}

/// Asks the peer back while handling: the server's answer is the client's answer to `whoAreYou`.
struct AskBackHandler: BLIPRequestHandler {
    func handle(_ request: BLIPMessage, peer: any BLIPPeer) async -> BLIPMessage {
        let back = try? await peer.send(BLIPMessage(properties: [("Profile", "whoAreYou")]))
        return BLIPMessage(type: .response, properties: [("they-said", back?["seen"] ?? "nothing")])
    }
}

@Suite struct BLIPSessionTests {
    @Test func requestsGetTheirResponsesConcurrently() async throws {
        // Proves the in-memory pair carries requests and their responses through the real codec: 50 concurrent sends of
        // random sizes (some past the ACK window, some compressed) each get the answer to their own request, a no-reply
        // request returns nil at once and is still handled, and closing the client ends both sides.
        let seed = UInt64.random(in: 0...UInt64.max)
        print("requestsGetTheirResponsesConcurrently seed \(seed)")
        let pair = BLIPSessionPair(client: NoHandler(), server: EchoHandler())
        let running = Task { await pair.run() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            var rng = SplitMix64(seed: seed)
            for i in 0..<50 {
                let size = [0, 10, 20_000, 300_000][Int(rng.next() % 4)]
                let body = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ i) }
                let compressed = rng.next() % 2 == 0
                group.addTask {
                    let request = BLIPMessage(compressed: compressed, properties: [("i", "\(i)")], body: body)
                    let answer = try #require(try await pair.client.send(request))
                    #expect(answer.type == .response)
                    #expect(answer["i"] == "\(i)")
                    #expect(answer.body == body.reversed(), "seed \(seed), request \(i)")
                }
            }
            try await group.waitForAll()
        }
        let none = try await pair.client.send(BLIPMessage(noReply: true, properties: [("Profile", "note")]))
        #expect(none == nil)
        await pair.client.close()
        let (clientEnd, serverEnd) = await running.value
        #expect(clientEnd == .closedLocally(code: 1000, reason: ""))
        #expect(serverEnd == .closedByPeer)
    }

    @Test func handlersRunAtMostTheConcurrencyBound() async throws {
        // Proves incoming requests are handled concurrently up to Limits.blipMaxConcurrentRequests and never more:
        // 40 requests held in their handler reach exactly that many inside at once, and releasing them one by one lets
        // the rest in without the count ever passing the bound; all 40 are answered.
        let gate = GateHandler()
        let bound = Limits.blipMaxConcurrentRequests
        try await withBLIPSessionPair(client: NoHandler(), server: gate) { pair in
            let answers = Task {
                try await withThrowingTaskGroup(of: Int.self) { group in
                    for i in 0..<40 {
                        group.addTask {
                            _ = try await pair.client.send(BLIPMessage(body: [UInt8(i)])); return 1
                        }
                    }
                    return try await group.reduce(0, +)
                }
            }
            await gate.waitForHeld(bound)
            var released = 0
            while released < 40 {
                if gate.releaseOne() {
                    released += 1
                } else {
                    await gate.waitForHeld(1)
                }
            }
            let answered = try await answers.value
            #expect(answered == 40)
        }
        #expect(gate.most == bound)
    }

    @Test func aHandlerCanAskThePeerBack() async throws {
        // Proves both directions work at once on one connection: the server's handler sends a request to the client
        // while the client waits for the server's answer, and the nested answer comes back through it.
        let answer = try await withBLIPSessionPair(client: EchoHandler(), server: AskBackHandler()) { pair in
            try await pair.client.send(BLIPMessage(properties: [("Profile", "hello")]))
        }
        #expect(answer?["they-said"] == "1")
    }

    @Test func aProtocolErrorEndsTheSessionAndFailsWaitingSenders() async throws {
        // Proves a peer's bad frame ends the session with that violation and its close code (1002), that a send
        // waiting for its answer then throws BLIPConnectionError.protocolError, and that later sends throw too.
        let (inbound, input) = AsyncStream<[UInt8]>.makeStream()
        let (written, writtenInput) = AsyncStream<[UInt8]>.makeStream()
        let session = BLIPSession(handler: NoHandler()) { frame in writtenInput.yield(frame) }
        let running = Task { await session.run(inbound: inbound) }
        let waiting = Task { try await session.send(BLIPMessage(properties: [("Profile", "x")])) }
        // Once the request's frame is out, the peer answers garbage.
        var frames = written.makeAsyncIterator()
        _ = await frames.next()
        input.yield([0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00])
        let end = await running.value
        guard case .protocolError(.checksumMismatch) = end else {
            Issue.record("ended \(end)")
            return
        }
        #expect(end.closeCode == 1002)
        await #expect(throws: BLIPConnectionError.self) { try await waiting.value }
        await #expect(throws: end.error) { try await session.send(BLIPMessage()) }
    }

    @Test func theTransportEndingFailsWaitingSendersWithClosed() async throws {
        // Proves that when the inbound sequence ends (the peer closed the WebSocket) the session ends `.closedByPeer`
        // with code 1000, a send waiting for its answer throws `.closed`, and a failing `sendFrame` ends a session with
        // `.transportFailed` (code 1011).
        let (inbound, input) = AsyncStream<[UInt8]>.makeStream()
        let (written, writtenInput) = AsyncStream<[UInt8]>.makeStream()
        let session = BLIPSession(handler: NoHandler()) { frame in writtenInput.yield(frame) }
        let running = Task { await session.run(inbound: inbound) }
        let waiting = Task { try await session.send(BLIPMessage(properties: [("Profile", "x")])) }
        var frames = written.makeAsyncIterator()
        _ = await frames.next()
        input.finish()
        let end = await running.value
        #expect(end == .closedByPeer && end.closeCode == 1000)
        await #expect(throws: BLIPConnectionError.closed) { try await waiting.value }

        struct Broken: Error {}
        let (never, _) = AsyncStream<[UInt8]>.makeStream()
        let failing = BLIPSession(handler: NoHandler()) { _ in throw Broken() }
        let failingRun = Task { await failing.run(inbound: never) }
        await #expect(throws: BLIPConnectionError.closed) { try await failing.send(BLIPMessage()) }
        let failedEnd = await failingRun.value
        guard case .transportFailed = failedEnd else {
            Issue.record("ended \(failedEnd)")
            return
        }
        #expect(failedEnd.closeCode == 1011)
    }

    @Test func aCancelledSendThrowsAndItsLateAnswerIsDropped() async throws {
        // Proves cancelling the task of a send waiting for its answer makes it throw CancellationError, and that the
        // answer arriving afterwards neither reaches anyone nor breaks the connection (the next send still works).
        let gate = GateHandler()
        try await withBLIPSessionPair(client: NoHandler(), server: gate) { pair in
            let waiting = Task { try await pair.client.send(BLIPMessage(body: [1])) }
            await gate.waitForHeld(1)
            waiting.cancel()
            await #expect(throws: CancellationError.self) { try await waiting.value }
            #expect(gate.releaseOne())
            let next = Task { try await pair.client.send(BLIPMessage(body: [2])) }
            await gate.waitForHeld(1)
            #expect(gate.releaseOne())
            let second = try await next.value
            #expect(second?.body == [2])
        }
    }

    @Test func aFloodOfRequestsPastTheWaitingBoundEndsTheSession() async throws {
        // Proves a peer sending complete requests faster than the handlers take them is cut off at the waiting bound
        // (close code 1008) instead of being buffered without end.
        let gate = GateHandler()
        let (inbound, input) = AsyncStream<[UInt8]>.makeStream()
        let session = BLIPSession(handler: gate, maxConcurrentRequests: 1, maxWaitingRequests: 3) { _ in }
        let running = Task { await session.run(inbound: inbound) }
        var crc: UInt32 = 0
        for n in 1...10 {
            let data = messageData([("Profile", "flood")])
            input.yield(handFrame(number: UInt64(n), flags: .noReply, data: data, crc: crc))
            crc = data.withUnsafeBytes { CRC32.update(crc, $0) }
        }
        let end = await running.value
        #expect(end == .protocolError(.tooManyWaitingRequests(limit: 3)))
        #expect(end.closeCode == 1008)
        while gate.releaseOne() {}
    }
}

/// Answers every request empty and, in `responded`, sends the peer a no-reply `followUp` request: the shape of a
/// gateway's `subChanges` (an empty response, then `changes` requests).
struct FollowUpHandler: BLIPRequestHandler {
    func handle(_ request: BLIPMessage, peer: any BLIPPeer) async -> BLIPMessage {
        BLIPMessage(type: .response)
    }

    func responded(to request: BLIPMessage, peer: any BLIPPeer) async {
        _ = try? await peer.send(BLIPMessage(noReply: true, properties: [("Profile", "followUp")]))
    }
}

@Suite struct BLIPSessionRespondedTests {
    @Test func workStartedInRespondedReachesThePeerAfterTheResponse() async throws {
        // Proves `responded(to:peer:)` runs only after the answer is queued, so a request it sends goes out behind the
        // response on the wire (pythonblip waits for `subChanges`' response before it serves `changes`; a gateway whose
        // feed raced its own response stalled it). Checked on the frames the session writes, in order.
        let (inbound, input) = AsyncStream<[UInt8]>.makeStream()
        let (written, writtenInput) = AsyncStream<[UInt8]>.makeStream()
        let session = BLIPSession(handler: FollowUpHandler()) { frame in writtenInput.yield(frame) }
        let running = Task { await session.run(inbound: inbound) }
        var client = BLIPConnection()
        _ = try client.enqueue(BLIPMessage(properties: [("Profile", "subChanges")]))
        while let frame = client.nextFrame() { input.yield(frame) }
        var frames = written.makeAsyncIterator()
        var types: [UInt8] = []
        while types.count < 2, let frame = await frames.next() {
            let parsed = try BLIPFrame.parse(frame, maxBytes: Limits.blipMaxFrameBytes)
            guard !parsed.isAck else { continue }
            types.append(parsed.flags.typeBits)
        }
        #expect(types == [1, 0], "the response (type 1) first, then the follow-up request (type 0)")
        input.finish()
        _ = await running.value
    }
}
